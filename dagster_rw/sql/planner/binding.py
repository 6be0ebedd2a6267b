"""Binding expressions to a plan's columns, their types, and the projections and filters (Map
nodes) every other part of the planner builds on."""
from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from ... import types as sqltypes
from ...engine.duck import quote
from ...errors import ProgrammingError, unsupported
from ..plan import Col, Map, Node, cname
from ..non_strict import non_strict
from ..function_catalog import FUNCTION_NAME
from ..rewrites.context import Context
from ..rewrites.jsonb_functions import TO_JSONB
from ..semantics import (JSON_TYPES, jsonb_constants, jsonb_operators, jsonb_typed_operators, regexp_match_groups,
                         typed_expression, values_as_json)
from ..syntax import AGG_FUNCS, output_name, star_except, star_of
from .scope import AliasOnly, Entry, Scope


_JSON_READERS = (exp.JSONExtract, exp.JSONExtractScalar, exp.JSONBExtract, exp.JSONBExtractScalar)
_JSON_BUILDERS = (exp.JSONObject, exp.JSONArray, exp.JSONArrayAgg, exp.JSONObjectAgg)
# jsonb functions a view computes (sql/semantics.jsonb_operators translates them)
_JSONB_FUNCTIONS = ("jsonb_typeof", "jsonb_array_length", "jsonb_strip_nulls", "jsonb_extract_path",
                    "jsonb_extract_path_text", "jsonb_set", "jsonb_insert", "jsonb_pretty")


def _ancestors(node: exp.Expression):
    while node.parent is not None:
        node = node.parent
        yield node


def _temporal_place(fn: exp.Expression, comparison: exp.Expression) -> str:
    """Where, or in what shape, a time function compared with a column stands (for the refusal)."""
    if not isinstance(fn, exp.CurrentTimestamp) and fn.name.lower() == "proctime":
        return "(proctime() is the time a row is processed, not a barrier's: use now())"
    for a in _ancestors(fn):
        if isinstance(a, exp.Or):
            return "under OR"
        if isinstance(a, exp.Join):
            return "in a join condition"
        if isinstance(a, exp.Having):
            return "in HAVING"
        if isinstance(a, (exp.Select, exp.Where)):
            break
    if isinstance(comparison, (exp.EQ, exp.NEQ)):
        return f"by {'=' if isinstance(comparison, exp.EQ) else '<>'}"
    return "on a side that is not now() plus or minus a constant"


def refuse_aggregates(planner: Context, e: exp.Expression, where: str) -> None:
    for n in e.walk():
        if type(n) in AGG_FUNCS:
            raise ProgrammingError(f"aggregate functions are not allowed in {where}{planner.where(n)}")


