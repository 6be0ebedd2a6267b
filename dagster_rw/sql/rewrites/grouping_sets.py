"""GROUPING SETS, ROLLUP and CUBE as a UNION ALL of one aggregate per grouping set."""
from __future__ import annotations

import functools

from sqlglot import exp

from ...errors import ProgrammingError
from ..syntax import AGG_FUNCS, output_name, transform_top_down


def grouping_sets_as_union_all(query: exp.Expression, context) -> exp.Expression:
    """`GROUP BY` with GROUPING SETS, ROLLUP or CUBE (alone or beside plain keys, whose sets are
    crossed as in PostgreSQL) as one branch per grouping set, under UNION ALL (UNION for SELECT
    DISTINCT): each branch groups by its set and shows the other grouping columns as NULL of their
    type outside aggregates; `grouping(a, ...)` becomes the constant bit mask of the arguments its
    set leaves out. The empty set is a global aggregate (one row even over no input, as in
    PostgreSQL). Each branch is an aggregate every path maintains; ORDER BY / LIMIT are refused.

        SELECT k, v, count(*) AS n, grouping(k, v) AS g FROM t GROUP BY ROLLUP (k, v)
        -> SELECT k, v, COUNT(*) AS n, 0 AS g FROM t GROUP BY k, v
           UNION ALL SELECT k, CAST(NULL AS INT) AS v, COUNT(*) AS n, 1 AS g FROM t GROUP BY k
           UNION ALL SELECT CAST(NULL AS INT) AS k, CAST(NULL AS INT) AS v, COUNT(*) AS n, 3 AS g FROM t
           HAVING COUNT(*) >= 0
    """
    group = query.args.get("group") if isinstance(query, exp.Select) else None
    if group is None or not (any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions)
                             or any(_own_groupings(query))):
        return query
    if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "totals")):
        raise context.refuse(f"this GROUP BY clause: {group.sql(dialect='postgres')}", group)
    for key in ("order", "limit", "offset"):
        if query.args.get(key) is not None:
            raise context.refuse("ORDER BY / LIMIT on GROUPING SETS, ROLLUP or CUBE", query.args[key])

    group = _aliases_resolved(group, query, context)
    sets = [[]]
    for element in group.expressions:
        sets = [s + o for s in sets for o in _sets_of(element, context)]
    keys: list[exp.Expression] = []  # every grouping expression, once
    for s in sets:
        for e in s:
            if not any(_same(e, k) for k in keys):
                keys.append(e)
    types = context.output_types(_probe(query, keys)) if keys else []
    for call in _own_groupings(query):
        for arg in call.expressions:
            if not any(_same(arg, k) for k in keys):
                subject = f"in {context.obj!r}: " if context.obj else ""
                raise ProgrammingError(f"{subject}arguments to GROUPING must be grouping expressions of the associated "
                                       f"query level{context.where(call)}")

    def branch(grouped: list[exp.Expression]) -> exp.Select:
        def nulled(node):
            if isinstance(node, exp.Grouping):
                bits = [0 if any(_same(a, g) for g in grouped) else 1 for a in node.expressions]
                return exp.Literal.number(functools.reduce(lambda acc, b: acc * 2 + b, bits, 0))
            if type(node) in AGG_FUNCS or isinstance(node, exp.AggFunc):
                return node.copy()  # the rows of each group, grouped column or not: left as written
            for k, t in zip(keys, types):
                if _same(node, k) and not any(_same(node, g) for g in grouped):
                    return exp.Cast(this=exp.Null(), to=exp.DataType.build(t, dialect="postgres"))
            return node

        out = query.copy()
        for key in ("with_", "group", "having", "distinct"):
            out.set(key, None)
        items = []
        for item in query.expressions:
            inner = item.this if isinstance(item, exp.Alias) else item
            done = transform_top_down(inner, nulled)
            items.append(done if done.sql() == item.sql() else exp.alias_(done, output_name(item), quoted=False))
        out.set("expressions", items)
        if grouped:
            out.set("group", exp.Group(expressions=[g.copy() for g in grouped]))
        having = query.args.get("having")
        if having is not None:
            out.set("having", exp.Having(this=transform_top_down(having.this, nulled)))
        elif not grouped:  # the empty grouping set: an aggregate, one row even over no input
            every_row = exp.GTE(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0))
            out.set("having", exp.Having(this=every_row))
        return out

    out = functools.reduce(lambda a, b: exp.union(a, b, distinct=bool(query.args.get("distinct"))),
                           [branch(s) for s in sets])
    if query.args.get("with_") is not None:
        out.set("with_", query.args["with_"].copy())
    return out


