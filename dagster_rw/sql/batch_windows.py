"""TUMBLE and HOP in batch queries: each table function becomes a subquery DuckDB can run.

The incremental planner gives TUMBLE/HOP their own plan nodes; a batch SELECT (and the check that a
view equals its query run in batch) needs the same windows as plain SQL: the relation's rows with
`window_start` / `window_end` added, aligned as the planner aligns them, HOP as one UNION ALL branch
per window holding a row.
"""
from __future__ import annotations

from sqlglot import exp

from ..errors import ProgrammingError
from .planner.time_windows import window_bounds


def has_time_windows(query: exp.Expression) -> bool:
    return any(isinstance(t.this, exp.Anonymous) and t.this.name.lower() in ("tumble", "hop")
               for t in query.find_all(exp.Table))


def expand_time_windows(query: exp.Expression, resolve, interval_micros) -> exp.Expression:
    """`query` with every TUMBLE(rel, ts, size[, offset]) / HOP(rel, ts, slide, size[, offset]) in FROM
    replaced by a subquery. `resolve(name)` gives a catalog object; `interval_micros(interval)` a
    constant size or offset."""
    if not has_time_windows(query):
        return query
    query = query.copy()
    for table in list(query.find_all(exp.Table)):
        fn = table.this
        if not (isinstance(fn, exp.Anonymous) and fn.name.lower() in ("tumble", "hop")):
            continue
        kind = fn.name.lower()
        args = fn.expressions
        want = 3 if kind == "tumble" else 4
        if len(args) not in (want, want + 1) or not isinstance(args[1], exp.Column):
            raise ProgrammingError(f"{kind.upper()} takes a relation, a time column, "
                                   f"{'a size' if kind == 'tumble' else 'a slide, a size'} and an optional offset")
        rel, ts = args[0].name, args[1].name
        obj = resolve(rel)
        if obj is None:
            raise ProgrammingError(f'relation "{rel}" does not exist')
        ttype = next((c.type for c in obj.columns if c.name == ts), None)
        if ttype not in ("timestamp", "timestamptz"):
            raise ProgrammingError(f"{kind.upper()} over {ts!r} of {rel!r}: it needs a timestamp column")
        sizes = [interval_micros(a) for a in args[2:want]]
        offset = interval_micros(args[want]) if len(args) > want else 0
        slide, size = (sizes[0], sizes[0]) if kind == "tumble" else (sizes[0], sizes[1])
        branches = []
        for k in range(size // slide):
            column = exp.column(ts, quoted=True).sql(dialect="duckdb")
            start, end = window_bounds(column, ttype, slide, size, k, offset)
            branches.append(exp.select(exp.Star(), start.as_("window_start"), end.as_("window_end")).from_(rel))
        body = branches[0]
        for b in branches[1:]:
            body = exp.union(body, b, distinct=False)
        table.replace(exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name
                                                                                           or rel))))
    return query
