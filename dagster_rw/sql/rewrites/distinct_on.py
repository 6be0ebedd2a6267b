"""SELECT DISTINCT ON as a row_number() window kept where it is 1."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError, unsupported
from ..syntax import AGG_FUNCS, derived, output_name


def distinct_on_as_row_number(query: exp.Expression, context=None) -> exp.Expression:
    """`SELECT DISTINCT ON (k) ... ORDER BY k, x` as the first row per k by x: a row_number()
    window over the same FROM, kept where it is 1 (maintained as a group top-N). The ORDER BY
    must begin with the DISTINCT ON expressions (PostgreSQL's rule); GROUP BY, aggregates, LIMIT
    and `SELECT *` with DISTINCT ON are refused.

        SELECT DISTINCT ON (k) k, v FROM t ORDER BY k, v DESC
        -> SELECT _rw_d0 AS k, _rw_d1 AS v FROM (SELECT k AS _rw_d0, v AS _rw_d1,
           ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS _rw_rn FROM t) AS _rw_distinct_on
           WHERE _rw_rn = 1
    """
    if not isinstance(query, exp.Select):
        return query
    distinct = query.args.get("distinct")
    on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
    if on is None:
        return query
    if query.args.get("group") or query.args.get("limit") or query.args.get("offset") or \
            any(type(n) in AGG_FUNCS for e in query.expressions for n in e.walk()):
        raise unsupported("DISTINCT ON with GROUP BY, aggregates or LIMIT", None, None)
    keys = list(on.expressions) if isinstance(on, exp.Tuple) else [on]
    order = list(query.args["order"].expressions) if query.args.get("order") else []
    # ORDER BY must start with the DISTINCT ON expressions (PostgreSQL's rule); the rest ranks rows
    lead = [o.this for o in order[:len(keys)]]
    if order and [k.sql() for k in lead] != [k.sql() for k in keys][:len(lead)]:
        raise ProgrammingError("SELECT DISTINCT ON expressions must match initial ORDER BY expressions")
    ranking = order[len(keys):]
    inner = query.copy()
    inner.set("distinct", None)
    inner.set("order", None)
    names, items = [], []
    for i, e in enumerate(inner.expressions):
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            raise unsupported("DISTINCT ON with SELECT *", None, None)
        names.append(output_name(e))
        items.append(exp.alias_(e.unalias() if isinstance(e, exp.Alias) else e, f"_rw_d{i}"))
    window = exp.Window(this=exp.RowNumber(), partition_by=[k.copy() for k in keys],
                        order=exp.Order(expressions=[o.copy() for o in ranking]) if ranking else None)
    inner.set("expressions", items + [exp.alias_(window, "_rw_rn")])
    return exp.select(*[exp.alias_(exp.column(f"_rw_d{i}"), n) for i, n in enumerate(names)]).from_(
        derived(inner, "_rw_distinct_on")).where(
        exp.EQ(this=exp.column("_rw_rn"), expression=exp.Literal.number(1)))
