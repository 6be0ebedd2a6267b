"""From a parsed SELECT to a logical plan: bind names, split joins, place aggregates, derive stream keys.

Anything the incremental operators cannot maintain is refused here, at CREATE time, with a
ProgrammingError that names the construct and its position.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import sqlglot
from sqlglot import exp

from ... import types as sqltypes
from ...engine.duck import DuckEngine, quote
from ...errors import ProgrammingError, unsupported
from ..plan import (
    ORDERED_AGGS,
    VIEW_COLUMNS,
    Agg,
    Aggregate,
    Col,
    DynamicFilter,
    Join,
    LookupJoin,
    Map,
    Node,
    OrderKey,
    OverWindow,
    ProjectSet,
    Scan,
    TopN,
    UnionAll,
    Values,
    WindowCloseAggregate,
    WindowCloseFilter,
    agg_text,
    cname,
    number_nodes,
    prune_columns,
)
from .. import rewrites
from ..semantics import regexp_match_groups, typed_expression
from ..syntax import (
    AGG_FUNCS,
    SUBQUERY_ALIAS,
    WINDOW_AGGS,
    WINDOW_FUNCS,
    and_terms,
    columns_only,
    derived,
    find_aggs,
    nested_queries,
    output_name,
    own_columns,
    transform_top_down,
    without_windows,
)
from ..syntax import output_name as _output_name  # noqa: F401 - the name dbapi imports from here

_INT_TYPES = ("smallint", "integer", "bigint")


@dataclass
class Entry:
    alias: str | None
    name: str
    index: int
    group: int  # which FROM group the column came from (for comma-join planning)


class Scope:
    def __init__(self, entries: list[Entry]):
        self.entries = entries

    def shifted(self, by: int) -> Scope:
        return Scope([e if isinstance(e, _OneRowSide) else Entry(e.alias, e.name, e.index + by, e.group)
                      for e in self.entries])

    def resolve(self, col: exp.Column, ctx: Planner) -> Entry:
        name = col.name
        table = col.table
        if table:
            found = [e for e in self.entries if e.alias == table and e.name == name]
            if not found and not any(e.alias == table for e in self.entries):
                raise ProgrammingError(f'missing FROM-clause entry for table "{table}"{ctx.where(col)}')
        else:
            found = [e for e in self.entries if e.name == name and not isinstance(e, _AliasOnly)]
        if not found:
            label = f"{table}.{name}" if table else name
            raise ProgrammingError(f'column "{label}" does not exist{ctx.where(col)}')
        if len(found) > 1:
            raise ProgrammingError(f'column reference "{name}" is ambiguous{ctx.where(col)}')
        if isinstance(found[0], _OneRowSide):
            raise ctx.refuse(f'the column "{name}" of the one-row side of a dynamic filter outside its '
                             "comparison (a change of that row would change every output row)", col)
        return found[0]


class Planner:
    """Plans one query against a catalog. `resolve_object(name)` returns a CatalogObject or None."""

    def __init__(self, resolve_object, sql: str, obj_name: str | None = None, engine: DuckEngine | None = None):
        self.resolve_object = resolve_object
        self.sql = sql
        self.obj = obj_name
        self.engine = engine or DuckEngine(threads=1)
        self.inputs: list[str] = []
        self.ctes: dict[str, exp.Expression] = {}
        self._group_counter = 0
        self._subquery_counter = 0  # FROM items made of subqueries of WHERE (subquery_join)
        # window Maps of TUMBLE/HOP: id(node) -> (time column in the child, window_start, window_end, size)
        self.window_maps: dict[int, tuple[int, int, int, int]] = {}

    # -- helpers -------------------------------------------------------------------------------
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
        for fn in expression.find_all(exp.Anonymous) if scope.entries else ():
            if fn.name.lower() in ("now", "random", "proctime", "current_timestamp", "gen_random_uuid"):
                raise self.refuse(f"the non-deterministic function {fn.name}()", fn)
        for fn in expression.find_all(exp.CurrentTimestamp, exp.Rand) if scope.entries else ():
            raise self.refuse(f"the non-deterministic function {fn.sql(dialect='postgres')}", fn)

        def rewrite(node):
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                entry = scope.resolve(node, self)
                return exp.column(cname(entry.index))
            return node

        return regexp_match_groups(expression).copy().transform(rewrite)

    def describe(self, child: Node, exprs: list[exp.Expression], where: exp.Expression | None) -> list[str]:
        """Result types of expressions over the child's columns, inferred by DuckDB on empty input."""
        schema = pa.schema([pa.field(cname(i), sqltypes.arrow_type(c.type)) for i, c in enumerate(child.columns)])
        empty = schema.empty_table()
        select = ", ".join(f"{e.sql(dialect='duckdb')} AS {quote(f'o{i}')}" for i, e in enumerate(exprs))
        cond = f" WHERE {where.sql(dialect='duckdb')}" if where is not None else ""
        try:
            described = self.engine.describe(f"SELECT {select} FROM t{cond}", t=empty)
        except ProgrammingError as e:
            raise ProgrammingError(f"in {self.obj!r}: {e}") from None
        return [sqltypes.from_duckdb(t) for _, t in described]

    def type_of(self, node: Node, e: exp.Expression) -> str:
        """The SQL type of one expression over the node's columns."""
        return self.describe(node, [typed_expression(e, {cname(i): c.type for i, c in enumerate(node.columns)})],
                             None)[0]

    # -- queries -------------------------------------------------------------------------------
    def plan(self, query: exp.Expression, emit_on_window_close: bool = False) -> Node:
        node, _names = self.plan_query(query)
        if emit_on_window_close:
            node = self.emit_on_window_close(node, query)
        self.refuse_array_keys(node)
        return prune_columns(number_nodes(node))

    def refuse_array_keys(self, root: Node) -> None:
        """Refuse an array column wherever rows are keyed, grouped, matched or ordered by it (GROUP
        BY, DISTINCT, set operations, join keys, ORDER BY, window partitions, MIN/MAX, COUNT
        DISTINCT): state files are sorted and searched by such columns, and lists cannot be."""
        def check(node: Node, cols, what: str) -> None:
            for i in cols:
                c = node.columns[i]
                if c.type.endswith("[]"):
                    raise self.refuse(f"an array column ({c.name}, {c.type}) as {what}")

        for node in root.walk():
            if isinstance(node, Join):
                check(node.left, node.left_keys, "a join key")
                check(node.right, node.right_keys, "a join key")
            elif isinstance(node, Aggregate):
                check(node.child, node.group, "a GROUP BY key")
                for a in node.aggs:
                    if a.func in ("min", "max") or a.distinct:
                        check(node.child, [a.arg], f"the argument of {a.func.upper()}"
                                                   f"{'(DISTINCT ...)' if a.distinct else ''}")
                    check(node.child, [o for o, _, _ in a.order], "an aggregate's ORDER BY key")
            elif isinstance(node, (TopN, OverWindow)):
                check(node.child, [o.column for o in node.order], "an ORDER BY key")
                check(node.child, getattr(node, "partition", []), "a PARTITION BY key")
            elif isinstance(node, DynamicFilter):
                check(node.left, [node.column], "a compared column")
            check(node, node.stream_key, "a key of the view's rows (GROUP BY, DISTINCT, a set operation)")

    # -- EMIT ON WINDOW CLOSE --------------------------------------------------------------------
    def emit_on_window_close(self, root: Node, query) -> Node:
        """Replace the view's aggregation by one that emits each window once, when it closes."""
        chain, node = [], root
        while isinstance(node, Map):
            chain.append(node)
            node = node.child
        if not isinstance(node, Aggregate):
            eowc = self.window_close_filter(node, query)
            if not chain:
                return eowc
            chain[-1].child = eowc
            return root
        if node.is_global:
            raise self.refuse("EMIT ON WINDOW CLOSE on anything but GROUP BY a TUMBLE/HOP window "
                              "(filters and projections above it are fine)", query)
        bad = [a for a in node.aggs if a.distinct and a.func != "count"]
        if bad:
            raise self.refuse(f"{bad[0].func}(DISTINCT ...) with EMIT ON WINDOW CLOSE", query)
        bad = [a for a in node.aggs if a.func in ORDERED_AGGS]
        if bad:
            raise self.refuse(f"{bad[0].func.upper()}(...) with EMIT ON WINDOW CLOSE", query)
        for g in node.group:
            origin = self.window_origin(node.child, g)
            if origin is not None:
                source, size, is_start = origin
                break
        else:
            raise self.refuse("EMIT ON WINDOW CLOSE without window_start or window_end of a TUMBLE/HOP over "
                              "a source's WATERMARK column in GROUP BY", query)
        eowc = WindowCloseAggregate(columns=node.columns, stream_key=node.stream_key, child=node.child,
                                    group=node.group, aggs=node.aggs, window=g, window_is_start=is_start,
                                    size_us=size, source=source)
        if not chain:
            return eowc
        chain[-1].child = eowc
        return root

    def window_close_filter(self, node: Node, query) -> WindowCloseFilter:
        """EMIT ON WINDOW CLOSE without GROUP BY: the rows, each emitted once the watermark passes
        the event time it carries (a WATERMARK column of a table or source, passed through)."""
        found = [(i, self.watermark_source(node, i)) for i in range(len(node.columns))]
        found = [(i, src) for i, src in found if src]
        if not found:
            raise self.refuse("EMIT ON WINDOW CLOSE over rows without the WATERMARK column of a table or "
                              "source (or without GROUP BY a TUMBLE/HOP window)", query)
        if not self.append_only(node):
            raise self.refuse("EMIT ON WINDOW CLOSE over rows that may be updated or deleted (an APPEND ONLY "
                              "table or a source can be used)", query)
        col, source = found[0]
        return WindowCloseFilter(columns=list(node.columns), stream_key=list(node.stream_key), child=node,
                                 column=col, source=source)

    def window_origin(self, node: Node, col: int):
        """(source, window size, is window_start) when column `col` of `node` is the start or end of
        a TUMBLE/HOP window over a source's watermark column, passed through filters, projections,
        unions of HOP branches and joins; None otherwise."""
        if isinstance(node, Map):
            info = self.window_maps.get(id(node))
            if info is not None and col in (info[1], info[2]):
                source = self.watermark_source(node.child, info[0])
                return (source, info[3], col == info[1]) if source else None
            e = node.exprs[col]
            if isinstance(e, exp.Column) and not e.table and e.name.startswith("c"):
                return self.window_origin(node.child, int(e.name[1:]))
            return None
        if isinstance(node, UnionAll):
            if col >= node.visible:
                return None
            found = {self.window_origin(i, col) for i in node.inputs}
            return found.pop() if len(found) == 1 else None
        if isinstance(node, Join):
            n = len(node.left.columns)
            return self.window_origin(node.left, col) if col < n else self.window_origin(node.right, col - n)
        return None

    def watermark_source(self, node: Node, col: int) -> str | None:
        """The source whose WATERMARK column `col` of `node` is (through filters, projections, joins)."""
        if isinstance(node, Scan):
            obj = self.resolve_object(node.source)
            wm = (obj.options or {}).get("watermark_column") if obj is not None else None
            return node.source if wm and node.columns[col].name == wm else None
        if isinstance(node, Map):
            e = node.exprs[col]
            if isinstance(e, exp.Column) and not e.table and e.name.startswith("c"):
                return self.watermark_source(node.child, int(e.name[1:]))
            return None
        if isinstance(node, Join):
            n = len(node.left.columns)
            return self.watermark_source(node.left, col) if col < n else self.watermark_source(node.right, col - n)
        if isinstance(node, ProjectSet):  # the select list's other columns pass through
            return self.watermark_source(node.child, col) if col < node.width and col != node.position else None
        return None

    def plan_query(self, query: exp.Expression) -> tuple[Node, list[str]]:
        """Plan a query (the view's, or one nested in it): the rewrite rules first, then its CTEs
        are noted and it is planned as a UNION or a SELECT."""
        if isinstance(query, exp.Subquery):
            return self.plan_query(query.this)
        query = rewrites.apply(query, self)
        with_ = query.args.get("with_")
        if with_ is not None:
            if with_.args.get("recursive"):
                raise self.refuse("WITH RECURSIVE", with_)
            for cte in with_.expressions:
                self.ctes[cte.alias_or_name] = cte.this
        if isinstance(query, exp.Union):
            return self.plan_union(query)
        if not isinstance(query, exp.Select):
            raise self.refuse(f"{type(query).__name__} as a query", query)
        return self.plan_select(query)

    def output_names(self, query: exp.Expression) -> list[str]:
        """The output column names of a query (planned on the side, to learn them)."""
        return list(self.probe().plan_query(query)[1])

    def check_column_aliases(self, item: exp.Expression, available: int) -> None:
        """A column alias list (`AS x (a, b)`) names at most as many columns as the relation has
        (PostgreSQL), and a view's column list exactly as many as its query returns."""
        alias = item.args["alias"]
        given = len(alias.columns)
        if alias.name == VIEW_COLUMNS:
            if given != available:
                subject = f" of {self.obj!r}" if self.obj else ""
                raise ProgrammingError(f"the column list{subject} names {given} columns but its query returns "
                                       f"{available}{self.where(item)}")
        elif given > available:
            subject = f"in {self.obj!r}: " if self.obj else ""
            raise ProgrammingError(f'{subject}table "{alias.name}" has {available} columns available but {given} '
                                   f"columns specified{self.where(item)}")

    def plan_union(self, query: exp.Union) -> tuple[Node, list[str]]:
        if query.args.get("by_name"):  # (CORRESPONDING is rewritten) DuckDB's BY NAME: NULL where a side lacks it
            raise self.refuse("UNION ... BY NAME", query)
        parts = []

        def flatten(q):
            if isinstance(q, exp.Union) and not q.args.get("distinct") and not q.args.get("order") \
                    and not q.args.get("limit") and not q.args.get("by_name"):
                flatten(q.this)
                flatten(q.expression)
            else:
                parts.append(q)

        distinct = bool(query.args.get("distinct"))
        if distinct:
            parts = [query.this, query.expression]
        else:
            flatten(query.this)
            flatten(query.expression)
        planned = [self.plan_query(p) for p in parts]
        first, names = planned[0]
        width = len(names)
        vis_types = [c.type for c in first.columns if not c.hidden]
        inputs = []
        for node, pnames in planned:
            if len(pnames) != width:
                raise ProgrammingError(f"each UNION query must have the same number of columns{self.where(query)}")
            vis = [i for i, c in enumerate(node.columns) if not c.hidden]
            casts = []
            for j, i in enumerate(vis):
                e = exp.column(cname(i))
                if node.columns[i].type != vis_types[j]:
                    e = exp.cast(e, sqltypes.duckdb_type(vis_types[j]), dialect="duckdb")
                casts.append(e)
            exprs = casts + [exp.column(cname(k)) for k in node.stream_key]
            cols = [Col(n, t) for n, t in zip(names, vis_types)] + [
                Col(f"_rw_k{j}", node.columns[k].type, True) for j, k in enumerate(node.stream_key)]
            inputs.append(Map(columns=cols, stream_key=list(range(width, len(cols))), child=node, exprs=exprs))
        columns = [Col(n, t) for n, t in zip(names, vis_types)] + [Col("_rw_branch", "integer", True)]
        key = [width]
        for b, m in enumerate(inputs):
            for j in m.stream_key:
                key.append(len(columns))
                columns.append(Col(f"_rw_u{b}_{j - width}", m.columns[j].type, True))
        node: Node = UnionAll(columns=columns, stream_key=key, inputs=inputs, visible=width)
        if distinct:
            node = self.distinct(node, width, names)
        return self.order_limit(node, names, query, None)

    def plan_select(self, q: exp.Select) -> tuple[Node, list[str]]:
        for key in ("qualify", "windows", "connect", "prewhere"):
            if q.args.get(key):
                raise self.refuse(key.upper(), q.args[key])
        conjuncts = list(and_terms(q.args["where"].this)) if q.args.get("where") else []
        if q.args.get("from_"):
            q, conjuncts, late = self.scalar_subqueries(q, conjuncts)
            q, conjuncts, anti = self.subquery_predicates(q, conjuncts)
            node, scope, conjuncts = self.plan_from(q, conjuncts, late + anti)
            # the subqueries' key columns: reachable by their aliases only (not by *)
            scope = Scope([_AliasOnly(e) if (e.alias or "").startswith(SUBQUERY_ALIAS) else e
                           for e in scope.entries])
        else:  # SELECT without FROM reads one row of no (visible) columns
            if q.args.get("joins"):
                raise self.refuse("a JOIN without FROM", q.args["joins"][0])
            node, scope = Values(columns=[Col("_rw_one", "integer", True)], stream_key=[]), Scope([])
        if conjuncts:
            cond = exp.and_(*[self.bind(c, scope) for c in conjuncts]) if len(conjuncts) > 1 \
                else self.bind(conjuncts[0], scope)
            _refuse_aggregates(self, cond, "WHERE")
            node = self.map(node, [exp.column(cname(i)) for i in range(len(node.columns))], cond,
                            [c.name for c in node.columns], keep_hidden=[c.hidden for c in node.columns])
        select_items = self.expand_star(q.expressions, scope)
        windows = self.window_calls(select_items)
        if windows:
            if q.args.get("group") or q.args.get("having") or any(
                    find_aggs(without_windows(e)) for e, _ in select_items):
                raise self.refuse("window functions together with GROUP BY or aggregates in the same SELECT",
                                  windows[0])
            node, names = self.plan_windows(q, node, scope, select_items, windows)
            if q.args.get("distinct"):
                node = self.distinct(node, len(names), names)
            return self.order_limit(node, names, q, select_items)
        has_aggs = any(find_aggs(e) for e, _ in select_items) or q.args.get("group") or q.args.get("having")
        srf = next((f for e, _ in select_items for f in e.find_all(*_SET_RETURNING)), None)
        if srf is not None and has_aggs:
            raise self.refuse(f"the set-returning function {srf.sql(dialect='postgres')} together with GROUP BY "
                              "or aggregates in the same SELECT (a subquery can aggregate its rows)", srf)
        if srf is not None:
            node, names = self.plan_project_set(q, node, scope, select_items)
        elif has_aggs:
            node, names = self.plan_aggregate(q, node, scope, select_items)
        else:
            exprs = [self.bind(e, scope) for e, _ in select_items]
            names = [n for _, n in select_items]
            order_extra = self.order_exprs_over_input(q, scope, select_items)
            node = self.project(node, exprs, names, extra=order_extra)
        if q.args.get("distinct"):
            node = self.distinct(node, len(names), names)
        return self.order_limit(node, names, q, select_items)

    def plan_project_set(self, q: exp.Select, node: Node, scope: Scope, select_items) -> tuple[Node, list[str]]:
        """A select list with one set-returning function as a whole item: `unnest(array)` or
        `generate_series(start, stop[, step])` over integers with a constant step (ProjectSet)."""
        calls = [(i, e) for i, (e, _) in enumerate(select_items) if any(e.find_all(*_SET_RETURNING))]
        for _, e in calls:
            inner = next(e.find_all(*_SET_RETURNING))
            if inner is not e or any(next(a.find_all(*_SET_RETURNING), None) for a in e.iter_expressions()):
                raise self.refuse(f"the set-returning function {inner.sql(dialect='postgres')} inside an expression "
                                  "(it can be a whole select item)", inner)
        if len(calls) > 1:
            raise self.refuse("more than one set-returning function in a select list", calls[1][1])
        pos, call = calls[0]
        if self.order_exprs_over_input(q, scope, select_items):
            raise self.refuse("ORDER BY an expression that is not in the select list, beside a set-returning "
                              "function", q.args["order"])
        exprs = [self.bind(e, scope) if i != pos else None for i, (e, _) in enumerate(select_items)]
        names = [n for _, n in select_items]
        step = 1
        if isinstance(call, exp.GenerateSeries):
            kind = "series"
            if call.args.get("step") is not None:
                raw = call.args["step"]
                negative = isinstance(raw, exp.Neg)
                literal = raw.this if negative else raw
                if not (isinstance(literal, exp.Literal) and not literal.is_string and literal.name.isdigit()):
                    raise self.refuse("a step of generate_series that is not an integer constant", raw)
                step = -int(literal.name) if negative else int(literal.name)
                if step == 0:
                    raise ProgrammingError(f"step size cannot equal zero (generate_series in {self.obj!r})"
                                           f"{self.where(call)}")
            exprs[pos] = self.bind(call.args["start"], scope)
            extra = [self.bind(call.args["end"], scope)]
        else:
            kind = "unnest"
            args = [call.this] + list(call.expressions) if isinstance(call, exp.Explode) else list(call.expressions)
            if len(args) != 1:
                raise self.refuse("unnest with more than one argument", call)
            exprs[pos] = self.bind(args[0], scope)
            extra = []
        # the input's stream key, from the select list where it passes a key column through, else carried
        key_at, carried = [], []
        for k in node.stream_key:
            at = next((i for i, e in enumerate(exprs) if i != pos and isinstance(e, exp.Column)
                       and e.name == cname(k) and not e.table), None)
            if at is None:
                at = len(exprs) + len(carried)
                carried.append(k)
            key_at.append(at)
        keys = [exp.column(cname(k)) for k in carried]
        hidden = [False] * len(exprs) + [True] * (len(extra) + len(keys))
        inner_names = names + [f"_rw_stop{i}" for i in range(len(extra))] + [node.columns[k].name for k in carried]
        child = self.map(node, exprs + extra + keys, None, inner_names, hidden)
        types = [c.type for c in child.columns]
        if kind == "unnest":
            if not types[pos].endswith("[]"):
                raise self.refuse(f"unnest of a {types[pos]} (not an array)", call)
            value_type = types[pos][:-2]
        else:
            ints = ("smallint", "integer", "bigint")
            if types[pos] not in ints or types[len(exprs)] not in ints:
                raise self.refuse(f"generate_series over {types[pos]} and {types[len(exprs)]} (integers only)", call)
            value_type = "bigint" if "bigint" in (types[pos], types[len(exprs)]) else "integer"
        n, width = len(exprs), len(exprs) + len(extra)
        columns = [Col(c.name, value_type if i == pos else c.type) for i, c in enumerate(child.columns[:n])]
        columns += [Col(c.name, c.type, True) for c in child.columns[width:]] + [Col("_rw_ordinal", "bigint", True)]
        return ProjectSet(columns=columns, stream_key=key_at + [len(columns) - 1], child=child, kind=kind,
                          position=pos, width=n, step=step), names

    def scalar_subqueries(self, q: exp.Select, conjuncts: list) -> tuple[exp.Select, list, list]:
        """`x > (SELECT max(y) FROM u)` in WHERE (also >=, <, <=, =): the subquery becomes one
        more FROM item, compared by column, so a dynamic filter (or, for =, a join) maintains it.
        The subquery must return one column and at most one row whatever its input. A subquery
        correlated by equalities with the outer query (`(SELECT avg(y) FROM u WHERE u.k = t.k)`)
        becomes a join with its aggregate grouped by the correlated expressions (correlated_scalar);
        returned third: the LEFT JOINs of those that count, which plan_from applies last."""
        found = False
        out, extra, late = [], [], []
        for c in conjuncts:
            if isinstance(c, (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ)):
                for side in ("this", "expression"):
                    sub = c.args.get(side)
                    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
                        continue
                    if len(sub.this.expressions) != 1 or isinstance(sub.this.expressions[0], exp.Star):
                        raise ProgrammingError(f"subquery must return only one column{self.where(sub)}")
                    correlated = self.correlated_scalar(sub.this, sub)
                    if correlated is not None:  # one value per outer row: a join with the grouped aggregate
                        right, outer_exprs, counts = correlated
                        # no matching row counts 0: a left join, NULL read as 0; other aggregates are
                        # NULL there, which no comparison passes: an inner join
                        q, alias = self.subquery_join(q, right, outer_exprs, extra, late, left=counts)
                        value = exp.column("_rw_v", alias)
                        if counts:
                            value = exp.func("coalesce", value, exp.Literal.number(0))
                        c = c.copy()
                        c.set(side, value)
                        continue
                    if not _at_most_one_row(self.probe().plan_query(sub.this)[0]):
                        raise self.refuse("a scalar subquery that may return more than one row (one that "
                                          "aggregates without GROUP BY, or has LIMIT 1, can be maintained)", sub)
                    if not found:
                        q, found = q.copy(), True
                    alias = f"_rw_scalar{len(q.args.get('joins') or [])}"
                    q.append("joins", exp.Join(this=derived(sub.this.copy(), alias, ["value"])))
                    c = c.copy()
                    c.set(side, exp.column("value", alias))
            out.append(c)
        return q, out + extra, late

    def subquery_predicates(self, q: exp.Select, conjuncts: list) -> tuple[exp.Select, list, list]:
        """`EXISTS (subquery)`, `NOT EXISTS (subquery)` and `x IN (subquery)` as conjuncts of WHERE,
        as joins with the subquery's distinct keys: a semi-join is an inner join with the distinct
        values of the subquery's correlated expressions (each outer row matches at most one), an
        anti-join a left join with them keeping the rows that found none. The subquery may be
        correlated by equalities between its own expressions and the outer query's; other
        correlations, NOT IN (whose NULLs make it differ from NOT EXISTS) and subqueries elsewhere
        in an expression are refused. Returns the query with the semi-joins as FROM items, the
        conjuncts (the subqueries replaced by key equalities, or for an anti-join by a test that no
        row matched) and the anti-joins' LEFT JOINs, which plan_from applies last."""
        out, late = [], []
        for c in conjuncts:
            negated = isinstance(c, exp.Not)
            inner = c.this if negated else c
            if isinstance(inner, exp.In) and isinstance(inner.args.get("query"), exp.Subquery):
                if negated:
                    raise self.refuse("NOT IN (subquery) (a NULL among its values makes it differ from NOT "
                                      "EXISTS; write NOT EXISTS)", c)
                sub, pairs = self.in_subquery(inner)
            elif isinstance(inner, exp.Exists) and isinstance(inner.this, exp.Select):
                sub, pairs = inner.this, []
            else:
                out.append(c)
                continue
            right, outer_exprs = self.correlated_keys(sub, pairs, anti=negated, node=c, outer_query=q)
            q, alias = self.subquery_join(q, right, outer_exprs, out, late, left=negated)
            if negated:
                out.append(exp.column("_rw_m", alias).is_(exp.null()))
        return q, out, late

    def subquery_join(self, q: exp.Select, right: exp.Select, outer_exprs: list, conjuncts: list, late: list,
                      left: bool) -> tuple[exp.Select, str]:
        """Join `right` (a subquery whose columns _rw_k0, _rw_k1, ... are keyed by `outer_exprs`) to
        the query under a fresh alias: as one more FROM item with the key equalities added to
        `conjuncts` (an inner join, which plan_from plans with the other FROM items), or with
        `left` as a LEFT JOIN on them put in `late`, which plan_from applies after every FROM item.
        Returns the query (a copy) and the alias."""
        alias = f"{SUBQUERY_ALIAS}{self._subquery_counter}"
        self._subquery_counter += 1
        item = derived(right, alias)
        on = [exp.EQ(this=o.copy(), expression=exp.column(f"_rw_k{i}", alias)) for i, o in enumerate(outer_exprs)]
        q = q.copy()
        if left:
            late.append(exp.Join(this=item, side="LEFT", on=exp.and_(*on)))
        else:
            q.append("joins", exp.Join(this=item))
            conjuncts.extend(on)
        return q, alias

    def in_subquery(self, e: exp.In) -> tuple[exp.Select, list]:
        """`x IN (subquery)` as an EXISTS subquery and its extra correlation (its one column = x)."""
        sub = e.args["query"].this
        if isinstance(sub, exp.Select) and (len(sub.expressions) != 1 or isinstance(sub.expressions[0], exp.Star)):
            raise ProgrammingError(f"subquery has too many columns{self.where(e)}")
        simple = isinstance(sub, exp.Select) and not any(
            sub.args.get(k) for k in ("group", "having", "limit", "offset", "distinct", "with")) and not any(
            find_aggs(x) for x in sub.expressions) and not self.window_calls([(x, None) for x in sub.expressions])
        if not simple:  # a UNION, a grouped or limited SELECT: its rows as they are, matched by value
            sub = exp.select("_rw_v").from_(derived(sub.copy(), "_rw_in", ["_rw_v"]))
        value = sub.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        return sub, [(value, e.this)]

    def probe(self) -> Planner:
        """A planner over the same catalog and CTEs, to plan a piece of the query on its own."""
        probe = Planner(self.resolve_object, self.sql, self.obj, self.engine)
        probe.ctes = dict(self.ctes)
        return probe

    def from_entries(self, sub: exp.Select) -> tuple[Planner, list]:
        """A probe planner and the names the FROM items of `sub` bring (each item on its own: how
        they join is the subquery's affair)."""
        probe = self.probe()
        entries = []
        for item in [sub.args["from_"].this] + [j.this for j in sub.args.get("joins") or []]:
            entries.extend(probe.plan_item(item)[1].entries)
        return probe, entries

    def split_correlation(self, sub: exp.Select, node, residuals: list | None = None) -> tuple[list, list]:
        """A subquery's WHERE conjuncts split into its own conditions (their columns resolve in its
        FROM, the nearer scope, as SQL resolves them) and its correlations: (inner, outer) pairs of
        expressions it equates with the outer query's. With `residuals` (a list), other comparisons
        (=, <>, <, <=, >, >=) between its own columns and the outer query's are put there, each
        with the outer columns it reads: (condition, [outer columns]). Other references to the
        outer query are refused."""
        if not sub.args.get("from_") or not sub.args.get("where"):
            return [], []
        probe, entries = self.from_entries(sub)
        inner_scope = Scope(entries)
        using = any(j.args.get("using") for j in sub.args.get("joins") or [])  # (USING merges its columns)

        def local(e: exp.Expression) -> bool:
            # its own columns, and the references of the subqueries nested in it to enclosing
            # queries, all resolve in the subquery's FROM (a nested subquery correlated with this
            # one is planned with it)
            nested = nested_queries(e)
            if not nested:
                cols = list(e.find_all(exp.Column))
                return not cols or _resolves(probe, e, inner_scope)
            own_cols = own_columns(e)
            return (not own_cols or _resolves(probe, columns_only(own_cols), inner_scope)) and all(
                _resolves(probe, columns_only(free), inner_scope)
                for free in (self.free_columns(n) for n in nested) if free)

        def outer(e: exp.Expression) -> bool:  # none of its columns is a name of the subquery's FROM
            cols = list(e.find_all(exp.Column))
            return bool(cols) and not any(
                entry.name == col.name and (not col.table or entry.alias == col.table)
                for col in cols for entry in entries)

        own, keys = [], []
        for c in and_terms(sub.args["where"].this):
            for col in c.find_all(exp.Column):  # as SQL does: a name two FROM items of the subquery bring
                if not col.table and not using and sum(e.name == col.name for e in entries) > 1:
                    raise ProgrammingError(f'column reference "{col.name}" is ambiguous{self.where(col)}')
            if local(c):
                own.append(c)
            elif isinstance(c, exp.EQ) and local(c.this) and outer(c.expression):
                keys.append((c.this, c.expression))
            elif isinstance(c, exp.EQ) and local(c.expression) and outer(c.this):
                keys.append((c.expression, c.this))
            elif residuals is not None and isinstance(c, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)) \
                    and not nested_queries(c) and not find_aggs(c):
                # a comparison reading both sides: NULL in an outer column makes it unknown, so it
                # matches nothing (what correlated_keys' join on the outer values relies on)
                theirs = [col for col in c.find_all(exp.Column) if not _resolves(probe, col, inner_scope)]
                residuals.append((c, theirs))
            else:
                raise self.refuse("a condition of a subquery that refers to the outer query other than as "
                                  "an equality of its own expression with the outer query's, or (in EXISTS "
                                  "and IN) a comparison of them", c)
        for inner, _ in keys:
            if find_aggs(inner):
                raise self.refuse("an aggregate in a subquery's correlation", inner)
        return own, keys

    def free_columns(self, sub: exp.Expression) -> list[exp.Column]:
        """The columns of a subquery (and of those nested in it) that its own FROM does not bring:
        its references to the queries around it."""
        if isinstance(sub, exp.Subquery):
            return self.free_columns(sub.this)
        if not isinstance(sub, exp.Select):  # a UNION: the free columns of each side
            return [c for n in nested_queries(sub) for c in self.free_columns(n)]
        own_cols = own_columns(sub)
        nested = [c for n in nested_queries(sub) for c in self.free_columns(n)]
        if not sub.args.get("from_"):
            return own_cols + nested
        probe, entries = self.from_entries(sub)
        scope = Scope(entries)
        aliases = {e.alias for e in entries if getattr(e, "alias", None)}
        free = []
        for col in own_cols + nested:
            if col.table and col.table not in aliases:
                free.append(col)
                continue
            try:
                scope.resolve(col, probe)
            except ProgrammingError:
                free.append(col)
        return free

    def correlated_keys(self, sub: exp.Select, pairs: list, anti: bool, node,
                        outer_query: exp.Select) -> tuple[exp.Select, list]:
        """The subquery of an EXISTS as the distinct values of the expressions it equates with the
        outer query's (plus `pairs`: (inner, outer) already known), filtered by its own conditions;
        and those outer expressions. Other comparisons with the outer query's columns are planned
        over the domain of the outer values (correlated_over_domain)."""
        for key in ("group", "having", "limit", "offset", "with"):
            if sub.args.get(key):
                raise self.refuse(f"{key.upper()} in an EXISTS subquery", sub.args[key])
        if not sub.args.get("from_"):
            raise self.refuse("an EXISTS subquery without FROM", node)
        residuals: list = []
        own, keys = self.split_correlation(sub, node, residuals)
        keys = list(pairs) + keys
        if not keys and residuals:
            raise self.refuse("a subquery correlated by comparisons alone, without an equality with the outer "
                              "query (its join would be a cross join)", node)
        if not keys:
            raise self.refuse("an uncorrelated EXISTS (no equality with the outer query)", node)
        marker = [exp.alias_(exp.Literal.number(1), "_rw_m")] if anti else []
        if residuals:
            return self.correlated_over_domain(sub, keys, residuals, own, marker, outer_query, node)
        return _keyed(sub, keys, marker, own).distinct(), [o for _, o in keys]

    def correlated_over_domain(self, sub: exp.Select, keys: list, residuals: list, own: list, marker: list,
                               q: exp.Select, node) -> tuple[exp.Select, list]:
        """An EXISTS subquery correlated by comparisons other than equalities (`l2.k = l1.k AND
        l2.s <> l1.s`): the outer values it reads, taken from the one outer FROM item they all come
        from (every distinct value that item holds: its domain), each joined with the subquery's
        rows by the correlation, and the distinct outer values that found a row. The outer query
        then joins those values as it joins equality-correlated keys. The domain join is an
        equi-join on the equalities, the comparisons its residual condition."""
        outer_exprs: list = []
        for e in [o for _, o in keys] + [col for _, cols in residuals for col in cols]:
            if all(e.sql() != x.sql() for x in outer_exprs):
                outer_exprs.append(e)
        item = self.outer_item(q, [col for e in outer_exprs for col in e.find_all(exp.Column)], node)
        domain_alias = "_rw_dom"
        domain = exp.select(*[exp.alias_(e.copy(), f"_rw_o{i}") for i, e in enumerate(outer_exprs)]).from_(
            item.copy()).distinct()
        by_sql = {e.sql(): exp.column(f"_rw_o{i}", domain_alias) for i, e in enumerate(outer_exprs)}

        def to_domain(e: exp.Expression) -> exp.Expression:
            e = e.copy()
            if e.sql() in by_sql:
                return by_sql[e.sql()].copy()
            return e.transform(lambda n: by_sql[n.sql()].copy() if isinstance(n, exp.Column) and n.sql() in by_sql else n)

        conditions = [c.copy() for c in own]
        conditions += [exp.EQ(this=inner.copy(), expression=to_domain(o)) for inner, o in keys]
        conditions += [to_domain(c) for c, _ in residuals]
        right = exp.select(*[exp.alias_(exp.column(f"_rw_o{i}", domain_alias), f"_rw_k{i}")
                             for i in range(len(outer_exprs))], *marker)
        right.set("from_", sub.args["from_"].copy())
        right.set("joins", [j.copy() for j in sub.args.get("joins") or []] + [
            exp.Join(this=derived(domain, domain_alias))])
        return right.where(exp.and_(*conditions)).distinct(), outer_exprs

    def outer_item(self, q: exp.Select, cols: list, node) -> exp.Expression:
        """The one FROM item of the outer query that brings every column of `cols` (by alias, or by
        name when unqualified); refused when they come from several."""
        items = [q.args["from_"].this] + [j.this for j in q.args.get("joins") or []]
        probe = self.probe()
        names: dict[int, set] = {}  # the column names each item brings, planned once when needed

        def brings(i: int, name: str) -> bool:
            if i not in names:
                names[i] = {e.name for e in probe.plan_item(items[i])[1].entries} \
                    if isinstance(items[i], (exp.Table, exp.Subquery)) else set()
            return name in names[i]

        found = set()
        for col in cols:
            owners = [i for i, item in enumerate(items)
                      if (item.alias_or_name == col.table if col.table else brings(i, col.name))]
            if len(owners) != 1:
                raise self.refuse(f'the column "{col.sql(dialect="postgres")}" of a correlation other than an '
                                  "equality (it must come from one table of the outer query's FROM)", col)
            found.add(owners[0])
        if len(found) != 1:
            raise self.refuse("a subquery correlated other than by equalities with columns of more than one "
                              "table of the outer query", node)
        return items[found.pop()]

    def correlated_scalar(self, sub: exp.Select, node) -> tuple[exp.Select, list, bool] | None:
        """A scalar subquery correlated by equalities with the outer query, whose one column
        aggregates (so it yields one value per outer row): the same aggregate grouped by the
        correlated expressions, the outer expressions to join it on, and whether it is a COUNT
        (which is 0, not NULL, for an outer row no subquery row matches). None when uncorrelated."""
        own, keys = self.split_correlation(sub, node)
        if not keys:
            return None
        for key in ("group", "having", "limit", "offset", "distinct", "with"):
            if sub.args.get(key):
                raise self.refuse(f"{key.upper()} in a correlated scalar subquery", sub.args[key])
        value = sub.expressions[0].unalias()
        if not find_aggs(value):
            raise self.refuse("a correlated scalar subquery without an aggregate (it may yield several rows)", node)
        counts = isinstance(value, exp.Count)
        if not counts and any(isinstance(a, exp.Count) for a in value.find_all(exp.Count)):
            raise self.refuse("a COUNT inside an expression of a correlated scalar subquery", value)
        right = _keyed(sub, keys, [exp.alias_(value.copy(), "_rw_v")], own)
        return right.group_by(*[inner.copy() for inner, _ in keys]), [o for _, o in keys], counts

    # -- FROM and joins ------------------------------------------------------------------------
    def plan_from(self, q: exp.Select, conjuncts: list, late: list | tuple = ()) -> tuple[Node, Scope, list]:
        groups: list[tuple[Node, Scope]] = []
        current = self.plan_item(q.args["from_"].this)
        for j in q.args.get("joins") or []:
            kind = (j.args.get("kind") or "").upper()
            side = (j.args.get("side") or "").upper()
            if j.args.get("method"):
                raise self.refuse(f"{j.args['method']} joins", j)
            if kind in ("SEMI", "ANTI"):
                raise self.refuse(f"{kind} JOIN", j)
            if j.args.get("on") is None and not j.args.get("using") and not side and kind in ("", "CROSS"):
                groups.append(current)
                current = self.plan_item(j.this)
                continue
            if isinstance(j.this, exp.Table) and j.this.args.get("version") is not None:
                current = self.lookup_join(current, j, side or "INNER")
                continue
            right = self.plan_item(j.this)
            current = self.join_explicit(current, right, j, side or "INNER")
        groups.append(current)
        node, scope = groups[0]
        remaining = groups[1:]
        while remaining:
            placed = False
            for gi, (gnode, gscope) in enumerate(remaining):
                lnode, rnode, expr_keys, pending = self.expression_keys(node, scope, gnode, gscope, conjuncts)
                shifted = gscope.shifted(len(lnode.columns))
                both = Scope(scope.entries + shifted.entries)
                keys, residual, rest = self.split_condition(pending, scope, shifted, both, len(lnode.columns))
                keys = expr_keys + keys
                if keys:
                    node, gnode = lnode, rnode
                    node = self.make_join(node, gnode, "inner", keys, residual, both)
                    scope = both
                    conjuncts = rest
                    remaining.pop(gi)
                    placed = True
                    break
            if not placed:
                found = self.dynamic_filter(node, scope, remaining, conjuncts)
                if found is None:
                    raise self.refuse("a join without an equality condition between its inputs (cross join)",
                                      q.args["from_"])
                node, scope, conjuncts = found
        for j in late:  # anti-joins (subquery_predicates): after every FROM item is joined
            node, scope = self.join_explicit((node, scope), self.plan_item(j.this), j, "LEFT")
        return node, scope, conjuncts

    def dynamic_filter(self, node: Node, scope: Scope, remaining: list, conjuncts: list):
        """A comma join with a relation of at most one row, compared by <, <=, > or >= (a dynamic
        filter, `t, (SELECT max(x) AS m FROM u) s WHERE t.v > s.m`): the planned filter, the scope
        (the one-row side's columns usable in that comparison alone) and the conjuncts left; None
        when no remaining input fits. One of `remaining` is taken out."""
        flips = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
        ops = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
        for gi, (gnode, gscope) in enumerate(remaining):
            sides = []
            if _at_most_one_row(gnode):
                sides.append((node, scope, gnode, gscope))
            if _at_most_one_row(node):
                sides.append((gnode, gscope, node, scope))
            for big, bscope, small, sscope in sides:
                for c in conjuncts:
                    if type(c) not in ops:
                        continue
                    kind = type(c)
                    if _resolves(self, c.this, bscope) and _resolves(self, c.expression, sscope):
                        a, b = c.this, c.expression
                    elif _resolves(self, c.expression, bscope) and _resolves(self, c.this, sscope):
                        a, b, kind = c.expression, c.this, flips[kind]
                    else:
                        continue
                    remaining.pop(gi)
                    rest = [x for x in conjuncts if x is not c]
                    return self.make_dynamic_filter(big, bscope, small, sscope, a, b, ops[kind], c) + (rest,)
        return None

    def make_dynamic_filter(self, big: Node, bscope: Scope, small: Node, sscope: Scope,
                            a: exp.Expression, b: exp.Expression, op: str, cond) -> tuple[Node, Scope]:
        left_expr, right_expr = self.bind(a, bscope), self.bind(b, sscope)
        lt, rt = self.type_of(big, left_expr), self.type_of(small, right_expr)
        common = lt
        if lt != rt:
            try:
                common = sqltypes.from_duckdb(self.engine.describe(
                    f"SELECT CASE WHEN true THEN CAST(NULL AS {sqltypes.duckdb_type(lt)}) "
                    f"ELSE CAST(NULL AS {sqltypes.duckdb_type(rt)}) END AS v")[0][1])
            except ProgrammingError:
                raise self.refuse(f"comparing {lt} with {rt} in a dynamic filter", cond) from None
        if lt == common and isinstance(left_expr, exp.Column):
            left, column = big, int(left_expr.name[1:])
        else:
            cast = left_expr if lt == common else exp.cast(left_expr, sqltypes.duckdb_type(common), dialect="duckdb")
            left, column = self.with_columns(big, [cast]), len(big.columns)
        value = right_expr if rt == common else exp.cast(right_expr, sqltypes.duckdb_type(common), dialect="duckdb")
        right = self.project(small, [value], ["_rw_bound"])
        node = DynamicFilter(columns=[Col(c.name, c.type, c.hidden) for c in left.columns],
                             stream_key=list(left.stream_key), left=left, right=right, column=column, op=op)
        entries = list(bscope.entries) + [_OneRowSide(e) for e in sscope.entries]
        return node, Scope(entries)

    def plan_item(self, item: exp.Expression) -> tuple[Node, Scope]:
        self._group_counter += 1
        group = self._group_counter
        if isinstance(item, exp.Table):
            if item.args.get("joins") or item.args.get("laterals"):
                raise self.refuse("this FROM item", item)
            if item.args.get("version") is not None:
                raise self.refuse("FOR SYSTEM_TIME AS OF (temporal joins come with Kafka sources)", item)
            if isinstance(item.this, exp.Anonymous) and item.this.name.lower() in ("tumble", "hop"):
                return self.plan_time_window(item, group)
            if isinstance(item.this, (exp.Anonymous, exp.Func)):
                fn = item.this.name if isinstance(item.this, exp.Anonymous) else item.this.sql_name()
                raise self.refuse(f"the table function {fn.lower()}() in FROM (TUMBLE and HOP windows come "
                                  "with Kafka sources)", item)
            name = item.name
            alias = item.alias_or_name
            if name in self.ctes and not item.db:
                sub = self.probe()
                node, names = sub.plan_query(self.ctes[name])
                self.inputs.extend(i for i in sub.inputs if i not in self.inputs)
                self.window_maps.update(sub.window_maps)
                return node, self.scope_of(node, names, alias, group)
            obj = self.resolve_object(name)
            if obj is None:
                raise ProgrammingError(f'relation "{name}" does not exist{self.where(item)}')
            if name not in self.inputs:
                self.inputs.append(name)
            columns = [Col(c.name, c.type, c.hidden) for c in obj.columns]
            key = [i for i, c in enumerate(obj.columns) if c.name in obj.stream_key]
            key.sort(key=lambda i: obj.stream_key.index(obj.columns[i].name))
            node = Scan(columns=columns, stream_key=key, source=name)
            col_alias = item.args.get("alias")
            names = [c.name for c in obj.columns]
            if col_alias is not None and col_alias.columns:
                vis = [i for i, c in enumerate(obj.columns) if not c.hidden]
                self.check_column_aliases(item, len(vis))
                for j, ident in enumerate(col_alias.columns):
                    names[vis[j]] = ident.name
            entries = [Entry(alias, n, i, group) for i, n in enumerate(names) if not obj.columns[i].hidden]
            return node, Scope(entries)
        if isinstance(item, exp.Subquery):
            sub = self.probe()
            node, names = sub.plan_query(item.this)
            self.inputs.extend(i for i in sub.inputs if i not in self.inputs)
            self.window_maps.update(sub.window_maps)
            alias = item.alias_or_name or None
            col_alias = item.args.get("alias")
            if col_alias is not None and col_alias.columns:  # AS x (a, b): the first outputs renamed
                self.check_column_aliases(item, len(names))
                names = [i.name for i in col_alias.columns] + list(names[len(col_alias.columns):])
            return node, self.scope_of(node, names, alias, group)
        if isinstance(item, (exp.Unnest, exp.Lateral)):
            raise self.refuse(type(item).__name__.upper(), item)
        raise self.refuse(f"{item.sql(dialect='postgres')} in FROM", item)

    # -- time windows ----------------------------------------------------------------------------
    def plan_time_window(self, item: exp.Table, group: int) -> tuple[Node, Scope]:
        """TUMBLE(rel, ts, size) and HOP(rel, ts, slide, size): the relation's rows with
        `window_start` and `window_end` added; HOP repeats each row once per window holding it
        (one branch per window, so the stream key is the branch plus the row's key)."""
        fn = item.this
        kind = fn.name.lower()
        args = fn.expressions
        want = 3 if kind == "tumble" else 4
        if len(args) != want:
            raise self.refuse(f"{kind.upper()} with {len(args)} arguments ({kind.upper()} takes {want}: "
                              + ("relation, time column, size)" if kind == "tumble"
                                 else "relation, time column, slide, size)"), item)
        rel, ts = args[0], args[1]
        if not isinstance(rel, (exp.Column, exp.Table)) or not isinstance(ts, exp.Column):
            raise self.refuse(f"{kind.upper()} over anything but a named relation and a column", item)
        sizes = [self.interval_micros(a, kind) for a in args[2:]]
        slide, size = (sizes[0], sizes[0]) if kind == "tumble" else (sizes[0], sizes[1])
        if size % slide:
            raise self.refuse("HOP whose size is not a multiple of its slide", item)
        alias = item.alias_or_name or rel.name
        table = exp.to_table(rel.name)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        branches = []
        for k in range(size // slide):
            child, scope = self.plan_item(table.copy())
            entry = scope.resolve(exp.column(ts.name), self)
            ttype = child.columns[entry.index].type
            if ttype not in ("timestamp", "timestamptz"):
                raise self.refuse(f"{kind.upper()} over {ts.name!r} of type {ttype} (it needs a timestamp)", ts)
            start, end = _window_bounds(cname(entry.index), ttype, slide, size, k)
            visible = [i for i, c in enumerate(child.columns) if not c.hidden]
            exprs = [exp.column(cname(i)) for i in visible] + [start, end]
            names = [child.columns[i].name for i in visible] + ["window_start", "window_end"]
            hidden = [False] * len(exprs)
            for j in child.stream_key:
                exprs.append(exp.column(cname(j)))
                names.append(f"_rw_k{len(exprs)}")
                hidden.append(True)
            node = self.map(child, exprs, None, names, hidden)
            node.stream_key = list(range(len(visible) + 2, len(exprs)))
            self.window_maps[id(node)] = (entry.index, len(visible), len(visible) + 1, size)
            branches.append((node, len(visible) + 2))
        names = [c.name for c in branches[0][0].columns[:branches[0][1]]]
        entries = [Entry(alias, n, i, group) for i, n in enumerate(names)]
        if len(branches) == 1:
            return branches[0][0], Scope(entries)
        width = branches[0][1]
        first = branches[0][0]
        columns = [Col(c.name, c.type) for c in first.columns[:width]] + [Col("_rw_branch", "integer", True)]
        key = [width]
        for b, (m, _) in enumerate(branches):
            for j in m.stream_key:
                key.append(len(columns))
                columns.append(Col(f"_rw_u{b}_{j - width}", m.columns[j].type, True))
        return UnionAll(columns=columns, stream_key=key, inputs=[m for m, _ in branches], visible=width), \
            Scope(entries)

    def interval_micros(self, e: exp.Expression, kind: str) -> int:
        """A constant window size as microseconds (no months: windows must have a fixed length)."""
        if not isinstance(e, exp.Interval):
            raise self.refuse(f"a {kind.upper()} size that is not an INTERVAL literal", e)
        try:
            value = self.engine.sql(f"SELECT {e.sql(dialect='duckdb')} AS i").column(0)[0].as_py()
        except Exception:
            raise self.refuse(f"the interval {e.sql(dialect='postgres')}", e) from None
        months, days, nanos = value.months, value.days, value.nanoseconds
        if months:
            raise self.refuse(f"a {kind.upper()} size in months or years ({e.sql(dialect='postgres')})", e)
        micros = days * 86_400_000_000 + nanos // 1000
        if micros <= 0:
            raise ProgrammingError(f"{kind.upper()} size must be positive: {e.sql(dialect='postgres')}"
                                   f"{self.where(e)}")
        return micros

    def scope_of(self, node: Node, names: list[str], alias, group) -> Scope:
        vis = [i for i, c in enumerate(node.columns) if not c.hidden]
        return Scope([Entry(alias, names[j], i, group) for j, i in enumerate(vis)])

    def join_explicit(self, left, right, j: exp.Join, side: str):
        lnode, lscope = left
        rnode, rscope = right
        kind = {"INNER": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}.get(side)
        if kind is None:
            raise self.refuse(f"{side} JOIN", j)
        cond = j.args.get("on")
        conjuncts = list(and_terms(cond)) if cond is not None else []
        lnode, rnode, expr_keys, conjuncts = self.expression_keys(lnode, lscope, rnode, rscope, conjuncts)
        shifted = rscope.shifted(len(lnode.columns))
        both = Scope(lscope.entries + shifted.entries)
        if j.args.get("using"):
            keys = []
            for ident in j.args["using"]:
                le = lscope.resolve(exp.column(ident.name), self)
                re_ = shifted.resolve(exp.column(ident.name), self)
                keys.append((le.index, re_.index - len(lnode.columns)))
            node = self.make_join(lnode, rnode, kind, keys, None, both)
            # an unqualified USING column means the left one; the right one stays reachable by its alias
            using = {ident.name for ident in j.args["using"]}
            entries = list(lscope.entries) + [
                _AliasOnly(e) if e.name in using else e for e in shifted.entries]
            return node, Scope(entries)
        keys, residual, rest = self.split_condition(conjuncts, lscope, shifted, both, len(lnode.columns))
        keys = expr_keys + keys
        if rest:
            extra = exp.and_(*[self.bind(c, both) for c in rest])
            residual = extra if residual is None else exp.and_(residual, extra)
        if not keys:
            raise self.refuse("a join without an equality condition (nested-loop join)", j)
        return self.make_join(lnode, rnode, kind, keys, residual, both), both

    def lookup_join(self, left, j: exp.Join, side: str):
        """JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() ON ...: a lookup into the dimension's state."""
        version = j.this.args["version"]
        when = version.args.get("expression")
        if str(version.args.get("kind", "")).upper() != "AS OF" or not (
                isinstance(when, exp.Anonymous) and when.name.lower() == "proctime"):
            raise self.refuse(f"FOR SYSTEM_TIME {version.args.get('kind', '')} "
                              f"{when.sql(dialect='postgres') if when is not None else ''} (only AS OF PROCTIME())", j)
        if side not in ("INNER", "LEFT"):
            raise self.refuse(f"{side} JOIN ... FOR SYSTEM_TIME AS OF PROCTIME() (only inner and left)", j)
        table = j.this.copy()
        table.set("version", None)
        rnode, rscope = self.plan_item(table)
        if not isinstance(rnode, Scan):
            raise self.refuse("FOR SYSTEM_TIME AS OF PROCTIME() on anything but a table or view", j)
        dim = self.resolve_object(rnode.source)
        lnode, _ = left
        if not self.append_only(lnode):
            raise self.refuse("a temporal join whose left side is not append-only (a source, or an APPEND ONLY "
                              "table, through filters and projections)", j)
        node, scope = self.join_explicit(left, (rnode, rscope), j, side)
        if not isinstance(node, Join) or node.right is not rnode:
            raise self.refuse("a temporal join condition on expressions of the dimension (use its columns)", j)
        dim_key = set(rnode.stream_key)
        if not dim_key or not dim_key <= set(node.right_keys):
            pk = ", ".join(dim.pk) or "it has none"
            raise self.refuse(f"a temporal join whose ON does not cover the primary key of {rnode.source!r} "
                              f"({pk})", j)
        nl = len(node.left.columns)
        lookup = LookupJoin(columns=node.columns, stream_key=list(node.left.stream_key), left=node.left,
                            right=node.right, kind=node.kind, left_keys=node.left_keys,
                            right_keys=node.right_keys, residual=node.residual, dimension=rnode.source)
        if not lookup.stream_key:
            lookup.stream_key = list(range(nl))
        return lookup, scope

    def append_only(self, node: Node) -> bool:
        """Whether a plan only ever inserts: scans of append-only objects through filters,
        projections, unions and lookup joins."""
        if isinstance(node, Scan):
            obj = self.resolve_object(node.source)
            return obj is not None and bool(obj.append_only)
        if isinstance(node, LookupJoin):
            return self.append_only(node.left)
        if isinstance(node, (WindowCloseAggregate, WindowCloseFilter)):  # emits once, never retracts
            return True
        if isinstance(node, (Map, UnionAll, ProjectSet)):
            return all(self.append_only(c) for c in node.children)
        return False

    def expression_keys(self, lnode: Node, lscope: Scope, rnode: Node, rscope: Scope, conjuncts):
        """Equalities between an expression of one side and an expression of the other (not both
        plain columns) become join keys: each side computes its expression as a hidden column."""
        lexprs, rexprs, rest = [], [], []
        for c in conjuncts:
            sides = None
            if isinstance(c, exp.EQ) and not (isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column)):
                a, b = c.this, c.expression
                if _resolves(self, a, lscope) and _resolves(self, b, rscope):
                    sides = (a, b)
                elif _resolves(self, b, lscope) and _resolves(self, a, rscope):
                    sides = (b, a)
            if sides is None:
                rest.append(c)
                continue
            lexprs.append(self.bind(sides[0], lscope))
            rexprs.append(self.bind(sides[1], rscope))
        if not lexprs:
            return lnode, rnode, [], conjuncts
        nl, nr = len(lnode.columns), len(rnode.columns)
        lnode = self.with_columns(lnode, lexprs)
        rnode = self.with_columns(rnode, rexprs)
        return lnode, rnode, [(nl + i, nr + i) for i in range(len(lexprs))], rest

    def with_columns(self, node: Node, extra: list[exp.Expression]) -> Map:
        """The node's columns plus hidden computed ones (same positions, same stream key)."""
        exprs = [exp.column(cname(i)) for i in range(len(node.columns))] + extra
        names = [c.name for c in node.columns] + [f"_rw_j{i}" for i in range(len(extra))]
        hidden = [c.hidden for c in node.columns] + [True] * len(extra)
        m = self.map(node, exprs, None, names, hidden)
        m.stream_key = list(node.stream_key)
        return m

    def split_condition(self, conjuncts, lscope: Scope, rscope: Scope, both: Scope, nleft: int):
        """Equality conjuncts between a left column and a right column become join keys; conjuncts over
        both sides become the residual; the others are returned untouched."""
        keys, residual_parts, rest = [], [], []
        lidx = {e.index for e in lscope.entries}
        ridx = {e.index for e in rscope.entries}
        for c in conjuncts:
            try:
                refs = {both.resolve(col, self).index for col in c.find_all(exp.Column)}
            except ProgrammingError:
                rest.append(c)
                continue
            if not refs or refs <= lidx or refs <= ridx or not refs <= (lidx | ridx):
                rest.append(c)
                continue
            if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column):
                a = both.resolve(c.this, self).index
                b = both.resolve(c.expression, self).index
                if a in lidx and b in ridx:
                    keys.append((a, b - nleft))
                    continue
                if b in lidx and a in ridx:
                    keys.append((b, a - nleft))
                    continue
            residual_parts.append(self.bind(c, both))
        residual = exp.and_(*residual_parts) if residual_parts else None
        return keys, residual, rest

    def make_join(self, left: Node, right: Node, kind: str, keys, residual, both: Scope) -> Join:
        nl = len(left.columns)
        columns = [Col(c.name, c.type, c.hidden) for c in left.columns] + \
                  [Col(c.name, c.type, c.hidden) for c in right.columns]
        key: list[int] = []
        # an outer join pads one side with NULLs, so the other side's join key must identify rows too
        right_keys = [nl + rk for _, rk in keys] if kind != "inner" else []
        for k in [lk for lk, _ in keys] + right_keys + left.stream_key + [nl + k for k in right.stream_key]:
            if k not in key:
                key.append(k)
        if residual is not None:
            _refuse_aggregates(self, residual, "JOIN conditions")
            residual = typed_expression(residual, {cname(i): c.type for i, c in enumerate(columns)})
        return Join(columns=columns, stream_key=key, left=left, right=right, kind=kind,
                    left_keys=[lk for lk, _ in keys], right_keys=[rk for _, rk in keys], residual=residual)

    # -- projections ---------------------------------------------------------------------------
    def expand_star(self, items, scope: Scope) -> list[tuple[exp.Expression, str]]:
        out = []
        for item in items:
            if isinstance(item, exp.Star):
                for e in scope.entries:
                    if not isinstance(e, _AliasOnly):
                        out.append((exp.column(e.name, e.alias) if e.alias else exp.column(e.name), e.name))
                continue
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                table = item.table
                found = [e for e in scope.entries if e.alias == table]
                if not found:
                    raise ProgrammingError(f'missing FROM-clause entry for table "{table}"{self.where(item)}')
                out.extend((exp.column(e.name, e.alias), e.name) for e in found)
                continue
            out.append((item.unalias() if isinstance(item, exp.Alias) else item, output_name(item)))
        return out

    def map(self, child: Node, exprs, where, names, keep_hidden=None) -> Map:
        column_types = {cname(i): c.type for i, c in enumerate(child.columns)}
        exprs = [typed_expression(e, column_types) for e in exprs]
        if where is not None:
            where = typed_expression(where, column_types)
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

    # -- ranking window functions --------------------------------------------------------------
    def window_calls(self, select_items) -> list[exp.Window]:
        """The window function calls of the select list; refuses what OverWindow cannot maintain."""
        found = []
        for e, _ in select_items:
            for w in e.find_all(exp.Window):
                self.check_window(w)
                found.append(w)
        return found

    def check_window(self, w: exp.Window) -> None:
        fn = w.this
        if type(fn) in WINDOW_AGGS:
            arg = fn.this
            if isinstance(arg, exp.Distinct) or any(v for k, v in fn.args.items() if k not in ("this", "big_int")) \
                    or (isinstance(arg, exp.Star) and type(fn) is not exp.Count) or arg is None:
                raise self.refuse(f"this window aggregate: {w.sql(dialect='postgres')}", w)
            for n in arg.walk():
                if type(n) in AGG_FUNCS or isinstance(n, (exp.AggFunc, exp.Window)):
                    raise self.refuse("an aggregate inside a window aggregate", w)
            window_frame(self, w)
        elif type(fn) not in WINDOW_FUNCS:
            raise self.refuse("window functions other than row_number(), rank(), dense_rank(), count(), sum(), "
                              f"avg(), min() and max(): {w.sql(dialect='postgres')}", w)
        elif any(v for v in fn.args.values()):
            raise self.refuse(f"arguments to {WINDOW_FUNCS[type(fn)]}()", w)
        elif w.args.get("spec") is not None:
            raise self.refuse("window frame clauses on ranking functions", w)
        if w.args.get("alias") is not None:
            raise self.refuse("named windows (OVER name)", w)
        if (w.args.get("over") or "OVER").upper() != "OVER" or w.args.get("first") is not None:
            raise self.refuse(f"this window clause: {w.sql(dialect='postgres')}", w)
        if type(fn) is exp.RowNumber and w.args.get("order") is None:
            raise self.refuse("row_number() without ORDER BY (its numbering would be arbitrary)", w)
        defs = list(w.args.get("partition_by") or [])
        if w.args.get("order") is not None:
            defs += [o.this for o in w.args["order"].expressions]
        for d in defs:
            for n in d.walk():
                if type(n) in AGG_FUNCS or isinstance(n, exp.AggFunc):
                    raise self.refuse("window functions together with GROUP BY or aggregates in the same SELECT", w)

    def plan_windows(self, q: exp.Select, node: Node, scope: Scope, select_items, windows):
        """Map (the select list's inputs, each window's partition and order expressions, the stream
        key), then one OverWindow per window call appending its rank, then the final projection."""
        pre_exprs: list[exp.Expression] = []
        pre_names: list[str] = []

        def add(e: exp.Expression, name: str) -> int:
            text = e.sql()
            for i, x in enumerate(pre_exprs):
                if x.sql() == text:
                    return i
            pre_exprs.append(e)
            pre_names.append(name)
            return len(pre_exprs) - 1

        def outside_windows(e: exp.Expression):
            """Column references of `e` that are not inside a window call."""
            if isinstance(e, exp.Window):
                return
            if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
                yield e
                return
            for child in e.iter_expressions():
                yield from outside_windows(child)

        item_pos: list[int | None] = []
        for e, name in select_items:
            if e.find(exp.Window) is None:
                item_pos.append(add(self.bind(e, scope), name))
                continue
            self.bind(without_windows(e), scope)  # refuses what cannot be maintained
            for col in outside_windows(e):
                add(self.bind(col, scope), col.name)
            item_pos.append(None)
        specs = []
        for w in windows:
            part = [add(self.bind(p, scope), p.sql(dialect="postgres")) for p in w.args.get("partition_by") or []]
            order = []
            for o in (w.args["order"].expressions if w.args.get("order") is not None else []):
                desc = bool(o.args.get("desc"))
                nulls_first = o.args.get("nulls_first")
                order.append(OrderKey(add(self.bind(o.this, scope), o.this.sql(dialect="postgres")), desc,
                                      bool(desc if nulls_first is None else nulls_first)))
            arg = None
            if type(w.this) in WINDOW_AGGS and not isinstance(w.this.this, exp.Star):
                arg = add(self.bind(w.this.this, scope), w.this.this.sql(dialect="postgres"))
            func = WINDOW_FUNCS.get(type(w.this)) or WINDOW_AGGS[type(w.this)]
            specs.append((func, part, order, arg, window_frame(self, w)))
        extra_pos = [add(e, f"_rw_o{i}") for i, e in enumerate(self.order_exprs_over_input(q, scope, select_items))]
        cur: Node = self.project(node, pre_exprs, pre_names)
        rank_pos: dict[str, int] = {}  # identical window calls share one rank column
        for w, (func, part, order, arg, frame) in zip(windows, specs):
            if w.sql() in rank_pos:
                continue
            rank_pos[w.sql()] = len(cur.columns)
            out_type = "bigint" if arg is None else self.agg_type(Agg(func=func, arg=arg), cur)
            cur = OverWindow(columns=list(cur.columns) + [Col(func, out_type, True)], stream_key=list(cur.stream_key),
                             child=cur, func=func, partition=part, order=order, arg=arg, frame=frame)

        def over_ranks(n):
            if isinstance(n, exp.Window):
                return exp.column(cname(rank_pos[n.sql()]))
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                return exp.column(cname(add(self.bind(n, scope), n.name)))
            return n

        exprs = [exp.column(cname(pos)) if pos is not None else transform_top_down(e, over_ranks)
                 for (e, _), pos in zip(select_items, item_pos)]
        names = [n for _, n in select_items]
        extra = [exp.column(cname(p)) for p in extra_pos]
        return self.project(cur, exprs, names, extra=extra), names

    # -- aggregation ---------------------------------------------------------------------------
    def plan_aggregate(self, q: exp.Select, node: Node, scope: Scope, select_items):
        group_exprs = []
        if q.args.get("group"):
            g = q.args["group"]
            if g.args.get("rollup") or g.args.get("cube") or g.args.get("grouping_sets"):
                raise self.refuse("ROLLUP / CUBE / GROUPING SETS", g)
            for e in g.expressions:
                if isinstance(e, exp.Literal) and not e.is_string:
                    e = select_items[int(e.name) - 1][0]
                elif isinstance(e, exp.Column) and not e.table:
                    alias = next((s for s, n in select_items if n == e.name), None)
                    if alias is not None and not any(en.name == e.name for en in scope.entries):
                        e = alias
                group_exprs.append(e)
        bound_groups = [self.bind(e, scope) for e in group_exprs]
        # aggregate calls across SELECT, HAVING and ORDER BY
        having = q.args["having"].this if q.args.get("having") else None
        order_items = [o.this for o in q.args["order"].expressions] if q.args.get("order") else []
        calls: list[exp.Expression] = []
        for e in [s for s, _ in select_items] + ([having] if having is not None else []) + order_items:
            calls.extend(find_aggs(e))
        pre_exprs = list(bound_groups)
        aggs: list[Agg] = []
        agg_keys: list[str] = []
        for call in calls:
            func, arg, distinct = self.agg_parts(call)
            bound_arg = self.bind(arg, scope) if arg is not None else None
            extra, order = self.agg_extra(call, scope)
            for e in [bound_arg] + extra + [o for o, _, _ in order]:
                if e is not None and find_aggs(e):
                    raise ProgrammingError(f"aggregate function calls cannot be nested{self.where(call)}")
            k = self.agg_key(call, scope)
            if k in agg_keys:
                continue
            agg_keys.append(k)
            if bound_arg is not None:
                pre_exprs.append(bound_arg)
                arg_at = len(pre_exprs) - 1
                extra_at = []
                for e in extra:
                    pre_exprs.append(e)
                    extra_at.append(len(pre_exprs) - 1)
                order_at = []
                for e, desc, nulls_first in order:
                    pre_exprs.append(e)
                    order_at.append((len(pre_exprs) - 1, desc, nulls_first))
                aggs.append(Agg(func, arg_at, distinct, extra_at, order_at))
            else:
                aggs.append(Agg("count_star", None, False))
        arg_texts = []
        for call in calls:
            func, arg, _ = self.agg_parts(call)
            extra, order = self.agg_parts_extra(call)
            for e in ([arg] if arg is not None else []) + extra + [o for o, _, _ in order]:
                if e.sql(dialect="postgres") not in arg_texts:
                    arg_texts.append(e.sql(dialect="postgres"))
        pre_names = [g.sql(dialect="postgres") for g in group_exprs] + \
            (arg_texts if len(arg_texts) == len(pre_exprs) - len(bound_groups)
             else [f"_rw_a{i}" for i in range(len(pre_exprs) - len(bound_groups))])
        pre = self.map(node, pre_exprs, None, pre_names) if pre_exprs else \
            Map(columns=[], stream_key=[], child=node, exprs=[])
        ng = len(bound_groups)
        cols = [Col(pre.columns[i].name, pre.columns[i].type) for i in range(ng)]
        for a in aggs:
            cols.append(Col(agg_text(pre, a), self.agg_type(a, pre)))
        agg_node = Aggregate(columns=cols, stream_key=list(range(ng)), child=pre, group=list(range(ng)), aggs=aggs)

        # rewrite the outer expressions over the aggregate's output
        group_sql = {g.sql(): i for i, g in enumerate(bound_groups)}

        def over_agg(e: exp.Expression) -> exp.Expression:
            def rewrite(n):
                if type(n) in AGG_FUNCS:
                    return exp.column(cname(ng + agg_keys.index(self.agg_key(n, scope))))
                if isinstance(n, exp.Expression) and not isinstance(n, (exp.Literal, exp.Star)):
                    try:
                        s = self.bind(n, scope).sql()
                    except ProgrammingError:
                        s = None
                    if s is not None and s in group_sql and (n.find(exp.Column) is not None):
                        return exp.column(cname(group_sql[s]))
                if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                    raise ProgrammingError(
                        f'column "{n.sql(dialect="postgres")}" must appear in the GROUP BY clause or be used '
                        f'in an aggregate function{self.where(n)}')
                return n

            return transform_top_down(e, rewrite)

        out_exprs = [over_agg(e) for e, _ in select_items]
        names = [n for _, n in select_items]
        cond = over_agg(having) if having is not None else None
        extra = []
        if q.args.get("order") and q.args.get("limit") is not None:
            for o in order_items:
                if _order_target(o, select_items) is None:
                    extra.append(over_agg(o))
        node = self.project(agg_node, out_exprs, names, extra=extra, where=cond)
        return node, names

    def agg_key(self, call: exp.Expression, scope: Scope) -> str:
        """One aggregate call's identity: calls with equal keys are computed once."""
        func, arg, distinct = self.agg_parts(call)
        extra, order = self.agg_extra(call, scope)
        parts = [func, str(distinct), self.bind(arg, scope).sql() if arg is not None else "*"]
        parts += [e.sql() for e in extra] + [f"{o.sql()} {desc} {nulls_first}" for o, desc, nulls_first in order]
        return "|".join(parts)

    def agg_parts_extra(self, call: exp.Expression):
        """An ordered aggregate's further arguments and ORDER BY items [(expression, desc, nulls
        first)], unbound; ([], []) for the others."""
        if type(call) not in (exp.GroupConcat, exp.FirstValue, exp.LastValue, exp.ArrayAgg):
            return [], []
        extra = []
        if isinstance(call, exp.GroupConcat):
            sep = call.args.get("separator")
            if sep is None:
                raise ProgrammingError(f"function string_agg requires a delimiter argument{self.where(call)}")
            extra.append(sep)
        order = []
        if isinstance(call.this, exp.Order):
            for o in call.this.expressions:
                desc = bool(o.args.get("desc"))
                nulls_first = o.args.get("nulls_first")
                order.append((o.this, desc, desc if nulls_first is None else bool(nulls_first)))
        return extra, order

    def agg_extra(self, call: exp.Expression, scope: Scope):
        """agg_parts_extra's expressions bound over the scope."""
        extra, order = self.agg_parts_extra(call)
        return [self.bind(e, scope) for e in extra], [(self.bind(o, scope), d, n) for o, d, n in order]

    def agg_parts(self, call: exp.Expression):
        func = AGG_FUNCS[type(call)]
        arg = call.this
        if isinstance(arg, exp.Order):  # an ordered aggregate's ORDER BY: see agg_parts_extra
            if func not in ORDERED_AGGS:
                raise self.refuse(f"ORDER BY inside {func.upper()}(...)", call)
            arg = arg.this
        elif func in ("first_value", "last_value"):
            raise self.refuse(f"{func.upper()}(...) without ORDER BY (its result would be arbitrary)", call)
        distinct = False
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise self.refuse("an aggregate over several DISTINCT arguments", call)
            distinct = True
            arg = arg.expressions[0]
        if isinstance(arg, exp.Star):
            if func != "count":
                raise ProgrammingError(f"{func}(*) is not valid{self.where(call)}")
            return "count_star", None, False
        if distinct and func in ("min", "max"):
            distinct = False  # MIN/MAX of distinct values is the same value
        if distinct and func == "string_agg":
            extra, order = self.agg_parts_extra(call)
            if not isinstance(extra[0], exp.Literal) or any(o.sql() != arg.sql() for o, _, _ in order):
                raise self.refuse("STRING_AGG(DISTINCT ...) with a delimiter that is not a constant, or ordered "
                                  "by anything but its argument", call)
        elif distinct and func != "count":
            raise self.refuse(f"{func.upper()}(DISTINCT ...)", call)
        return func, arg, distinct

    def agg_type(self, a: Agg, pre: Node) -> str:
        if a.func in ("count", "count_star"):
            return "bigint"
        t = pre.columns[a.arg].type
        if a.func in ("min", "max"):
            return t
        if t.endswith("[]") and a.func in ("sum", "avg"):
            raise self.refuse(f"{a.func.upper()} over {t}")
        if a.func == "sum":
            if t in _INT_TYPES:
                return "bigint"
            if t.startswith("numeric"):
                scale = t[t.index(",") + 1:-1]
                return f"numeric(38,{scale})"
            if t in ("real", "double precision"):
                return t
            if t == "interval":
                return "interval"
            raise self.refuse(f"SUM over {t}")
        if a.func == "avg":
            if t in _INT_TYPES or t.startswith("numeric") or t in ("real", "double precision"):
                return "double precision"
            raise self.refuse(f"AVG over {t}")
        if a.func in ORDERED_AGGS:
            for o, _, _ in a.order:
                if pre.columns[o].type == "interval":
                    raise self.refuse(f"{a.func.upper()}(... ORDER BY an interval)")
            if a.func == "string_agg":
                for c in [a.arg] + a.extra:
                    if pre.columns[c].type != "varchar":
                        raise ProgrammingError(
                            f"function string_agg({pre.columns[a.arg].type}, {pre.columns[a.extra[0]].type}) "
                            "does not exist: both arguments must be text (cast them with ::varchar)")
                return "varchar"
            if a.func == "array_agg":
                if t.endswith("[]") or t == "interval":
                    raise self.refuse(f"ARRAY_AGG over {t}")
                return t + "[]"
            return t
        raise self.refuse(a.func)

    # -- DISTINCT, ORDER BY, LIMIT -------------------------------------------------------------
    def distinct(self, node: Node, width: int, names: list[str]) -> Node:
        vis = [i for i, c in enumerate(node.columns) if not c.hidden][:width]
        pre = Map(columns=[Col(node.columns[i].name, node.columns[i].type) for i in vis], stream_key=[],
                  child=node, exprs=[exp.column(cname(i)) for i in vis])
        cols = [Col(n, c.type) for n, c in zip(names, pre.columns)]
        return Aggregate(columns=cols, stream_key=list(range(width)), child=pre, group=list(range(width)), aggs=[])

    def order_exprs_over_input(self, q, scope, select_items) -> list[exp.Expression]:
        if not q.args.get("order") or q.args.get("limit") is None:
            return []
        out = []
        for o in q.args["order"].expressions:
            if _order_target(o.this, select_items) is None:
                out.append(self.bind(o.this, scope))
        return out

    def order_limit(self, node: Node, names, q, select_items) -> tuple[Node, list[str]]:
        limit = q.args.get("limit")
        offset = q.args.get("offset")
        if limit is None:
            if offset is not None:
                raise self.refuse("OFFSET without LIMIT", offset)
            return node, names  # ORDER BY alone does not shape a materialized view
        with_ties = False
        if isinstance(limit, exp.Fetch):  # FETCH FIRST n ROWS ONLY | WITH TIES
            options = limit.args.get("limit_options")
            if options is not None and options.args.get("percent"):
                raise self.refuse("FETCH FIRST n PERCENT", limit)
            with_ties = bool(options is not None and options.args.get("with_ties"))
            count = limit.args.get("count")
            lim = 1 if count is None else _int_literal(self, count, "FETCH FIRST count")
            if with_ties and not q.args.get("order"):
                raise ProgrammingError(f"WITH TIES cannot be specified without ORDER BY clause{self.where(limit)}")
            if with_ties and offset is not None:
                raise self.refuse("OFFSET with FETCH FIRST ... WITH TIES", offset)
        else:
            lim = _int_literal(self, limit.expression if isinstance(limit, exp.Limit) else limit, "LIMIT")
        off = _int_literal(self, offset.expression, "OFFSET") if offset is not None else 0
        order = []
        extra_pos = [i for i, c in enumerate(node.columns) if c.hidden and c.name.startswith("_rw_o")]
        if q.args.get("order"):
            for o in q.args["order"].expressions:
                target = _order_target(o.this, select_items) if select_items is not None else None
                if target is None and select_items is None:
                    target = _union_order_target(o.this, names)
                if target is None:
                    if not extra_pos:
                        raise self.refuse("ORDER BY an expression that is not in the select list", o)
                    target = extra_pos.pop(0)
                desc = bool(o.args.get("desc"))
                nulls_first = o.args.get("nulls_first")
                if nulls_first is None:
                    nulls_first = desc  # PostgreSQL: NULLs sort as the largest value
                order.append(OrderKey(target, desc, bool(nulls_first)))
        top = TopN(columns=list(node.columns), stream_key=list(node.stream_key), child=node, order=order,
                   limit=lim, offset=off, with_ties=with_ties)
        return top, names


