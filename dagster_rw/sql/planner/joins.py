"""Explicit joins (INNER, LEFT, RIGHT, FULL; ON and USING), their keys and residual conditions,
and lookup joins (FOR SYSTEM_TIME AS OF PROCTIME()) into a table's state."""
from __future__ import annotations

from sqlglot import exp

from ... import types as sqltypes
from ...errors import ProgrammingError
from ..indexes import INDEX_OF
from ..plan import (
    AsofJoin,
    Col,
    Join,
    LookupJoin,
    Map,
    Node,
    Changelog,
    OverWindow,
    ProjectSet,
    Scan,
    TemporalFilter,
    UnionAll,
    WindowCloseAggregate,
    WindowCloseFilter,
    cname,
)
from ..semantics import typed_expression
from ..syntax import and_terms
from .binding import refuse_aggregates
from .scope import AliasOnly, Entry, Scope, resolves


class Joins:
    """Planner methods that plan explicit joins and lookup joins."""

    def join_explicit(self, left, right, j: exp.Join, side: str):
        lnode, lscope = left
        rnode, rscope = right
        kind = {"INNER": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}.get(side)
        if kind is None:
            raise self.refuse(f"{side} JOIN", j)
        cond = j.args.get("on")
        conjuncts = list(and_terms(cond)) if cond is not None else []
        lnode, rnode, expr_keys, conjuncts = self.expression_keys(lnode, lscope, rnode, rscope, conjuncts)
        present = None
        if kind == "full" and not (self.keyed_by_non_null(lnode) or self.keyed_by_non_null(rnode)):
            lnode, present = self.with_present_marker(lnode), len(lnode.columns)
        shifted = rscope.shifted(len(lnode.columns))
        both = Scope(lscope.entries + shifted.entries)
        if j.args.get("using"):
            keys = []
            for ident in j.args["using"]:
                le = lscope.resolve(exp.column(ident.name), self)
                re_ = shifted.resolve(exp.column(ident.name), self)
                keys.append((le.index, re_.index - len(lnode.columns)))
            node = self.make_join(lnode, rnode, kind, keys, None, both, present)
            # an unqualified USING column is the merged one, COALESCE(left, right) as in PostgreSQL:
            # the left one in an inner or left join, a column of its own in a right or full join
            # (the right side's value on rows without a left match); each side's own stays
            # reachable by its alias
            using = {ident.name for ident in j.args["using"]}
            left_entries = list(lscope.entries)
            if kind in ("right", "full"):
                n = len(node.columns)
                merged = [exp.func("COALESCE", exp.column(cname(li)), exp.column(cname(ri + len(lnode.columns))))
                          for li, ri in keys]
                node = self.with_columns(node, merged)
                at = {ident.name: n + i for i, ident in enumerate(j.args["using"])}
                left_entries = []
                for e in lscope.entries:
                    if e.name in using and not isinstance(e, AliasOnly):
                        left_entries += [Entry(None, e.name, at[e.name], e.group), AliasOnly(e)]
                    else:
                        left_entries.append(e)
            entries = left_entries + [AliasOnly(e) if e.name in using else e for e in shifted.entries]
            return node, Scope(entries)
        keys, residual, rest = self.split_condition(conjuncts, lscope, shifted, both, len(lnode.columns))
        keys = expr_keys + keys
        if rest:
            extra = exp.and_(*[self.bind(c, both) for c in rest])
            residual = extra if residual is None else exp.and_(residual, extra)
        if not keys and kind != "inner":
            raise self.refuse(f"{side} JOIN without an equality condition (an outer nested-loop join)", j)
        return self.make_join(lnode, rnode, kind, keys, residual, both, present), both

    def asof_join(self, left, j: exp.Join, side: str):
        """ASOF [LEFT] JOIN ... ON equalities AND one inequality between a column of each side
        (RisingWave's ASOF join): each left row meets the closest right row with its keys."""
        kind = {"": "inner", "INNER": "inner", "LEFT": "left"}.get(side)
        if kind is None:
            raise self.refuse(f"ASOF {side} JOIN (only ASOF JOIN and ASOF LEFT JOIN)", j)
        lnode, lscope = left
        rnode, rscope = self.plan_item(j.this)
        cond = j.args.get("on")
        if cond is None or j.args.get("using"):
            raise self.refuse("ASOF JOIN without ON (it needs equalities and one inequality)", j)
        conjuncts = list(and_terms(cond))
        nl = len(lnode.columns)
        shifted = rscope.shifted(nl)
        both = Scope(lscope.entries + shifted.entries)
        inequalities = [c for c in conjuncts if isinstance(c, (exp.GT, exp.GTE, exp.LT, exp.LTE))]
        if len(inequalities) != 1:
            raise self.refuse("ASOF JOIN without exactly one inequality (>, >=, <, <=) between the sides", j)
        (ineq,) = inequalities
        flipped = {exp.GT: "<", exp.GTE: "<=", exp.LT: ">", exp.LTE: ">="}
        ops = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
        sides = None
        if isinstance(ineq.this, exp.Column) and isinstance(ineq.expression, exp.Column):
            a, b = both.resolve(ineq.this, self).index, both.resolve(ineq.expression, self).index
            if a < nl <= b:
                sides = (a, b - nl, ops[type(ineq)])
            elif b < nl <= a:
                sides = (b, a - nl, flipped[type(ineq)])
        if sides is None:
            raise self.refuse("an ASOF JOIN inequality that does not compare a column of each side", j)
        lt, rt = lnode.columns[sides[0]].type, rnode.columns[sides[1]].type
        if not _comparable(lt, rt):
            raise self.refuse(f"an ASOF JOIN inequality between {sqltypes.display_name(lt)} and "
                              f"{sqltypes.display_name(rt)}", j)
        keys, residual, rest = self.split_condition(
            [c for c in conjuncts if c is not ineq], lscope, shifted, both, nl)
        if residual is not None or rest:
            raise self.refuse("ASOF JOIN conditions other than equalities between the sides and one inequality", j)
        if not keys:
            raise self.refuse("ASOF JOIN without an equality condition", j)
        node = self.make_join(lnode, rnode, kind, keys, None, both)
        asof = AsofJoin(columns=node.columns, stream_key=node.stream_key, left=lnode, right=rnode, kind=kind,
                        left_keys=node.left_keys, right_keys=node.right_keys, residual=None,
                        asof_left=sides[0], asof_right=sides[1], asof_op=sides[2])
        return asof, both

    def keyed_by_non_null(self, node: Node) -> bool:
        """Whether a column of the node's stream key is never NULL: a table's primary key, passed
        through projections and filters."""
        return bool(set(node.stream_key) & self.non_null_keys(node))

    def non_null_keys(self, node: Node) -> set[int]:
        if isinstance(node, Scan):
            obj = self.resolve_object(node.source)
            if obj is None:
                return set()
            return {k for k in node.stream_key if node.columns[k].name in obj.pk}
        if isinstance(node, Map):
            inner = self.non_null_keys(node.child)
            return {i for i, e in enumerate(node.exprs) if isinstance(e, exp.Column) and not e.table
                    and e.name.startswith("c") and e.name[1:].isdigit() and int(e.name[1:]) in inner}
        return set()

    def with_present_marker(self, node: Node) -> Map:
        """The node's rows with a hidden constant 1 after its columns. In a FULL join it is 1 where
        the left row is present and NULL where the join padded it: a row padded on the right and
        one padded on the left agree on every other key column when both sides are keyed by
        nothing or by NULLs (global aggregates, a NULL group) and their join keys are NULL."""
        exprs = [exp.column(cname(i)) for i in range(len(node.columns))] + [exp.Literal.number(1)]
        m = self.map(node, exprs, None, [c.name for c in node.columns] + ["_rw_present"],
                     [c.hidden for c in node.columns] + [True])
        m.stream_key = list(node.stream_key)
        return m

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
        node, scope = self.join_explicit(left, (rnode, rscope), j, side)
        if not isinstance(node, Join) or node.right is not rnode:
            raise self.refuse("a temporal join condition on expressions of the dimension (use its columns)", j)
        nl = len(node.left.columns)
        dimension, lookup_key = rnode.source, list(rnode.stream_key)
        stream_key = list(node.left.stream_key) or list(range(nl))
        if not lookup_key or not set(lookup_key) <= set(node.right_keys):
            index = self.lookup_index(dim, rnode, node.right_keys)
            if index is None:
                pk = ", ".join(dim.pk) or "it has none"
                raise self.refuse(f"a temporal join whose ON covers neither the primary key of {rnode.source!r} "
                                  f"({pk}) nor the key of an index on it holding all its columns (CREATE INDEX "
                                  f"... ON {rnode.source} (the columns the ON condition matches))", j)
            dimension, lookup_key = index
            if dimension not in self.inputs:  # read at its committed epoch: advanced before this view
                self.inputs.append(dimension)
            # a left row may meet several rows: each output row is also keyed by the dimension's key
            stream_key += [nl + k for k in rnode.stream_key]
        lookup = LookupJoin(columns=node.columns, stream_key=stream_key, left=node.left,
                            right=node.right, kind=node.kind, left_keys=node.left_keys,
                            right_keys=node.right_keys, residual=node.residual, dimension=dimension,
                            memo=not self.append_only(lnode), lookup_key=lookup_key)
        return lookup, scope

    def lookup_index(self, dim, rnode: Scan, right_keys: list[int]) -> tuple[str, list[int]] | None:
        """The index a temporal join looks `dim` up in when its ON does not cover dim's primary key:
        the first index (in creation order, so that planning again picks the same one) whose key
        columns the ON's equalities all cover and that holds every column of dim (no INCLUDE, or
        one naming them all); or `dim` itself when it is such an index. Returns (the index's name,
        the positions of its key columns in `rnode`), or None."""
        names = [c.name for c in rnode.columns]
        covered = {names[k] for k in right_keys}
        candidates = [dim] if (dim.options or {}).get(INDEX_OF) else self.indexes(dim.name)
        for index in candidates:
            key = index.options.get("index_key") or []
            holds = {c.name for c in index.columns}
            if key and set(key) <= covered and set(names) <= holds:
                return index.name, [names.index(k) for k in key]
        return None

    def append_only(self, node: Node) -> bool:
        """Whether a plan only ever inserts: scans of append-only objects through filters,
        projections, unions and lookup joins."""
        if isinstance(node, Scan):
            obj = self.resolve_object(node.source)
            return obj is not None and bool(obj.append_only)
        if isinstance(node, LookupJoin):
            return self.append_only(node.left)
        if isinstance(node, (WindowCloseAggregate, WindowCloseFilter, Changelog)):  # emits once, never retracts
            return True
        if isinstance(node, OverWindow):  # over rows the watermark passed, in time order (window_close)
            while isinstance(node, OverWindow):
                node = node.child
            return isinstance(node, WindowCloseFilter)
        if isinstance(node, (Map, UnionAll, ProjectSet)) or (
                isinstance(node, TemporalFilter) and not any(b.is_lower for b in node.bounds)):
            # (a temporal filter with upper bounds alone only lets rows in, later)
            return all(self.append_only(c) for c in node.children)
        return False

    def expression_keys(self, lnode: Node, lscope: Scope, rnode: Node, rscope: Scope, conjuncts):
        """Equalities between an expression of one side and an expression of the other (not both
        plain columns) become join keys: each side computes its expression as a hidden column."""
        lexprs, rexprs, rest = [], [], []
        for c in conjuncts:
            sides = None
            null_safe = isinstance(c, exp.NullSafeEQ)
            if null_safe or (isinstance(c, exp.EQ) and not (
                    isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column))):
                a, b = c.this, c.expression
                if resolves(self, a, lscope) and resolves(self, b, rscope):
                    sides = (a, b)
                elif resolves(self, b, lscope) and resolves(self, a, rscope):
                    sides = (b, a)
            if sides is None:
                rest.append(c)
                continue
            left, right = self.bind(sides[0], lscope), self.bind(sides[1], rscope)
            if null_safe:
                # a IS NOT DISTINCT FROM b: keys (a IS NULL, b IS NULL) and both with NULL as one value
                lexprs.append(exp.Is(this=left.copy(), expression=exp.Null()))
                rexprs.append(exp.Is(this=right.copy(), expression=exp.Null()))
                left, right = (self.null_as_value(n, e, c) for n, e in ((lnode, left), (rnode, right)))
            lexprs.append(left)
            rexprs.append(right)
        if not lexprs:
            return lnode, rnode, [], conjuncts
        nl, nr = len(lnode.columns), len(rnode.columns)
        lnode = self.with_columns(lnode, lexprs)
        rnode = self.with_columns(rnode, rexprs)
        return lnode, rnode, [(nl + i, nr + i) for i in range(len(lexprs))], rest

    def null_as_value(self, node: Node, e: exp.Expression, where: exp.Expression) -> exp.Expression:
        """`e` (over the node's columns) with NULL replaced by a value of its type: as a join key
        beside `e IS NULL`, two rows match when both are NULL or both equal."""
        t = self.type_of(node, e)
        families = (("interval", "0 seconds"), ("int", "0"), ("numeric", "0"), ("real", "0"), ("double", "0"),
                    ("char", ""), ("text", ""), ("bool", "false"), ("timestamp", "1970-01-01 00:00:00"),
                    ("date", "1970-01-01"), ("time", "00:00:00"), ("bytea", ""))
        value = next((v for family, v in families if family in t), None)
        if value is None or t.endswith("[]"):
            raise self.refuse(f"IS NOT DISTINCT FROM between {t} values as a join key", where)
        return exp.Coalesce(this=e, expressions=[exp.cast(exp.Literal.string(value), sqltypes.duckdb_type(t))])

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

    def make_join(self, left: Node, right: Node, kind: str, keys, residual, both: Scope,
                  present: int | None = None) -> Join:
        nl = len(left.columns)
        columns = [Col(c.name, c.type, c.hidden) for c in left.columns] + \
                  [Col(c.name, c.type, c.hidden) for c in right.columns]
        key: list[int] = []
        # an outer join pads one side with NULLs, so the other side's join key must identify rows too
        right_keys = [nl + rk for _, rk in keys] if kind != "inner" else []
        marker = [present] if present is not None else []  # (join_explicit.with_present_marker)
        for k in [lk for lk, _ in keys] + right_keys + left.stream_key + [nl + k for k in right.stream_key] + marker:
            if k not in key:
                key.append(k)
        if residual is not None:
            refuse_aggregates(self, residual, "JOIN conditions")
            residual = typed_expression(residual, {cname(i): c.type for i, c in enumerate(columns)})
        return Join(columns=columns, stream_key=key, left=left, right=right, kind=kind,
                    left_keys=[lk for lk, _ in keys], right_keys=[rk for _, rk in keys], residual=residual)


_NUMBERS = {"smallint", "integer", "bigint", "real", "double precision"}
_TIMES = {"date", "timestamp", "timestamptz"}


def _comparable(a: str, b: str) -> bool:
    """Whether two column types compare by < and > without a cast the user did not write."""
    if a == b:
        return True
    number = [t in _NUMBERS or t.startswith("numeric") for t in (a, b)]
    return all(number) or (a in _TIMES and b in _TIMES)
