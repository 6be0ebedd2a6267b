"""WITH r (a, b) AS (...): the CTE's columns renamed by a derived table."""
from __future__ import annotations

from sqlglot import exp

from ..syntax import derived


def cte_column_lists_as_aliases(query: exp.Expression, context=None) -> exp.Expression:
    """A CTE with a column list reads as `SELECT * FROM (body) AS r (a, b)`, which renames the
    body's first outputs as a derived table's alias does.

        WITH r (a, b) AS (SELECT k, sum(v) FROM t GROUP BY k) SELECT a, b FROM r
        -> WITH r AS (SELECT * FROM (SELECT k, SUM(v) FROM t GROUP BY k) AS r(a, b)) SELECT a, b FROM r
    """
    with_ = query.args.get("with_")
    if with_ is None or not any(cte.args.get("alias") is not None and cte.args["alias"].columns
                                for cte in with_.expressions):
        return query
    query = query.copy()
    for cte in query.args["with_"].expressions:
        alias = cte.args.get("alias")
        if alias is None or not alias.columns:
            continue
        names = [n.copy() for n in alias.columns]
        cte.set("this", exp.select("*").from_(derived(cte.this.copy(), cte.alias_or_name, names)))
        alias.set("columns", None)
    return query
