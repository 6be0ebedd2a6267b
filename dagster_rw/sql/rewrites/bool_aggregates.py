"""BOOL_AND / BOOL_OR (and EVERY) as counts."""
from __future__ import annotations

from sqlglot import exp


def bool_aggregates_as_counts(query: exp.Expression, context=None) -> exp.Expression:
    """`bool_and(x)` as "x is never false" and `bool_or(x)` as "x is true somewhere", each over the
    rows where x is not NULL (NULL when there is none): two counts, which every aggregate path
    maintains under deletes as well as inserts. DISTINCT changes neither answer; a FILTER (WHERE c)
    makes x NULL where c does not hold (aggregate_filters_as_case leaves these). Every query
    nested in `query` is rewritten too; as a window function (OVER) they are left to the planner.

        SELECT k, bool_and(v > 1) AS a FROM t GROUP BY k
        -> SELECT k, CASE WHEN COUNT(v > 1) > 0 THEN COUNT(CASE WHEN NOT (v > 1) THEN 1 END) = 0 END AS a FROM t
           GROUP BY k
    """
    def is_every(node: exp.Expression) -> bool:
        return isinstance(node, exp.Anonymous) and node.name.lower() == "every" and len(node.expressions) == 1

    if not any(isinstance(n, (exp.LogicalAnd, exp.LogicalOr)) or is_every(n) for n in query.walk()):
        return query

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node.parent, exp.Window):
            return node
        when = None
        if isinstance(node, exp.Filter) and isinstance(node.expression, exp.Where) and (
                isinstance(node.this, (exp.LogicalAnd, exp.LogicalOr)) or is_every(node.this)):
            when, node = node.expression.this, node.this  # FILTER (WHERE c): x where c holds, else NULL
        if isinstance(node, (exp.LogicalAnd, exp.LogicalOr)):
            arg, conjunction = node.this, isinstance(node, exp.LogicalAnd)
            name = "bool_and" if conjunction else "bool_or"
        elif is_every(node):
            arg, conjunction, name = node.expressions[0], True, "every"
        else:
            return node
        if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
            arg = arg.expressions[0]
        if when is not None:
            arg = exp.Case(ifs=[exp.If(this=when.copy(), true=arg.copy())])
        grouped = arg.copy() if isinstance(arg, (exp.Column, exp.Paren)) else exp.Paren(this=arg.copy())
        hit = exp.Not(this=grouped) if conjunction else grouped
        hits = exp.Count(this=exp.Case(ifs=[exp.If(this=hit, true=exp.Literal.number(1))]))
        answer = exp.EQ(this=hits, expression=exp.Literal.number(0)) if conjunction else \
            exp.GT(this=hits, expression=exp.Literal.number(0))
        some = exp.GT(this=exp.Count(this=arg.copy()), expression=exp.Literal.number(0))
        out = exp.Case(ifs=[exp.If(this=some, true=answer)])
        # a select-list item keeps the output name PostgreSQL gives it
        item = node if when is None else node.parent
        return exp.alias_(out, name) if isinstance(item.parent, exp.Select) and item.arg_key == "expressions" else out

    return query.transform(rewrite)