# the set-returning functions a select list may hold (sqlglot parses PostgreSQL's unnest as Explode)
_SET_RETURNING = (exp.Unnest, exp.Explode, exp.GenerateSeries)


class _AliasOnly(Entry):
    """A column reachable only when qualified by its table alias (the right side of USING)."""

    def __init__(self, e: Entry):
        super().__init__(e.alias, e.name, e.index, e.group)


class _OneRowSide(Entry):
    """A column of the one-row side of a dynamic filter: usable in the filter's comparison only."""

    def __init__(self, e: Entry):
        super().__init__(e.alias, e.name, -1, e.group)


def _at_most_one_row(node: Node) -> bool:
    """Whether `node` holds at most one row whatever its input: a global aggregate (exactly one),
    a top-1, or a filter or projection of one of those."""
    if isinstance(node, Map):
        return _at_most_one_row(node.child)
    if isinstance(node, Aggregate) and not isinstance(node, WindowCloseAggregate):
        return node.is_global
    if isinstance(node, TopN):
        return node.limit <= 1 and not node.with_ties
    return isinstance(node, Values)


def _keyed(sub: exp.Select, keys: list, extra: list, own: list) -> exp.Select:
    """A SELECT over a subquery's FROM and its own conditions of its correlated expressions (the
    inner side of each (inner, outer) pair, as _rw_k0, _rw_k1, ...) and `extra` columns."""
    right = exp.select(*[exp.alias_(inner.copy(), f"_rw_k{i}") for i, (inner, _) in enumerate(keys)], *extra)
    right.set("from_", sub.args["from_"].copy())
    if sub.args.get("joins"):
        right.set("joins", [j.copy() for j in sub.args["joins"]])
    return right.where(exp.and_(*[c.copy() for c in own])) if own else right


