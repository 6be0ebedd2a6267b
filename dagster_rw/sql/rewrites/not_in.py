"""x NOT IN (subquery) as an anti-join and a dynamic filter, with SQL's NULLs."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError
from ..syntax import and_terms, derived


def not_in_as_anti_join(query: exp.Expression, context) -> exp.Expression:
    """`x NOT IN (subquery)` as a conjunct of WHERE (over a FROM), with SQL's NULLs: true when the
    subquery has no rows; else unknown (the row filtered out) when x is NULL or when no value
    equals x but one is NULL; else true when no value equals x. Rewritten as two conjuncts the
    planner maintains: NOT EXISTS (a value equal to x), an anti-join, and a comparison of what
    the row needs (1: x is NULL, 2: it is not) with what the subquery lets through, a one-row
    aggregate (0: any row, it is empty; 3: none, it holds a NULL; 2: rows whose x is not NULL),
    a dynamic filter. Only uncorrelated subqueries: others are refused.

        SELECT id FROM t WHERE k NOT IN (SELECT k FROM u)
        -> SELECT id FROM t WHERE NOT EXISTS(SELECT 1 FROM (SELECT k FROM u) AS _rw_ni(_rw_v)
           WHERE _rw_ni._rw_v = k) AND (CASE WHEN k IS NULL THEN 1 ELSE 2 END) >= (SELECT CASE
           WHEN COUNT(*) = 0 THEN 0 WHEN COUNT(*) > COUNT(_rw_nn._rw_v) THEN 3 ELSE 2 END
           FROM (SELECT k FROM u) AS _rw_nn(_rw_v))
    """
    if not (isinstance(query, exp.Select) and query.args.get("from_") and query.args.get("where")):
        return query
    terms = list(and_terms(query.args["where"].this))
    if not any(_is_not_in(c) for c in terms):
        return query
    out = [d for c in terms for d in (_anti_join(c, context) if _is_not_in(c) else (c,))]
    query = query.copy()
    query.set("where", exp.Where(this=exp.and_(*out)))
    return query


def _is_not_in(c: exp.Expression) -> bool:
    return isinstance(c, exp.Not) and isinstance(c.this, exp.In) and isinstance(c.this.args.get("query"), exp.Subquery)


def _anti_join(c: exp.Expression, context) -> list[exp.Expression]:
    sub = c.this.args["query"].this
    if isinstance(sub, exp.Select) and (len(sub.expressions) != 1 or isinstance(sub.expressions[0], exp.Star)):
        raise ProgrammingError(f"subquery has too many columns{context.where(c)}")
    own = {t.alias_or_name for t in sub.find_all(exp.Table, exp.Subquery, exp.CTE)}
    if any(col.table and col.table not in own for col in sub.find_all(exp.Column)):
        raise context.refuse("NOT IN (subquery) correlated with the outer query (write NOT EXISTS)", c)
    x = c.this.this

    unmatched = exp.Not(this=exp.Exists(this=exp.select("1").from_(derived(sub.copy(), "_rw_ni", ["_rw_v"])).where(
        exp.EQ(this=exp.column("_rw_v", "_rw_ni"), expression=x.copy()))))
    needs = exp.Case(ifs=[exp.If(this=x.copy().is_(exp.null()), true=exp.Literal.number(1))],
                     default=exp.Literal.number(2))
    allows = exp.select(exp.Case(ifs=[
        exp.If(this=exp.EQ(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)),
               true=exp.Literal.number(0)),
        exp.If(this=exp.GT(this=exp.Count(this=exp.Star()),
                           expression=exp.Count(this=exp.column("_rw_v", "_rw_nn"))),
               true=exp.Literal.number(3))], default=exp.Literal.number(2))).from_(
        derived(sub.copy(), "_rw_nn", ["_rw_v"]))
    return [unmatched, exp.GTE(this=exp.Paren(this=needs), expression=exp.Subquery(this=allows))]