def _own_groupings(query: exp.Select) -> list[exp.Grouping]:
    """The grouping() calls of the query's select list and HAVING (not of queries nested in them)."""
    parts = list(query.expressions) + ([query.args["having"]] if query.args.get("having") is not None else [])
    return [n for p in parts for n in p.walk(prune=lambda n: isinstance(n, exp.Query))
            if isinstance(n, exp.Grouping)]


def _aliases_resolved(group: exp.Group, query: exp.Select, context) -> exp.Group:
    """GROUP BY names an output column by its alias where no input column has that name (as
    PostgreSQL reads it): such names are replaced by the aliased expression."""
    aliases = {i.alias: i.this for i in query.expressions if isinstance(i, exp.Alias)}
    named = [c for c in group.find_all(exp.Column) if not c.table and c.name in aliases]
    if not named:
        return group
    probe = query.copy()
    for key in ("group", "having", "order", "limit", "offset", "distinct", "qualify"):
        probe.set(key, None)
    probe.set("expressions", [exp.Star()])
    inputs = set(context.output_names(probe))
    return group.transform(lambda n: aliases[n.name].copy() if isinstance(n, exp.Column) and n in named
                           and n.name not in inputs else n)


def _sets_of(element: exp.Expression, context) -> list[list[exp.Expression]]:
    """The grouping sets of one GROUP BY element: a plain key is one set of one; ROLLUP (a, b) is
    (a, b), (a), (); CUBE (a, b) every subset; GROUPING SETS the union of its elements' sets."""
    def items(e):
        if isinstance(e, exp.Paren):  # (a) is the set of one
            return items(e.this)
        return list(e.expressions) if isinstance(e, exp.Tuple) else [e]

    if isinstance(element, exp.Rollup):
        parts = [items(e) for e in element.expressions]
        return [sum(parts[:n], []) for n in range(len(parts), -1, -1)]
    if isinstance(element, exp.Cube):
        parts = [items(e) for e in element.expressions]
        return [sum((p for i, p in enumerate(parts) if mask >> (len(parts) - 1 - i) & 1), [])
                for mask in range(2 ** len(parts) - 1, -1, -1)]
    if isinstance(element, exp.GroupingSets):
        out = []
        for e in element.expressions:
            out.extend(_sets_of(e, context) if isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets))
                       else [items(e)])
        return out
    if isinstance(element, exp.Tuple):
        raise context.refuse(f"a parenthesized list in GROUP BY outside GROUPING SETS, ROLLUP or CUBE: "
                             f"{element.sql(dialect='postgres')}", element)
    return [[element]]


def _same(a: exp.Expression, b: exp.Expression) -> bool:
    """Whether two expressions name the same grouping key: equal SQL, or the same column where one
    of them leaves the table out."""
    if isinstance(a, exp.Column) and isinstance(b, exp.Column) and not isinstance(a.this, exp.Star):
        return a.name == b.name and (not a.table or not b.table or a.table == b.table)
    return type(a) is type(b) and a.sql() == b.sql()


def _probe(query: exp.Select, keys: list[exp.Expression]) -> exp.Select:
    """The query's FROM and WHERE selecting the grouping expressions: what types their NULLs take."""
    probe = query.copy()
    for key in ("group", "having", "order", "limit", "offset", "distinct", "qualify"):
        probe.set(key, None)
    probe.set("expressions", [k.copy() for k in keys])
    return probe
