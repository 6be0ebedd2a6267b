"""A query as a whole: the rewrite rules, CTEs, UNION, and a SELECT's clauses in the order they
are planned (FROM and WHERE, then windows, set-returning functions or aggregates, then
DISTINCT, ORDER BY and LIMIT). Array columns are refused where rows are keyed by them."""
from __future__ import annotations

from sqlglot import exp

from ... import types as sqltypes
from ...errors import ProgrammingError
from .. import rewrites
from ..plan import (
    VIEW_COLUMNS,
    Aggregate,
    Col,
    DynamicFilter,
    Join,
    Map,
    Node,
    OverWindow,
    TopN,
    UnionAll,
    Values,
    cname,
    number_nodes,
    prune_columns,
)
from ..syntax import SUBQUERY_ALIAS, and_terms, find_aggs, without_windows
from .binding import refuse_aggregates
from .scope import AliasOnly, Scope
from .set_returning import SET_RETURNING


class Queries:
    """Planner methods that plan a whole query: the entry point, CTEs, UNION and SELECT."""

    def plan(self, query: exp.Expression, emit_on_window_close: bool = False) -> Node:
        self.window_close = emit_on_window_close
        node, _names = self.plan_query(query)
        if emit_on_window_close:
            node = self.emit_on_window_close(node, query)
        self.refuse_array_keys(node)
        self.compile_non_strict(node)
        return prune_columns(number_nodes(node))

    def refuse_array_keys(self, root: Node) -> None:
        """Refuse an array or struct column wherever rows are keyed, grouped, matched or ordered by
        it (GROUP BY, DISTINCT, set operations, join keys, ORDER BY, window partitions, MIN/MAX,
        COUNT DISTINCT): state files are sorted and searched by such columns, and lists and structs
        cannot be (a struct's fields can: `GROUP BY (s).a, (s).b`)."""
        def check(node: Node, cols, what: str) -> None:
            for i in cols:
                c = node.columns[i]
                if c.type.endswith("[]"):
                    raise self.refuse(f"an array column ({c.name}, {c.type}) as {what}")
                if sqltypes.is_struct(c.type):
                    raise self.refuse(f"a struct column ({c.name}, {c.type}) as {what}; its fields can be")

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
            for cte in with_.expressions:  # each with the WITH queries its body sees: not itself
                self.ctes[cte.alias_or_name] = (cte.this, dict(self.ctes))
        if isinstance(query, exp.Union):
            return self.plan_union(query)
        if not isinstance(query, exp.Select):
            raise self.refuse(f"{type(query).__name__} as a query", query)
        return self.plan_select(query)

    def output_names(self, query: exp.Expression) -> list[str]:
        """The output column names of a query (planned on the side, to learn them)."""
        return list(self.probe().plan_query(query)[1])

    def output_types(self, query: exp.Expression) -> list[str]:
        """The types of a query's output columns (planned on the side, to learn them)."""
        node, names = self.probe().plan_query(query)
        return [c.type for c in node.columns if not c.hidden][:len(names)]

    def probe(self):
        """A planner over the same catalog and CTEs, to plan a piece of the query on its own."""
        probe = type(self)(self.resolve_object, self.sql, self.obj, self.engine, self.indexes)
        probe.ctes = dict(self.ctes)
        return probe

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
        # temporal filters apply to the rows of FROM and WHERE: never pushed into a join
        temporal, conjuncts = self.split_temporal(conjuncts) if q.args.get("from_") else ([], conjuncts)
        if q.args.get("from_"):
            q, conjuncts, lateral = self.lateral_joins(q, conjuncts)
            q, conjuncts, late = self.scalar_subqueries(q, conjuncts)
            q, conjuncts, anti = self.subquery_predicates(q, conjuncts)
            node, scope, conjuncts = self.plan_from(q, conjuncts, lateral + late + anti)
            # the subqueries' key columns: reachable by their aliases only (not by *)
            scope = Scope([AliasOnly(e) if (e.alias or "").startswith(SUBQUERY_ALIAS) else e
                           for e in scope.entries])
        else:  # SELECT without FROM reads one row of no (visible) columns
            if q.args.get("joins"):
                raise self.refuse("a JOIN without FROM", q.args["joins"][0])
            node, scope = Values(columns=[Col("_rw_one", "integer", True)], stream_key=[]), Scope([])
        if conjuncts:
            cond = exp.and_(*[self.bind(c, scope) for c in conjuncts]) if len(conjuncts) > 1 \
                else self.bind(conjuncts[0], scope)
            refuse_aggregates(self, cond, "WHERE")
            node = self.map(node, [exp.column(cname(i)) for i in range(len(node.columns))], cond,
                            [c.name for c in node.columns], keep_hidden=[c.hidden for c in node.columns])
        if temporal:
            node = self.temporal_filter(node, scope, temporal)
        select_items = self.expand_star(q.expressions, scope)
        q, select_items = self.expand_bit_aggregates(q, node, scope, select_items)
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
        srf = next((f for e, _ in select_items for f in e.find_all(*SET_RETURNING)), None)
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