def _resolves(planner: Planner, e: exp.Expression, scope: Scope) -> bool:
    """Whether every column of `e` resolves in `scope` (and there is at least one)."""
    cols = list(e.find_all(exp.Column))
    if not cols or find_aggs(e):
        return False
    try:
        for c in cols:
            scope.resolve(c, planner)
    except ProgrammingError:
        return False
    return True


def window_frame(planner: Planner, w: exp.Window) -> str:
    """A window aggregate's frame as SQL: "" for SQL's default (the partition, or with ORDER BY the
    rows up to the current row and its peers), else `ROWS BETWEEN <bound> AND <bound>` with
    UNBOUNDED, n PRECEDING / FOLLOWING or CURRENT ROW. RANGE and GROUPS frames are refused."""
    spec = w.args.get("spec")
    if spec is None:
        return ""
    if (spec.args.get("kind") or "").upper() != "ROWS" or spec.args.get("exclude"):
        raise planner.refuse(f"window frames other than ROWS: {spec.sql(dialect='postgres')}", w)

    def bound(value, side) -> str:
        value = value.sql() if isinstance(value, exp.Expression) else value
        if value is None or str(value).upper() == "CURRENT ROW":
            return "CURRENT ROW"
        side = (side or "").upper()
        if str(value).upper() == "UNBOUNDED" and side in ("PRECEDING", "FOLLOWING"):
            return f"UNBOUNDED {side}"
        if str(value).isdigit() and side in ("PRECEDING", "FOLLOWING"):
            return f"{int(value)} {side}"
        raise planner.refuse(f"the window frame bound {value} {side}".rstrip(), w)

    return (f"ROWS BETWEEN {bound(spec.args.get('start'), spec.args.get('start_side'))} "
            f"AND {bound(spec.args.get('end'), spec.args.get('end_side'))}")


