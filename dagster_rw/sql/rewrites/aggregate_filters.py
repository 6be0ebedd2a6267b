"""Aggregate FILTER clauses as CASE arguments."""
from __future__ import annotations

from sqlglot import exp

from ..syntax import AGG_FUNCS


def aggregate_filters_as_case(query: exp.Expression, context=None) -> exp.Expression:
    """`agg(x) FILTER (WHERE c)` as `agg(CASE WHEN c THEN x END)` (and `count(*)` as a count of
    `CASE WHEN c THEN 1 END`): the aggregates maintained here all skip NULLs, so the two agree
    (an ordered-set aggregate's ORDER BY key becomes the CASE, as its argument).
    FIRST_VALUE, LAST_VALUE and ARRAY_AGG keep their FILTER (NULL is a value to them): the
    planner refuses it. Every query nested in `query` is rewritten too.

        SELECT k, count(*) FILTER (WHERE v > 3) AS n FROM t GROUP BY k
        -> SELECT k, COUNT(CASE WHEN v > 3 THEN 1 END) AS n FROM t GROUP BY k
    """
    if not any(isinstance(n, exp.Filter) for n in query.walk()):
        return query

    def when(cond: exp.Expression, value: exp.Expression) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=cond.copy(), true=value)])

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Filter) and type(node.this) in AGG_FUNCS
                and isinstance(node.expression, exp.Where)):
            return node
        agg, cond = node.this.copy(), node.expression.this
        if isinstance(agg, (exp.FirstValue, exp.LastValue, exp.ArrayAgg)):
            return node  # NULL is a value to these: refused as a FILTER by the planner
        if isinstance(agg, exp.WithinGroup):  # an ordered-set aggregate ignores NULL keys
            for key in agg.expression.expressions if isinstance(agg.expression, exp.Order) else []:
                key.set("this", when(cond, key.this))
            return agg
        holder = agg.this if isinstance(agg.this, exp.Order) else agg  # an ordered aggregate's argument
        arg = holder.this
        if isinstance(arg, exp.Star):
            agg.set("this", when(cond, exp.Literal.number(1)))
        elif isinstance(arg, exp.Distinct):
            arg.set("expressions", [when(cond, e) for e in arg.expressions])
        else:
            holder.set("this", when(cond, arg))
        return agg

    return query.transform(rewrite)
