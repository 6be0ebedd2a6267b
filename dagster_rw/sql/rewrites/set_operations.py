"""Set operations the planner maintains in another shape: UNION CORRESPONDING as a union of
select lists, EXCEPT and INTERSECT as a count per distinct row of each side."""
from __future__ import annotations

import sqlglot
from sqlglot import exp

from ...errors import ProgrammingError
from ..syntax import derived


def _names(context, query: exp.Expression, side: exp.Expression) -> list[str]:
    """The output names of one side of a set operation, with the operation's CTEs in sight."""
    with_ = query.args.get("with_")
    if with_ is not None and side.args.get("with_") is None:
        side = side.copy()
        side.set("with_", with_.copy())
    return context.output_names(side)


def _keep_with(out: exp.Expression, query: exp.Expression) -> exp.Expression:
    if query.args.get("with_") is not None:
        out.set("with_", query.args["with_"].copy())
    return out


def corresponding_as_select_lists(query: exp.Expression, context) -> exp.Expression:
    """`A UNION [ALL] CORRESPONDING [BY (c, ...)] B` as a union of the two sides' columns picked
    by name: those named in BY, in that order, or else the left side's columns that the right
    side also has, in the left side's order (SQL standard, as RisingWave does).

        SELECT id, k, v FROM t1 UNION ALL CORRESPONDING SELECT v, k FROM t3
        -> SELECT "_rw_a"."k", "_rw_a"."v" FROM (SELECT id, k, v FROM t1) AS _rw_a
           UNION ALL SELECT "_rw_b"."k", "_rw_b"."v" FROM (SELECT v, k FROM t3) AS _rw_b
    """
    if not (isinstance(query, exp.Union) and query.args.get("by_name") and query.args.get("kind") == "INNER"):
        return query  # (DuckDB's UNION BY NAME, kind None, is refused by the planner)
    left, right = _names(context, query, query.this), _names(context, query, query.expression)
    subject = f" in {context.obj!r}" if context.obj else ""
    by = [c.name for c in query.args.get("on") or []]
    if by:
        for name in by:
            if name not in left or name not in right:
                raise ProgrammingError(_caused(
                    f"column {name!r} in CORRESPONDING BY{subject} is not an output column of both sides of the UNION "
                    f"(left: {', '.join(left)}; right: {', '.join(right)}){context.where(query)}",
                    f"Invalid input syntax: Column name `{name}` in CORRESPONDING BY is not found in a side of "
                    f"the UNION operation. It shall be included in both sides."))
        if len(set(by)) != len(by):
            raise ProgrammingError(f"CORRESPONDING BY{subject} names a column twice{context.where(query)}")
        names = by
    else:
        names = [n for n in left if n in right]
        if not names:
            raise ProgrammingError(_caused(
                f"UNION CORRESPONDING{subject}: the two sides have no output column name in common "
                f"(left: {', '.join(left)}; right: {', '.join(right)}){context.where(query)}",
                "Invalid input syntax: When CORRESPONDING is specified, at least one column of the left side "
                "shall have a column name that is the column name of some column of the right side in a UNION "
                f"operation. Left side query column list: ({_quoted(left)}). "
                f"Right side query column list: ({_quoted(right)})."))
    for side, outputs in (("left", left), ("right", right)):
        twice = sorted({n for n in names if outputs.count(n) > 1})
        if twice:
            raise ProgrammingError(f"UNION CORRESPONDING{subject}: the {side} side has two output columns named "
                                   f"{twice[0]!r}{context.where(query)}")

    def pick(side: exp.Expression, alias: str) -> exp.Select:
        return exp.select(*[exp.column(n, table=alias, quoted=True) for n in names]).from_(
            derived(side.copy(), alias))

    out = exp.union(pick(query.this, "_rw_a"), pick(query.expression, "_rw_b"),
                    distinct=bool(query.args.get("distinct")))
    for key in ("order", "limit", "offset"):
        if query.args.get(key) is not None:
            out.set(key, query.args[key].copy())
    return _keep_with(out, query)


