"""Terms every branch of an OR repeats, taken out of it."""
from __future__ import annotations

from sqlglot import exp

from ..syntax import and_terms, operands


def common_terms_out_of_or(query: exp.Expression, context=None) -> exp.Expression:
    """In every WHERE and JOIN ... ON condition (of the query and the queries nested in it), an
    OR whose branches all repeat a term has it taken out: (a AND b) OR (a AND c) is a AND (b OR c),
    and the law holds in SQL's three-valued logic too. So a join condition every branch repeats
    (TPC-H q19's p_partkey = l_partkey) becomes a join key. A branch made of the common terms
    alone makes the OR true whenever they are: then the OR goes.

        SELECT * FROM t, u WHERE (t.k = u.k AND t.v > 3) OR (u.k = t.k AND u.w < 5)
        -> SELECT * FROM t, u WHERE t.k = u.k AND (t.v > 3 OR u.w < 5)
    """
    if not any(_has_or(n) for n in query.find_all(exp.Where, exp.Join)):
        return query
    query = query.copy()
    # deepest first, so a condition rebuilt around a nested query holds that query rewritten
    for node in reversed(list(query.find_all(exp.Where, exp.Join))):
        if not _has_or(node):
            continue
        cond = _condition(node)
        terms = [f for t in and_terms(cond) for f in (_factored(t) if isinstance(t, exp.Or) else (t,))]
        node.set("this" if isinstance(node, exp.Where) else "on", exp.and_(*terms) if len(terms) > 1 else terms[0])
    return query


def _condition(node: exp.Expression) -> exp.Expression | None:
    return node.this if isinstance(node, exp.Where) else node.args.get("on")


def _has_or(node: exp.Expression) -> bool:
    cond = _condition(node)
    return cond is not None and any(isinstance(t, exp.Or) for t in and_terms(cond))


def _factored(cond: exp.Or):
    """The conjuncts of an OR with the terms common to all its branches taken out."""
    branches = [list(_conjuncts(d)) for d in operands(cond, exp.Or)]
    keys = [{_term_key(c) for c in b} for b in branches]
    common: dict[str, exp.Expression] = {}
    for c in branches[0]:
        if all(_term_key(c) in k for k in keys[1:]):
            common.setdefault(_term_key(c), c)
    if not common:
        yield cond
        return
    yield from (c.copy() for c in common.values())
    rests = [[c for c in b if _term_key(c) not in common] for b in branches]
    if all(rests):  # a branch of the common terms alone makes the OR true whenever they are
        yield exp.or_(*[exp.and_(*[c.copy() for c in r]) for r in rests])


def _conjuncts(cond):
    for c in and_terms(cond):
        yield from _factored(c) if isinstance(c, exp.Or) else (c,)


def _term_key(term: exp.Expression) -> str:
    """A term's text, the same for `a = b` and `b = a`."""
    if isinstance(term, exp.EQ):
        return "=".join(sorted((term.this.sql(), term.expression.sql())))
    return term.sql()
