"""Aggregates over HOP windows as aggregates over their slides, each counted once per window."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError

COMBINE = (exp.Count, exp.Min, exp.Max, exp.Sum)  # the aggregates whose slides' values combine
WINDOW_COLUMNS = ("window_start", "window_end")


def hop_aggregates_over_slices(query: exp.Expression, context=None) -> exp.Expression:
    """`SELECT keys, agg(x) FROM HOP(rel, ts, slide, size) GROUP BY keys, window_start` as the
    same aggregates first taken per slide (a TUMBLE of the slide's length), then per window over
    the size / slide slides it holds: a row is aggregated once, not once per window that holds it,
    and the windows combine one row per slide and key. count is the sum of the slides' counts,
    min and max the min and max of theirs, and sum (of integers) the sum of their sums. Applied to
    a SELECT over one HOP grouped by plain columns (window_start / window_end among them), whose
    aggregates are only these, without DISTINCT, and whose WHERE does not read the window; under
    EMIT ON WINDOW CLOSE the query is left as it is (the window's close follows the source).

        SELECT k, window_start, count(*) AS n FROM HOP(t, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY k, window_start
        -> SELECT k, window_start, CAST(SUM(_rw_a0) AS BIGINT) AS n FROM (SELECT *, window_start + INTERVAL '10000000 MICROSECONDS' AS window_end FROM (SELECT k, GENERATE_SERIES(_rw_slice - INTERVAL '8000000 MICROSECONDS', _rw_slice, INTERVAL '2000000 MICROSECONDS') AS window_start, _rw_a0 FROM (SELECT k, window_start AS _rw_slice, COUNT(*) AS _rw_a0 FROM TUMBLE(t, ts, INTERVAL '2 SECOND') GROUP BY k, window_start) AS _rw_slices) AS _rw_windows) AS t GROUP BY k, window_start
    """
    if not isinstance(query, exp.Select) or getattr(context, "window_close", False):
        return query
    hop = _hop(query)
    if hop is None or not query.args.get("group") or query.args.get("distinct") or query.args.get("joins"):
        return query
    call = hop.this
    rel, ts, slide, size = call.expressions[:4]
    offset = call.expressions[4] if len(call.expressions) > 4 else None
    slide_us, size_us = _micros(slide, context), _micros(size, context)
    if slide_us is None or size_us is None or size_us % slide_us or size_us == slide_us:
        return query
    alias = hop.alias_or_name or rel.name
    keys = query.args["group"].expressions
    if not keys or not all(isinstance(k, exp.Column) and k.table in ("", alias) for k in keys):
        return query
    key_names = [k.name for k in keys]
    if "window_start" not in key_names and "window_end" not in key_names:
        return query
    where = query.args.get("where")
    if where is not None and any(c.name in WINDOW_COLUMNS for c in where.find_all(exp.Column)):
        return query
    # every aggregate of the select list, HAVING and ORDER BY must combine; every other column read
    # there must be a key
    outer = [query.args.get(a) for a in ("having", "order") if query.args.get(a) is not None] + list(query.expressions)
    aggs: list[exp.Expression] = []
    for part in outer:
        for node in part.find_all(exp.AggFunc, exp.Window, exp.Star):
            if isinstance(node, exp.Window):
                return query
            if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count):
                return query
            if isinstance(node, exp.AggFunc):
                if type(node) not in COMBINE or isinstance(node.this, exp.Distinct):
                    return query
                aggs.append(node)
        for c in part.find_all(exp.Column):
            if not _inside(c, aggs) and (c.name not in key_names or c.table not in ("", alias)):
                return query
    if not aggs:
        return query
    casts = {}  # a sum of sums, typed as the sum was: of integers or NUMERIC only
    for i, a in enumerate(aggs):
        if isinstance(a, exp.Sum):
            try:
                kind = context.output_types(exp.select(a.copy()).from_(hop.copy()))[0]
            except ProgrammingError:  # the query as written fails: the planner says why
                return query
            if kind != "bigint" and not kind.startswith("numeric"):
                return query
            casts[i] = kind
    # the slides: the keys but the window, each aggregate once, per TUMBLE of the slide
    plain = [k for k in key_names if k not in WINDOW_COLUMNS]
    tumble_args = [rel.copy(), ts.copy(), slide.copy()] + ([offset.copy()] if offset is not None else [])
    tumble = exp.Table(this=exp.Anonymous(this="TUMBLE", expressions=tumble_args),
                       alias=exp.TableAlias(this=exp.to_identifier(alias)) if hop.alias else None)
    slices = exp.select(*[exp.column(k) for k in plain],
                        exp.alias_(exp.column("window_start"), "_rw_slice"),
                        *[exp.alias_(a.copy(), f"_rw_a{i}") for i, a in enumerate(aggs)]).from_(tumble)
    if where is not None:
        slices.set("where", where.copy())
    slices.set("group", exp.Group(expressions=[exp.column(k) for k in plain] + [exp.column("window_start")]))
    # each slide's row once per window holding it: windows start at the slide and up to
    # size - slide before it
    back = exp.Interval(this=exp.Literal.string(f"{size_us - slide_us} MICROSECONDS"))
    step = exp.Interval(this=exp.Literal.string(f"{slide_us} MICROSECONDS"))
    starts = exp.GenerateSeries(start=exp.Sub(this=exp.column("_rw_slice"), expression=back),
                                end=exp.column("_rw_slice"), step=step)
    windows = exp.select(*[exp.column(k) for k in plain], exp.alias_(starts, "window_start"),
                         *[exp.column(f"_rw_a{i}") for i in range(len(aggs))]).from_(
        exp.Subquery(this=slices, alias=exp.TableAlias(this=exp.to_identifier("_rw_slices"))))
    ends = exp.Add(this=exp.column("window_start"),
                   expression=exp.Interval(this=exp.Literal.string(f"{size_us} MICROSECONDS")))
    with_ends = exp.select(exp.Star(), exp.alias_(ends, "window_end")).from_(
        exp.Subquery(this=windows, alias=exp.TableAlias(this=exp.to_identifier("_rw_windows"))))
    out = query.copy()
    combined = {id(a): _outer(a, f"_rw_a{i}", casts.get(i)) for i, a in enumerate(aggs)}
    # (the copy is the same tree as the query until its FROM changes: its aggregates in the same order)
    for orig, copied in zip(query.find_all(exp.AggFunc), out.find_all(exp.AggFunc)):
        if id(orig) in combined:
            copied.replace(combined[id(orig)])
    out.set("from_", exp.From(this=exp.Subquery(this=with_ends, alias=exp.TableAlias(this=exp.to_identifier(alias)))))
    out.set("where", None)
    return out


def _hop(query: exp.Select) -> exp.Table | None:
    from_ = query.args.get("from_")
    item = from_.this if from_ is not None else None
    if isinstance(item, exp.Table) and isinstance(item.this, exp.Anonymous) and item.this.name.lower() == "hop" \
            and len(item.this.expressions) in (4, 5) and isinstance(item.this.expressions[0], (exp.Column, exp.Table)):
        return item
    return None


def _micros(e: exp.Expression, context) -> int | None:
    if not isinstance(e, exp.Interval) or context is None:
        return None
    try:
        return context.interval_micros(e, "hop")
    except ProgrammingError:  # the planner refuses it by name when it plans the HOP
        return None


def _inside(node: exp.Expression, aggs: list[exp.Expression]) -> bool:
    parent = node.parent
    while parent is not None:
        if any(parent is a for a in aggs):
            return True
        parent = parent.parent
    return False


def _outer(agg: exp.Expression, column: str, kind: str | None) -> exp.Expression:
    """How the windows combine the slides' values of one aggregate."""
    if isinstance(agg, exp.Count):
        return exp.Cast(this=exp.Sum(this=exp.column(column)), to=exp.DataType.build("BIGINT"))
    if isinstance(agg, exp.Sum):
        total = exp.Sum(this=exp.column(column))
        return exp.Cast(this=total, to=exp.DataType.build("BIGINT")) if kind == "bigint" else total
    return exp.Min(this=exp.column(column)) if isinstance(agg, exp.Min) else exp.Max(this=exp.column(column))