class Binding:
    """Planner methods that bind expressions to a node's columns and build Map nodes."""

    def where(self, node) -> str:
        from ...errors import _position

        return _position(self.sql, node)

    def refuse(self, construct: str, node=None) -> ProgrammingError:
        return unsupported(construct, self.sql, node, self.obj)

    def bind(self, expression: exp.Expression, scope: Scope) -> exp.Expression:
        """Rewrite column references to the node's positional names; refuse what cannot be maintained."""
        for sub in expression.find_all(exp.Subquery, exp.Exists):
            raise self.refuse("subqueries inside expressions", sub)
        for srf in expression.find_all(exp.Unnest, exp.Explode, exp.GenerateSeries):
            raise self.refuse(f"the set-returning function {srf.sql(dialect='postgres')} in an expression "
                              "(it would turn one row into several)", srf)
        for w in expression.find_all(exp.Window):
            raise self.refuse("window functions (OVER) outside the select list, or nested", w)
        # (over no FROM an expression is evaluated once, when the view is created: any function will do)
        if scope.entries:
            self.check_deterministic(expression)
        self.check_jsonb(expression)

        def rewrite(node):
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                entry = scope.resolve(node, self)
                return exp.column(cname(entry.index))
            return node

        expression = jsonb_operators(jsonb_constants(regexp_match_groups(expression)),
                                     lambda node, what: self._refuse_jsonb(node, what))
        return expression.copy().transform(rewrite)

    def _refuse_jsonb(self, node, what: str):
        raise self.refuse(what, node)

    def check_jsonb(self, expression: exp.Expression) -> None:
        """A view keeps, compares, groups and counts jsonb values, reads into them (`->`, `->>`,
        `#>`, `#>>`, `@>`, `<@`, jsonb_typeof) and builds them with the functions the rewrite rule
        jsonb_functions_as_calls turns into calls; other JSON functions, and casts of text to jsonb
        row by row, are refused by name."""
        for node in expression.walk():
            shown = None
            if isinstance(node, _JSON_BUILDERS):
                shown = node.sql(dialect="postgres")
            elif isinstance(node, (exp.Anonymous, exp.Func)) and not isinstance(node, (exp.Cast, *_JSON_READERS)) \
                    and node.sql_name().lower().startswith(("json", "to_json")) \
                    and node.sql_name().lower() not in _JSONB_FUNCTIONS:
                shown = f"{node.sql_name().lower()}(...)"
            elif isinstance(node, exp.Cast) and node.to.this in JSON_TYPES and not (
                    isinstance(node.this, exp.Literal) and node.this.is_string):
                shown = node.sql(dialect="postgres")
            if shown is not None:
                raise self.refuse(f"{shown}: this JSON function, or casts of non-constant text to jsonb, in a view "
                                  "(a view reads jsonb with ->, ->>, #>, #>>, @>, <@, ?, ?|, ?&, jsonb_typeof, "
                                  "jsonb_array_length, jsonb_extract_path[_text], jsonb_strip_nulls and jsonb_pretty, "
                                  "changes it with ||, -, #-, jsonb_set and jsonb_insert and builds it with "
                                  "jsonb_build_object, jsonb_build_array, to_jsonb, jsonb_agg and jsonb_object_agg)",
                                  node)

    def check_deterministic(self, expression: exp.Expression) -> None:
        """Refuse the first call of `expression` whose value a delta cannot follow."""
        for fn in expression.find_all(exp.Anonymous):
            if fn.name.lower() in ("now", "random", "proctime", "current_timestamp", "gen_random_uuid"):
                self.refuse_non_deterministic(fn, f"{fn.name}()")
        for fn in expression.find_all(exp.CurrentTimestamp, exp.Rand):
            written = fn.meta_get(FUNCTION_NAME)
            self.refuse_non_deterministic(fn, f"{written}()" if written else fn.sql(dialect="postgres"))

    def refuse_non_deterministic(self, fn: exp.Expression, shown: str):
        """Refuse a call whose value a delta cannot follow. A time function compared with a column
        is a temporal filter in a shape the planner does not maintain (sql.planner.temporal_filters
        takes the others out of WHERE before binding): named as such, with the shape and what to
        do instead."""
        is_time = isinstance(fn, exp.CurrentTimestamp) or fn.name.lower() in ("now", "proctime", "current_timestamp")
        comparison = next((a for a in _ancestors(fn) if isinstance(a, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT,
                                                                        exp.LTE, exp.Between))), None)
        if is_time and comparison is not None and comparison.find(exp.Column) is not None:
            raise self.refuse(f"temporal filters ({shown} compared with a column {_temporal_place(fn, comparison)}); "
                              "a view maintains them as conjuncts of its WHERE comparing a date or timestamp "
                              "expression with now() plus or minus a constant interval (<, <=, >, >=, BETWEEN); "
                              f"or filter by {shown} in a SELECT over the view", fn)
        if is_time:
            raise self.refuse(f"{shown} in a view (its value would be the time each row was computed, never "
                              "updated); select it in a query over the view", fn)
        raise self.refuse(f"the non-deterministic function {shown}", fn)

    def describe(self, child: Node, exprs: list[exp.Expression], where: exp.Expression | None) -> list[str]:
        """Result types of expressions over the child's columns, inferred by DuckDB on empty input."""
        schema = pa.schema([pa.field(cname(i), sqltypes.typing_arrow_type(c.type)) for i, c in enumerate(child.columns)])
        empty = sqltypes.empty_table(schema)
        select = ", ".join(f"{e.sql(dialect='duckdb')} AS {quote(f'o{i}')}" for i, e in enumerate(exprs))
        cond = f" WHERE {where.sql(dialect='duckdb')}" if where is not None else ""
        try:
            described = self.engine.describe(f"SELECT {select} FROM t{cond}", t=empty)
        except ProgrammingError as e:
            raise ProgrammingError(f"in {self.obj!r}: {e}") from None
        return [sqltypes.from_duckdb(t) for _, t in described]

    def compile_non_strict(self, root: Node) -> None:
        """Give every Map of the plan its non-strict form (sql.non_strict): in a view, a value that
        cannot be computed is NULL and counted, where a batch SELECT fails."""
        for node in root.walk():
            if isinstance(node, Map) and node.child is not None:
                child = node.child
                schema = pa.schema([pa.field(cname(i), sqltypes.typing_arrow_type(c.type)) for i, c in enumerate(child.columns)])

                def duck_types(exprs, empty=sqltypes.empty_table(schema)):
                    select = ", ".join(f"{e.sql(dialect='duckdb')} AS {quote(f'o{i}')}" for i, e in enumerate(exprs))
                    return [t for _, t in self.engine.describe(f"SELECT {select} FROM t", t=empty)]

                node.non_strict = non_strict(node.exprs, node.where, duck_types,
                                             {cname(i): c.name for i, c in enumerate(child.columns)})

    def type_of(self, node: Node, e: exp.Expression) -> str:
        """The SQL type of one expression over the node's columns."""
        return self.describe(node, [typed_expression(e, {cname(i): c.type for i, c in enumerate(node.columns)})],
                             None)[0]

    def map(self, child: Node, exprs, where, names, keep_hidden=None) -> Map:
        column_types = {cname(i): c.type for i, c in enumerate(child.columns)}

        def type_of(x):
            if isinstance(x, exp.Column):
                return column_types.get(x.name)
            return None if x.find(exp.Anonymous) and any(  # (a value's JSON text is not written yet)
                n.name.lower() == TO_JSONB for n in x.find_all(exp.Anonymous)) else self.type_of(child, x)

        def jsonb_ready(e):  # (the operators first: a value built into a jsonb may be their result)
            e = jsonb_typed_operators(e, type_of, lambda node, what: self._refuse_jsonb(node, what))
            return values_as_json(e, type_of, lambda node, what: self._refuse_jsonb(node, what))

        exprs = [typed_expression(jsonb_ready(e), column_types) for e in exprs]
        if where is not None:
            where = typed_expression(jsonb_ready(where), column_types)
        types = self.describe(child, exprs, where) if exprs else []
        hidden = keep_hidden or [False] * len(exprs)
        cols = [Col(n, t, h) for n, t, h in zip(names, types, hidden)]
        # a pure filter keeps the child's stream key positions
        key = list(child.stream_key) if all(
            isinstance(e, exp.Column) and e.name == cname(i) for i, e in enumerate(exprs)) and all(
            k < len(exprs) for k in child.stream_key) else []
        return Map(columns=cols, stream_key=key, child=child, exprs=exprs, where=where)

    def project(self, child: Node, exprs, names, extra=None, where=None) -> Map:
        """Project `exprs` (visible) and carry the child's stream key, hidden where not projected."""
        exprs = list(exprs)
        names = list(names)
        hidden = [False] * len(exprs)
        for e in extra or []:
            exprs.append(e)
            names.append(f"_rw_o{len(exprs)}")
            hidden.append(True)
        key = []
        for k in child.stream_key:
            pos = next((i for i, e in enumerate(exprs)
                        if isinstance(e, exp.Column) and e.name == cname(k) and not e.table), None)
            if pos is None:
                exprs.append(exp.column(cname(k)))
                names.append(f"_rw_k{len(exprs)}")
                hidden.append(True)
                pos = len(exprs) - 1
            key.append(pos)
        node = self.map(child, exprs, where, names, hidden)
        node.stream_key = key
        return node

    def with_columns(self, node: Node, extra: list[exp.Expression]) -> Map:
        """The node's columns plus hidden computed ones (same positions, same stream key)."""
        exprs = [exp.column(cname(i)) for i in range(len(node.columns))] + extra
        names = [c.name for c in node.columns] + [f"_rw_j{i}" for i in range(len(extra))]
        hidden = [c.hidden for c in node.columns] + [True] * len(extra)
        m = self.map(node, exprs, None, names, hidden)
        m.stream_key = list(node.stream_key)
        return m

    def expand_star(self, items, scope: Scope) -> list[tuple[exp.Expression, str]]:
        """The select list with each `*` and `x.*` as the columns it covers, but those its
        EXCEPT (column, ...) names (each bound in the FROM clause's scope, as RisingWave binds them:
        a name no FROM item has, or more than one has, is an error)."""
        out = []
        for item in items:
            star = star_of(item)
            if star is None:
                out.append((item.unalias() if isinstance(item, exp.Alias) else item, output_name(item)))
                continue
            try:
                excepted = star_except(star)
            except ProgrammingError as e:
                raise ProgrammingError(f"{e}{self.where(item)}") from None
            if isinstance(item, exp.Star):
                covered = [e for e in scope.entries if not isinstance(e, AliasOnly)]
            else:
                table = item.table
                covered = [e for e in scope.entries if e.alias == table]
                if not covered:
                    raise ProgrammingError(f'missing FROM-clause entry for table "{table}"{self.where(item)}')
            dropped: set[int] = set()
            for c in excepted:
                index = scope.resolve(c, self).index
                if index in dropped:
                    raise ProgrammingError(f'duplicate column "{c.name}" in the EXCEPT list of *{self.where(c)}')
                dropped.add(index)
            out.extend((exp.column(e.name, e.alias) if e.alias else exp.column(e.name), e.name)
                       for e in covered if e.index not in dropped)
        return out

    def scope_of(self, node: Node, names: list[str], alias, group) -> Scope:
        vis = [i for i, c in enumerate(node.columns) if not c.hidden]
        return Scope([Entry(alias, names[j], i, group) for j, i in enumerate(vis)])
