"""A subquery in HAVING as a condition in WHERE over the grouped query."""
from __future__ import annotations

from sqlglot import exp

from ..syntax import AGG_FUNCS, SUBQUERY_ALIAS, ancestors_until, derived, output_name, transform_top_down


def having_subqueries_as_where(query: exp.Expression, context) -> exp.Expression:
    """HAVING with a subquery (`HAVING sum(x) > (SELECT ... )`, TPC-H q11) as the grouped query
    in FROM and the condition in WHERE over it, where the planner maintains it as a dynamic
    filter: the aggregates and columns the condition reads outside its subqueries become hidden
    columns of the grouped query. A subquery correlated with the grouped query's own FROM is
    refused (its columns are gone outside it), and so is `*` in the select list.

        SELECT k, sum(v) AS s FROM t GROUP BY k HAVING sum(v) > (SELECT avg(v) FROM u)
        -> SELECT "_rw_sqhaving"."_rw_sqo0" AS "k", "_rw_sqhaving"."_rw_sqo1" AS "s"
           FROM (SELECT k AS "_rw_sqo0", SUM(v) AS "_rw_sqo1", SUM(v) AS "_rw_sqh0" FROM t GROUP BY k) AS _rw_sqhaving
           WHERE "_rw_sqhaving"."_rw_sqh0" > (SELECT AVG(v) FROM u)
    """
    if not (isinstance(query, exp.Select) and query.args.get("having")
            and any(query.args["having"].find_all(exp.Subquery, exp.Exists))):
        return query
    q = query
    having = q.args["having"].this
    grouped_tables = {t.alias_or_name for t in q.find_all(exp.Table) if not any(
        isinstance(a, (exp.Subquery, exp.Exists)) for a in ancestors_until(t, q))}
    for sub in having.find_all(exp.Subquery, exp.Exists):
        own = {t.alias_or_name for t in sub.find_all(exp.Table, exp.Subquery, exp.CTE)}
        for col in sub.find_all(exp.Column):
            if col.table and col.table in grouped_tables and col.table not in own:
                raise context.refuse("a subquery in HAVING correlated with the grouped query", sub)
    inner = q.copy()
    for key in ("having", "order", "limit", "offset", "distinct"):
        inner.set(key, None)
    names, inside = [], []  # each output's name, and its unique name inside
    for i, item in enumerate(list(inner.expressions)):
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise context.refuse("* in a SELECT list with a subquery in HAVING", item)
        names.append(output_name(item))
        inside.append(f"{SUBQUERY_ALIAS}o{i}")
        inner.expressions[i] = exp.alias_(item.unalias() if isinstance(item, exp.Alias) else item,
                                           inside[-1], quoted=True)
    exposed: list[exp.Expression] = []
    table = f"{SUBQUERY_ALIAS}having"

    def expose(node):  # (a node returned as it is is descended into; a new one is not)
        if isinstance(node, (exp.Subquery, exp.Exists)):
            return node.copy()
        if type(node) in AGG_FUNCS or isinstance(node, exp.Column):
            alias = f"{SUBQUERY_ALIAS}h{len(exposed)}"
            exposed.append(exp.alias_(node.copy(), alias, quoted=True))
            return exp.column(alias, table=table, quoted=True)
        return node

    cond = transform_top_down(having.copy(), expose)
    inner.set("expressions", list(inner.expressions) + exposed)
    outer = exp.select(*[exp.alias_(exp.column(i, table=table, quoted=True), n, quoted=True)
                         for i, n in zip(inside, names)]).from_(derived(inner, table))
    outer = outer.where(cond)
    for key in ("order", "limit", "offset", "distinct"):
        if q.args.get(key) is not None:
            outer.set(key, q.args[key].copy())
    return outer
