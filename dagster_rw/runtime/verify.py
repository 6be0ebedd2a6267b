"""Checks of an object's committed contents: its key holds, and a view equals its query run in batch.

These back the Dagster asset checks but need nothing from Dagster: each returns a plain dict with
`passed` and figures. The batch comparison runs the view's query over its inputs' committed snapshots
in-process (DuckDB) and compares whole rows as multisets; above `full_max_rows` it compares only the
rows of a random sample of stream keys, on both sides.
"""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
from sqlglot import exp

from ..engine.duck import quote
from ..sql import statements as st
from ..sql.planner.temporal_filters import is_now
from ..storage.catalog import MATERIALIZED_VIEW
from . import dataflow, epochs

FLOAT_DIGITS = 6  # incremental sums of doubles differ from batch sums in the last bits


def visible_key(obj) -> list[str]:
    """The key users see: the primary key, else the stream key unless it is a hidden row id."""
    hidden = {c.name for c in obj.columns if c.hidden}
    return list(obj.pk) or [k for k in obj.stream_key if k not in hidden]


def key_check(conn, name: str) -> dict:
    """The object's key is unique and never null."""
    obj = conn.wh.get(name)
    key = visible_key(obj)
    if not key:
        return {"passed": True, "key": "", "rows": None, "duplicate_keys": 0, "null_keys": 0,
                "note": "no visible key: rows are identified by a hidden row id"}
    engine = conn.engine
    snap = conn.wh.snapshot(name)
    cols = ", ".join(quote(k) for k in key)
    row = engine.to_arrow(engine.sql(
        f"SELECT (SELECT count(*) FROM rw_s) AS n, "
        f"(SELECT count(*) FROM (SELECT {cols} FROM rw_s GROUP BY {cols} HAVING count(*) > 1)) AS dups, "
        f"(SELECT count(*) FROM rw_s WHERE {' OR '.join(f'{quote(k)} IS NULL' for k in key)}) AS nulls",
        rw_s=snap)).to_pylist()[0]
    dup_sample = []
    if row["dups"]:
        dup_sample = engine.to_arrow(engine.sql(
            f"SELECT {cols}, count(*) AS n FROM rw_s GROUP BY {cols} HAVING count(*) > 1 LIMIT 5",
            rw_s=snap)).to_pylist()
    return {"passed": row["dups"] == 0 and row["nulls"] == 0, "key": ", ".join(key), "rows": row["n"],
            "duplicate_keys": row["dups"], "null_keys": row["nulls"],
            "duplicate_sample": [{k: _plain(v) for k, v in r.items()} for r in dup_sample]}


def _at_barrier_time(query: exp.Expression, seconds: float | None) -> exp.Expression:
    """The query with now() read as the time a view with a temporal filter saw at its epoch (the
    barrier's), not the time the check runs."""
    if seconds is None:
        return query
    at = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(sep=" ")
    return query.copy().transform(
        lambda n: exp.cast(exp.Literal.string(at), exp.DataType.build("timestamptz")) if is_now(n) else n)