def _refuse_aggregates(planner: Planner, e: exp.Expression, where: str) -> None:
    for n in e.walk():
        if type(n) in AGG_FUNCS:
            raise ProgrammingError(f"aggregate functions are not allowed in {where}{planner.where(n)}")


def _order_target(o: exp.Expression, select_items) -> int | None:
    if select_items is None:
        return None
    if isinstance(o, exp.Literal) and not o.is_string:
        return int(o.name) - 1
    if isinstance(o, exp.Column) and not o.table:
        for i, (_, n) in enumerate(select_items):
            if n == o.name:
                return i
    for i, (e, _) in enumerate(select_items):
        if e == o:
            return i
    return None


def _union_order_target(o: exp.Expression, names) -> int | None:
    if isinstance(o, exp.Literal) and not o.is_string:
        return int(o.name) - 1
    if isinstance(o, exp.Column) and o.name in names:
        return names.index(o.name)
    return None


def _int_literal(planner: Planner, e, what: str) -> int:
    if isinstance(e, exp.Literal) and not e.is_string:
        return int(e.name)
    raise planner.refuse(f"a non-constant {what}", e)


def _window_bounds(column: str, ttype: str, slide: int, size: int, k: int) -> tuple[exp.Expression, exp.Expression]:
    """window_start and window_end of the k-th window (counting back) holding a row's time: windows
    start at multiples of `slide` microseconds since 1970-01-01, as RisingWave aligns them."""
    us = f"date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', CAST({column} AS TIMESTAMP))"
    start = f"{us} - ((({us}) % {slide}) + {slide}) % {slide} - {k * slide}"
    bounds = [f"make_timestamp({start})", f"make_timestamp({start} + {size})"]
    if ttype == "timestamptz":
        bounds = [f"CAST({b} AS TIMESTAMPTZ)" for b in bounds]
    return tuple(sqlglot.parse_one(b, read="duckdb") for b in bounds)