def set_difference_as_group_by(query: exp.Expression, context) -> exp.Expression:
    """EXCEPT / INTERSECT (set semantics) as a count per distinct row of how many rows each side
    holds: `GROUP BY` every column over `UNION ALL` of the two sides, each row tagged with its side,
    `HAVING` the left count positive and the right count zero (EXCEPT) or positive (INTERSECT).
    With ALL, a row is kept as many times as the left count exceeds the right one (EXCEPT ALL) or
    as the lesser count (INTERSECT ALL), by a series over that number (_copies). ORDER BY / LIMIT
    on them are refused.

        SELECT k FROM t1 EXCEPT SELECT k FROM t3
        -> SELECT "k" FROM (SELECT "_rw_a"."k" AS "k", 1 AS _rw_l, 0 AS _rw_r FROM (SELECT k FROM t1) AS _rw_a
           UNION ALL SELECT "_rw_b"."k" AS "k", 0 AS _rw_l, 1 AS _rw_r FROM (SELECT k FROM t3) AS _rw_b) AS _rw_set
           GROUP BY "k" HAVING SUM(_rw_l) > 0 AND SUM(_rw_r) = 0
    """
    if not isinstance(query, (exp.Except, exp.Intersect)):
        return query
    what = type(query).__name__.upper()
    every = not query.args.get("distinct")  # EXCEPT ALL / INTERSECT ALL
    if query.args.get("order") or query.args.get("limit") or query.args.get("offset"):
        raise context.refuse(f"ORDER BY / LIMIT on {what}{' ALL' if every else ''}", query)

    left, right = _names(context, query, query.this), _names(context, query, query.expression)
    if len(left) != len(right):
        raise ProgrammingError(f"each {what} query must have the same number of columns{context.where(query)}")
    if len(set(left)) != len(left):
        raise context.refuse(f"{what} of a query naming two outputs alike ({', '.join(left)})", query)

    def tagged(side: exp.Expression, names: list[str], alias: str, lhs: int) -> exp.Select:
        cols = [exp.column(n, table=alias, quoted=True).as_(left[i], quoted=True) for i, n in enumerate(names)]
        return exp.select(*cols, exp.Literal.number(lhs).as_("_rw_l"), exp.Literal.number(1 - lhs).as_("_rw_r")) \
            .from_(derived(side.copy(), alias))

    both = exp.union(tagged(query.this, left, "_rw_a", 1), tagged(query.expression, right, "_rw_b", 0),
                     distinct=False)
    keys = [exp.column(n, quoted=True) for n in left]
    if every:
        return _keep_with(_copies(both, keys, what), query)
    right_count = exp.Sum(this=exp.column("_rw_r"))
    keep = exp.and_(exp.GT(this=exp.Sum(this=exp.column("_rw_l")), expression=exp.Literal.number(0)),
                    exp.EQ(this=right_count, expression=exp.Literal.number(0)) if what == "EXCEPT"
                    else exp.GT(this=right_count, expression=exp.Literal.number(0)))
    out = exp.select(*keys).from_(derived(both, "_rw_set")).group_by(*[k.copy() for k in keys]).having(keep)
    return _keep_with(out, query)


def _copies(both: exp.Expression, keys: list[exp.Expression], what: str) -> exp.Select:
    """Each distinct row of the tagged union as many times as EXCEPT ALL / INTERSECT ALL keep it:
    the left count minus the right count, or the lesser count, when positive."""
    lc, rc = exp.Sum(this=exp.column("_rw_l")), exp.Sum(this=exp.column("_rw_r"))
    n = exp.Sub(this=lc, expression=rc) if what == "EXCEPT" else exp.Least(this=lc, expressions=[rc])
    counts = exp.select(*[k.copy() for k in keys], exp.cast(n.copy(), "INT").as_("_rw_n")) \
        .from_(derived(both, "_rw_set")).group_by(*[k.copy() for k in keys]) \
        .having(exp.GT(this=n, expression=exp.Literal.number(0)))
    series = sqlglot.parse_one("SELECT generate_series(1, _rw_n)", read="postgres").expressions[0]
    expanded = exp.select(*[k.copy() for k in keys], series.as_("_rw_i")).from_(derived(counts, "_rw_counts"))
    return exp.select(*[k.copy() for k in keys]).from_(derived(expanded, "_rw_copies"))


def _caused(message: str, cause: str) -> str:
    """A message followed by its cause in RisingWave's words, as RisingWave chains an error's causes."""
    return f"{message}\n\nCaused by:\n  {cause}"


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)