def batch_check(conn, name: str, full_max_rows: int = 100_000, sample_keys: int = 1_000) -> dict:
    """The view equals its query recomputed in batch over its inputs' committed snapshots.

    Comparable only when every input has committed the view's epoch (as after a run that refreshed
    the inputs and then the view); otherwise the result says so and compares nothing.
    """
    wh = conn.wh
    obj = wh.get(name)
    if obj.kind != MATERIALIZED_VIEW:
        return {"passed": True, "compared": False, "note": f"{name!r} is a {obj.kind}, not a view"}
    epoch = wh.manifest(name).epoch
    ahead = {i: wh.manifest(i).epoch for i in obj.inputs if wh.manifest(i).epoch != epoch}
    if ahead:
        return {"passed": True, "compared": False, "epoch": epoch,
                "note": f"inputs at other epochs than the view's {epoch}: {ahead}; compared nothing"}
    defined = wh.inline_functions(st.view_query(obj.sql))  # the view's query, its SQL functions inlined
    if dataflow.reads_the_time(wh.plan(obj)):
        defined = _at_barrier_time(defined, epochs.barrier_time(wh.store, epoch))
    query = conn.batch_query(defined)
    rels = conn.snapshot_relations(query)
    engine = conn.engine
    visible = obj.visible_columns
    # positional names (a batch query names its outputs its own way); doubles rounded
    names = [f"c{i}" for i in range(len(visible))]
    batch = engine.to_arrow(engine.sql(conn.duckdb_sql(query, rels), **rels)).rename_columns(names)
    view = engine.to_arrow(engine.sql(
        f"SELECT {', '.join(quote(c.name) for c in visible)} FROM rw_v", rw_v=wh.snapshot(name))).rename_columns(names)

    def normal(alias: str) -> str:
        exprs = [f"round({n}, {FLOAT_DIGITS}) AS {n}" if c.type in ("double precision", "real") else n
                 for n, c in zip(names, visible)]
        return f"SELECT {', '.join(exprs)} FROM {alias}"

    key = [k for k in obj.stream_key if k in {c.name for c in visible}]
    sampled = bool(view.num_rows > full_max_rows and key)
    rels2 = {"rw_view": view, "rw_batch": batch}
    view_sql, batch_sql = normal("rw_view"), normal("rw_batch")
    if sampled:
        positions = [next(i for i, c in enumerate(visible) if c.name == k) for k in key]
        kcols = ", ".join(f"c{i}" for i in positions)
        rels2["rw_keys"] = engine.to_arrow(engine.sql(
            f"SELECT DISTINCT {kcols} FROM rw_view USING SAMPLE {int(sample_keys)} ROWS", rw_view=view))
        keep = f"WHERE ({kcols}) IN (SELECT ({kcols}) FROM rw_keys)"
        view_sql, batch_sql = f"SELECT * FROM ({view_sql}) {keep}", f"SELECT * FROM ({batch_sql}) {keep}"
    diff = engine.to_arrow(engine.sql(
        f"SELECT 'missing' AS rw_side, * FROM (({batch_sql}) EXCEPT ALL ({view_sql})) "
        f"UNION ALL SELECT 'extra' AS rw_side, * FROM (({view_sql}) EXCEPT ALL ({batch_sql}))", **rels2))
    passed, note = diff.num_rows == 0, None
    tied = _with_ties(defined) if diff.num_rows and not sampled else None
    if tied is not None:
        # ORDER BY ... LIMIT n: rows tied with the n-th may be taken in any order, so a view that
        # took other tied rows than the batch query is right when it has as many rows, all among
        # the first n and their ties
        tied = conn.batch_query(tied)
        trels = conn.snapshot_relations(tied)
        rels2["rw_allowed"] = engine.to_arrow(engine.sql(conn.duckdb_sql(tied, trels), **trels)).rename_columns(names)
        outside = engine.to_arrow(engine.sql(
            f"SELECT count(*) AS n FROM (({view_sql}) EXCEPT ALL ({normal('rw_allowed')}))", **rels2))
        if rels2["rw_allowed"].num_rows > batch.num_rows and view.num_rows == batch.num_rows \
                and outside.column(0)[0].as_py() == 0:
            passed, note = True, "the view took other rows tied at its LIMIT than the batch query did"
    missing = diff.column("rw_side").to_pylist().count("missing")
    sample = diff.slice(0, 5).to_pylist()
    out = {"passed": passed, "compared": True, "epoch": epoch,
           "mode": "sample" if sampled else "full", "view_rows": view.num_rows, "batch_rows": batch.num_rows,
           "rows_missing_from_view": missing, "rows_extra_in_view": diff.num_rows - missing,
           "difference_sample": [{k: _plain(v) for k, v in r.items()} for r in sample]}
    if note:
        out["note"] = note
    return out


def _with_ties(query):
    """A top-N query (`ORDER BY ... LIMIT n`, no OFFSET) as FETCH FIRST n ROWS WITH TIES, else None.
    (A weaker test than exact equality: it does not tell which tied rows a view must hold, so a view
    that lost a row ranked above the tie and holds another tied row instead would pass it; the
    differential tests check the operator itself.)"""
    from sqlglot import exp

    limit = query.args.get("limit") if isinstance(query, exp.Select) else None
    if not isinstance(limit, exp.Limit) or query.args.get("order") is None or query.args.get("offset") is not None:
        return None
    tied = query.copy()
    tied.set("limit", exp.Fetch(direction="FIRST", count=limit.expression.copy(),
                                limit_options=exp.LimitOptions(percent=False, rows=True, with_ties=True)))
    return tied


def _plain(v):
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def snapshot_arrow(conn, name: str) -> pa.Table:
    """The object's committed rows (visible columns) as an Arrow table."""
    obj = conn.wh.get(name)
    engine = conn.engine
    return engine.to_arrow(engine.sql(
        f"SELECT {', '.join(quote(c.name) for c in obj.visible_columns)} FROM rw_v", rw_v=conn.wh.snapshot(name)))
