"""GROUP BY and aggregates (Aggregate), HAVING, and SELECT DISTINCT as a grouping."""
from __future__ import annotations

import sqlglot
from sqlglot import exp

from ... import types as sqltypes
from ...errors import ProgrammingError
from ..plan import ORDERED_AGGS, ORDERED_SET_AGGS, Agg, Aggregate, Col, Map, Node, agg_text, cname
from ..syntax import AGG_FUNCS, agg_name, find_aggs, transform_top_down
from .order_limit import order_target
from .ordered_sets import OrderedSets
from .scope import Scope


INT_TYPES = ("smallint", "integer", "bigint")


class Aggregates(OrderedSets):
    """Planner methods for GROUP BY, aggregates, HAVING and DISTINCT."""

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
            if scope.entries:
                self.check_deterministic(e)
            calls.extend(find_aggs(e))
        pre_exprs = list(bound_groups)
        aggs: list[Agg] = []
        agg_keys: list[str] = []
        for call in calls:
            func, arg, distinct = self.agg_parts(call)
            bound_arg = self.bind(arg, scope) if arg is not None else None
            if func in ("sum", "avg") and bound_arg is not None:
                bound_arg = self.sum_argument(node, bound_arg)
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
                if isinstance(call, exp.WithinGroup):  # the ORDER BY key is the argument
                    _, desc, nulls_first, direct = self.ordered_set_parts(call)
                    order_at = [(arg_at, desc, nulls_first)]
                else:
                    direct = ()
                aggs.append(Agg(func, arg_at, distinct, extra_at, order_at, direct))
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
        if any(pre.columns[i].type == "interval" for i in range(ng)):  # equal intervals: one group
            pre = self.map(node, [interval_key(e) if i < ng and pre.columns[i].type == "interval" else e
                                  for i, e in enumerate(pre_exprs)], None, pre_names)
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
                if isinstance(n, exp.Expression) and not isinstance(n, (exp.Literal, exp.Star)) and \
                        not any(type(a) in AGG_FUNCS for a in n.walk()):  # (a group expression has none)
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
                if order_target(o, select_items) is None:
                    extra.append(over_agg(o))
        node = self.project(agg_node, out_exprs, names, extra=extra, where=cond)
        return node, names

    def agg_key(self, call: exp.Expression, scope: Scope) -> str:
        """One aggregate call's identity: calls with equal keys are computed once."""
        func, arg, distinct = self.agg_parts(call)
        extra, order = self.agg_extra(call, scope)
        parts = [func, str(distinct), self.bind(arg, scope).sql() if arg is not None else "*"]
        parts += [e.sql() for e in extra] + [f"{o.sql()} {desc} {nulls_first}" for o, desc, nulls_first in order]
        if isinstance(call, exp.WithinGroup):
            parts.append(repr(self.ordered_set_parts(call)[1:]))
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
        if isinstance(call, exp.WithinGroup):
            key = self.ordered_set_parts(call)[0]
            return agg_name(call), key, False
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
        elif distinct and func in ("first_value", "last_value"):
            _, order = self.agg_parts_extra(call)
            if any(o.sql() != arg.sql() for o, _, _ in order):  # (as PostgreSQL requires of DISTINCT)
                raise self.refuse(f"{func.upper()}(DISTINCT ...) ordered by anything but its argument", call)
            distinct = False  # the first (last) of the distinct values in order is the first (last) value
        elif distinct and func != "count":
            raise self.refuse(f"{func.upper()}(DISTINCT ...)", call)
        return func, arg, distinct

    def sum_argument(self, node: Node, arg: exp.Expression) -> exp.Expression:
        """SUM's (and AVG's) argument over the node's columns, as it is summed: sum(bigint) is
        NUMERIC in PostgreSQL and RisingWave (a sum of BIGINTs leaves BIGINT's range), so a BIGINT
        argument is summed as NUMERIC(38,0) on both engines (Spark would sum BIGINTs as a BIGINT);
        AVG keeps the same running sum."""
        if self.type_of(node, arg) != "bigint":
            return arg
        return exp.Cast(this=arg, to=exp.DataType.build("DECIMAL(38, 0)", dialect="duckdb"))

    def agg_type(self, a: Agg, pre: Node) -> str:
        if a.func in ("count", "count_star"):
            return "bigint"
        t = pre.columns[a.arg].type
        if a.func in ("min", "max"):
            return t
        if t.endswith("[]") and a.func in ("sum", "avg"):
            raise self.refuse(f"{a.func.upper()} over {t}")
        if a.func == "sum":
            if t in INT_TYPES:
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
            if t in INT_TYPES or t == "numeric(38,0)":  # (a BIGINT argument is summed as NUMERIC(38,0))
                return sqltypes.DEFAULT_NUMERIC  # NUMERIC, as in PostgreSQL and RisingWave
            if t.startswith("numeric") or t in ("real", "double precision"):
                return "double precision"
            raise self.refuse(f"AVG over {t}")
        if a.func in ORDERED_SET_AGGS:
            return self.ordered_set_type(a, t)
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

    def distinct(self, node: Node, width: int, names: list[str]) -> Node:
        vis = [i for i, c in enumerate(node.columns) if not c.hidden][:width]
        pre = Map(columns=[Col(node.columns[i].name, node.columns[i].type) for i in vis], stream_key=[],
                  child=node, exprs=[interval_key(exp.column(cname(i))) if node.columns[i].type == "interval"
                                     else exp.column(cname(i)) for i in vis])
        cols = [Col(n, c.type) for n, c in zip(names, pre.columns)]
        return Aggregate(columns=cols, stream_key=list(range(width)), child=pre, group=list(range(width)), aggs=[])


_MONTH_US, _DAY_US = 30 * 86_400_000_000, 86_400_000_000


def interval_key(e: exp.Expression) -> exp.Expression:
    """An interval in the one form of every interval equal to it, as a grouping key. PostgreSQL
    compares intervals as if a month were 30 days and a day 24 hours (`interval '1 day' =
    interval '24 hours'`), and equal intervals fall in one group; the state groups by the
    value's fields. The form is the justified one (months, then days under 30, then a time
    under 24 hours, all of the interval's sign), so a group of `1 day` and `24 hours` is `1 day`."""
    us = f"epoch_us({e.sql(dialect='duckdb')})"
    return sqlglot.parse_one(f"to_months(({us}) // {_MONTH_US}) + to_days((({us}) % {_MONTH_US}) // {_DAY_US}) "
                             f"+ to_microseconds(({us}) % {_DAY_US})", read="duckdb")
