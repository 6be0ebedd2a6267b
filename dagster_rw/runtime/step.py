"""One step of one object: from its committed epoch to a target epoch, committed atomically.

A step reads its inputs' change files for (committed, target] (or, for a new view, their snapshots),
runs the operators, writes new state files and one change-log file, and commits the next manifest
version naming the target epoch. Nothing is visible before that commit; a failed or conflicting
step leaves only unreferenced files behind.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import types as sqltypes
from ..engine.base import ParquetScan
from ..engine.duck import quote
from ..errors import CommitConflict, IntegrityError
from ..operators.base import (
    DELETED,
    W,
    col_list,
    consolidate,
    consolidate_sql,
    rows_equal,
    state_writes,
)
from ..sql.plan import Join, Map, Node, Scan
from ..storage import sst_cache
from ..storage.catalog import SOURCE, TABLE, CatalogObject
from ..storage.manifest import PLANNED_UNDER, Manifest, SstFile
from ..storage.parquet_io import EPOCH
from ..storage.state_table import StateTable, in_key_order, prepare_sst
from . import conflicts, dataflow, epochs
from .watermarks import advance_watermark, watermark_at
from .interfaces import StepWarehouse

OUTPUT = "output"
# the rows of the change files a step read last (StepContext._changes_read), for the next views over them
_changes: dict[tuple, pa.Table] = {}
_changes_lock = threading.Lock()
_CHANGES_KEPT = 8
_CHANGES_KEPT_ROWS = 100_000
# a step that read at most this many change rows sorts its state files on its own thread
# (StepContext.write_now); a larger one on the writer threads, while the operators above it run
PREPARE_HERE_ROWS = 2_000


def object_schema(obj: CatalogObject) -> pa.Schema:
    return _schema(tuple((c.name, c.type) for c in obj.columns), False)


def changelog_schema(obj: CatalogObject) -> pa.Schema:
    return _schema(tuple((c.name, c.type) for c in obj.columns), True)


@functools.lru_cache(maxsize=4096)
def _schema(columns: tuple, weighted: bool) -> pa.Schema:
    fields = [pa.field(name, sqltypes.arrow_type(t)) for name, t in columns]
    return pa.schema(fields + ([pa.field(W, pa.int64())] if weighted else []))


def output_table(wh: StepWarehouse, obj: CatalogObject, m: Manifest, engine=None) -> StateTable:
    return StateTable(wh.store, engine or wh.engine, f"objects/{obj.key_folder}/state/{OUTPUT}", list(obj.stream_key),
                      object_schema(obj), m.state.get(OUTPUT, []))


class StepContext:
    """What operators see of a step: the engine, their state tables, and the input deltas."""

    def __init__(self, wh: StepWarehouse, obj: CatalogObject, m: Manifest, target: int, backfill: bool, engine,
                 input_rows: int = 0):
        self.wh = wh
        self.engine = engine
        if engine is not wh.engine:  # on Spark: how the change meets the state, by the change's size
            engine.plan_joins(spark_join_strategy(wh, input_rows), input_rows)
        self.obj = obj
        self.manifest = m
        self.target = target
        self.backfill = backfill
        self.tables: dict[str, StateTable] = {}
        self.rows_in = 0
        self.written: dict = {}  # state table -> (future of) its file, written while later operators run
        self.ready: dict = {}  # state table -> (future of) its file-to-be (PreparedSst), once sorted and named
        self.unconsolidated: set[int] = set()  # nodes whose output deltas need no consolidation
        self.deferred: list[str] = list(m.deferred)  # state tables not built yet (operators.join)

    def operator_done(self, op_id: int) -> None:
        """An operator has staged all its state writes: in-process, write its files now, on the
        writer threads, while the operators above it compute."""
        if self.engine is not self.wh.engine:
            return
        for name in self.tables:
            if name.startswith(f"op{op_id}."):
                self.write_now(name)

    def write_now(self, name: str) -> None:
        """State table `name` (`op<id>.<table>`) has all its writes of this step: in-process, write
        its file now, on a writer thread, while the operator goes on (once per step)."""
        if self.engine is not self.wh.engine or name in self.written:
            return
        start = self.manifest.epoch if self.manifest.exists else self.target
        table = self.tables[name]
        self.ready[name] = ready = Future()

        def prepare():
            try:
                prepared = table.prepare(start, self.target)
            except BaseException as e:
                ready.set_exception(e)
                raise
            ready.set_result(prepared)
            return prepared

        def write():
            prepared = prepare()
            return _finish(self.wh, prepared) if prepared is not None else None

        if self.rows_in <= PREPARE_HERE_ROWS:
            # a small change's file is sorted here: handing it to a writer thread and waiting for it
            # (behind other steps' files) costs more than the sort
            prepared = prepare()
            written = _writers().submit(_finish, self.wh, prepared) if prepared is not None else _done(None)
        else:
            written = _writers().submit(write)
        self.written[name] = written
        written.add_done_callback(lambda done: _index_ahead(table, done))

    def may_defer(self, what: str) -> bool:
        """Whether a back-fill may leave state of kind `what` unbuilt ("join_state": a join side's,
        operators.join; "value_counts": MIN/MAX's, operators.aggregate): on Spark, where that state
        costs a pass over a large input, unless the connection's `deferred_<what>` says otherwise."""
        return self.backfill and self.engine is not self.wh.engine and self.wh.options[f"deferred_{what}"]

    def batch_computable(self, node: Node) -> bool:
        """Whether a subplan's whole output can be computed in batch from its inputs' rows alone
        (relation_at_target): scans of tables and views, maps that record nothing (no non-strict
        errors), inner joins."""
        for n in node.walk():
            if isinstance(n, Scan):
                if self.wh.catalog().get(n.source).kind == SOURCE:
                    return False
            elif isinstance(n, Map):
                if n.non_strict is not None:
                    return False
            elif not (type(n) is Join and n.kind == "inner"):
                return False
        return True

    def input_changed(self, source: str) -> bool:
        """Whether input `source` committed changes in this step's epochs (from its manifest)."""
        sm = self.wh.manifest(source, provisional=not self.backfill and self.engine is self.wh.engine)
        return _changes_between(sm, self.manifest.epoch, self.target)

    def object_rows(self, name: str) -> int:
        """The rows object `name` holds, from its manifest."""
        return sum(f.rows for f in self.wh.manifest(name).state.get(OUTPUT, []))

    def object_at_target(self, source: str):
        """Object `source`'s whole relation as of this step's epoch, each row with weight 1: its
        state less the changes it committed after the step's epoch (the step's own input change is
        included)."""
        src = self.wh.catalog().get(source)
        if self.engine is self.wh.engine:
            self.wh.settle([source])  # its FLUSH's commit, in flight: its files complete
        sm = self.wh.manifest(source)
        cols = [c.name for c in src.columns]
        snap = self._whole(src, sm)
        if sm.epoch < self.target:
            raise IntegrityError(f"{self.obj.name}: {source!r} has committed epoch {sm.epoch}, before epoch "
                                 f"{self.target}, where deferred state is built")
        if any(f.epoch_from < self.target < f.epoch_to for f in sm.changelog):
            raise IntegrityError(f"{self.obj.name}: the change log of {source!r} has no boundary at epoch "
                                 f"{self.target}, where deferred state is built")
        later = [f for f in sm.changelog if f.epoch_from >= self.target]
        if later:  # the input moved on past this step: take its later changes back out
            rel = self._change_files(source, src, later)
            snap = self.engine.sql(
                f"SELECT {col_list(cols)}, CAST(sum({W}) AS BIGINT) AS {W} FROM ("
                f"SELECT {col_list(cols)}, {W} FROM s UNION ALL "
                f"SELECT {col_list(cols)}, -{W} AS {W} FROM c) GROUP BY {col_list(cols)} HAVING sum({W}) <> 0",
                s=snap, c=rel)
        return snap

    def rows_at_target(self, side: Node):
        """A join side's whole relation as of this step's epoch, with weight 1: its stateless
        maps over the rows of the object it scans, as of the step's epoch."""
        scan = next(n for n in side.walk() if isinstance(n, Scan))
        return dataflow.run(side, _SnapshotContext(self, {scan.source: self.object_at_target(scan.source)}))

    def relation_at_target(self, node: Node):
        """A subplan's whole output as of this step's epoch, computed in batch from its objects'
        rows as of that epoch: its operators run as in a backfill, over state tables of their own
        that nothing writes (for subplans a backfill computes from its inputs alone: scans of
        tables and views, maps that record nothing, inner joins; see `batch_computable`)."""
        sources = {n.source for n in node.walk() if isinstance(n, Scan)}
        return dataflow.run(node, _SnapshotContext(self, {s: self.object_at_target(s) for s in sources}, batch=True))

    def watermark(self, source: str, epoch: int) -> int | None:
        """The watermark of `source` as of `epoch` (microseconds since 1970; None: no event yet)."""
        return watermark_at(self.wh.manifest(source), epoch)

    def barrier_time(self, epoch: int) -> int:
        """now() as of `epoch` (temporal filters): the time its barrier recorded, in microseconds
        since 1970; before any barrier (epoch 0), the clock's time now."""
        seconds = epochs.barrier_time(self.wh.store, epoch)
        if seconds is None:
            clock = self.wh.options["clock"]
            seconds = clock() if clock is not None else time.time()
        return round(seconds * 1_000_000)

    def evaluate(self, query: str) -> pa.Table:
        """A query over no relation (constants: a temporal filter's bounds), answered in-process
        whatever engine the step runs on."""
        return self.wh.engine.to_arrow(self.wh.engine.sql(query))

    def lookup_committed(self, name: str, keys, on: list[str]):
        """Rows of object `name`'s committed state whose columns `on` (a prefix of its stream key,
        by column name) equal those of a row of `keys`: for temporal joins."""
        obj = self.wh.catalog().get(name)
        return output_table(self.wh, obj, self.wh.manifest(name), self.engine).lookup(keys, on)

    def state_table(self, op_id: int, name: str, pk, schema, kind=StateTable) -> StateTable:
        key = f"op{op_id}.{name}"
        if key not in self.tables:
            self.tables[key] = kind(self.wh.store, self.engine, f"objects/{self.obj.key_folder}/state/{key}",
                                    pk, schema, self.manifest.state.get(key, []))
        return self.tables[key]

    def _decoded(self, source: str, key: str) -> pa.Table:
        return _change_rows(self.wh, source, key)

    def _changes_read(self, source: str, src: CatalogObject, files: list[SstFile]) -> pa.Table:
        """The rows of an input's change files, in its change log's schema: read once for all the
        views that read the same files (a FLUSH steps each view over the same input delta)."""
        schema = changelog_schema(src)
        key = (self.wh.store.url, tuple(f.key for f in files), schema)
        rel = _changes.get(key)
        if rel is None:
            parts = [sst_cache.conform(self._decoded(source, f.key).select(schema.names), schema) for f in files]
            rel = pa.concat_tables(parts) if parts else schema.empty_table()
            if sum(f.rows for f in files) <= _CHANGES_KEPT_ROWS:  # (kept apart from the cache's bound)
                with _changes_lock:
                    _changes[key] = rel
                    while len(_changes) > _CHANGES_KEPT:
                        del _changes[next(iter(_changes))]
        return rel

    def _whole(self, src: CatalogObject, sm: Manifest):
        """An object's committed rows (its state under manifest `sm`), each with weight 1."""
        snap = output_table(self.wh, src, sm, self.engine).read_all()
        cols = [c.name for c in src.columns]
        return self.engine.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM rw_snap", rw_snap=snap)

    def _change_files(self, source: str, src: CatalogObject, files: list[SstFile]):
        if self.engine is self.wh.engine:  # in-process: the decoded files, shared with other readers
            return self._changes_read(source, src, files)
        return ParquetScan(tuple(f.key for f in files), changelog_schema(src), self.wh.store,
                           rows=sum(f.rows for f in files))

    def input_delta(self, source: str):
        src = self.wh.catalog().get(source)
        # a table committing in the background (a FLUSH) is read from this process's cache
        sm = self.wh.manifest(source, provisional=not self.backfill and self.engine is self.wh.engine)
        cols = [c.name for c in src.columns]
        if self.backfill:
            if src.kind == SOURCE:  # a source stores no rows: its snapshot is read again from Kafka
                rel = self.engine.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM rw_snap",
                                      rw_snap=self.wh.snapshot(source))
            else:
                rel = self._whole(src, sm)
        else:
            files = [f for f in sm.changelog if f.epoch_from >= self.manifest.epoch and f.epoch_to <= self.target]
            rel = self._change_files(source, src, files)
            if len(files) > 1:
                rel = consolidate(self.engine, rel, cols)
        if isinstance(rel, pa.Table):
            self.rows_in += rel.num_rows
        else:  # on Spark, the rows of the files read (counting them would be a job of its own)
            self.rows_in += sum(f.rows for f in (sm.state.get(OUTPUT, []) if self.backfill else files))
        return rel


class _SnapshotContext:
    """A step's context in which objects' input deltas are their whole relations (rows_at_target).
    With `batch`, the operators run as in a backfill that keeps nothing: none is deferred, and
    their state tables are their own, empty and never written (relation_at_target)."""

    def __init__(self, ctx: StepContext, rows: dict, batch: bool = False):
        self._ctx, self._rows, self._batch = ctx, rows, batch
        if batch:
            self.backfill, self.deferred, self.tables = True, [], {}

    def may_defer(self, what: str) -> bool:
        return not self._batch and self._ctx.may_defer(what)

    def input_delta(self, source: str):
        return self._rows[source]

    def operator_done(self, op_id: int) -> None:
        pass

    def write_now(self, name: str) -> None:
        pass

    def state_table(self, op_id: int, name: str, pk, schema, kind=StateTable) -> StateTable:
        if not self._batch:
            return self._ctx.state_table(op_id, name, pk, schema, kind)
        key = f"op{op_id}.{name}"
        if key not in self.tables:
            self.tables[key] = kind(self.wh.store, self.engine, f"objects/{self.obj.key_folder}/state/{key}",
                                    pk, schema, [])
        return self.tables[key]

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def spark_join_strategy(wh: StepWarehouse, change_rows: int) -> str:
    """How a Spark step joins its change with the state it looks up: the change's keys broadcast
    to the tasks reading the state while the step reads at most `spark_broadcast_rows` change
    rows; above that, both sides shuffled by the key (a hash join per partition)."""
    return "broadcast" if change_rows <= wh.options["spark_broadcast_rows"] else "shuffle_hash"


def target_epoch(wh: StepWarehouse, obj: CatalogObject, committed: int) -> int:
    """The newest epoch every input has committed and that no input's change file straddles (a
    view without inputs, over SELECT without FROM, follows the newest epoch)."""
    if not obj.inputs:
        return max(committed, epochs.newest_epoch(wh.store))
    inputs = [(wh.manifest(i, provisional=True), wh.catalog().get(i)) for i in obj.inputs]
    upper = min(m.epoch if m.exists else (o.created_epoch if o.kind == TABLE else 0) for m, o in inputs)
    candidates = {upper}
    for m, _ in inputs:
        for f in m.changelog:
            candidates.update((f.epoch_from, f.epoch_to))
    for t in sorted((c for c in candidates if committed < c <= upper), reverse=True):
        if all(not (f.epoch_from < t < f.epoch_to) for m, _ in inputs for f in m.changelog):
            return t
    return committed


def refresh_view(wh: StepWarehouse, obj: CatalogObject, plan) -> int:
    m = wh.manifest(obj.name)
    backfill = not m.exists
    if backfill:
        target = min((wh.manifest(i).epoch for i in obj.inputs), default=obj.created_epoch)
        start = target
    else:
        target = target_epoch(wh, obj, m.epoch)
        start = m.epoch
        if target <= m.epoch:
            return m.epoch
        if not dataflow.changes_without_input(plan) and not any(
                _changes_between(wh.manifest(i, provisional=True), m.epoch, target) for i in obj.inputs):
            return _advance_idle(wh, obj, m, target, time.perf_counter())
    t0 = time.perf_counter()
    rows = _input_rows(wh, obj, m, backfill, target) + _deferred_builds(wh, m, plan, target)
    ctx = StepContext(wh, obj, m, target, backfill, wh.step_engine(rows), rows)
    if ctx.engine is not wh.engine:
        wh.settle(obj.inputs)  # Spark reads the inputs' files: they must be written
    root_delta = dataflow.run(plan, ctx)
    cols = [c.name for c in obj.columns]
    if isinstance(root_delta, pa.Table):
        named = root_delta.select([f"c{i}" for i in range(len(cols))] + [W]).rename_columns(cols + [W])
    else:
        named = ctx.engine.sql(f"SELECT {', '.join(f'c{i} AS {quote(n)}' for i, n in enumerate(cols))}, {W} "
                               "FROM rw_root", rw_root=root_delta)
    return _commit_output(wh, obj, m, ctx, named, start, target, t0, defer=wh.pipelining)


def refresh_table(wh: StepWarehouse, obj: CatalogObject) -> int:
    m = wh.manifest(obj.name)
    committed = m.epoch if m.exists else obj.created_epoch
    target = epochs.newest_epoch(wh.store)
    if target <= committed and m.exists:
        return committed
    t0 = time.perf_counter()
    try:
        batches = epochs.batches_for(wh.store, obj.name, committed, target)
        if not batches and m.exists and not obj.options.get("watermark_column"):
            return _advance_idle(wh, obj, m, target, t0)
        rows = _batch_rows(wh, batches)
        ctx = StepContext(wh, obj, m, target, False, wh.step_engine(rows), rows)
        if _loads_in_one_job(wh, obj, m, ctx.engine, batches):
            return _first_load(wh, obj, m, ctx, batches, rows, committed, target, t0)
        delta, writes, order = table_change(wh, obj, m, batches, ctx.engine)
        for key in batches:  # applied: a retry after a failed commit reads the files again
            sst_cache.discard(wh.store.cache_path(key))
    except FileNotFoundError:
        # the batches were collected: another process applied them and committed first
        raise CommitConflict(f"commit of {obj.name!r}: another process advanced it past epoch {committed} "
                             "while this step ran; nothing was committed, retry it") from None
    # (on Spark, the change's rows are known once its inserts and deletes are counted: _commit_output)
    ctx.rows_in = delta.num_rows if isinstance(delta, pa.Table) else None if delta is not None else 0
    if delta is None:
        delta = ctx.engine.from_arrow(changelog_schema(obj).empty_table())
    if obj.options.get("watermark_column"):
        m = _with_watermark(ctx.engine, obj, m, delta, target)
    return _commit_output(wh, obj, m, ctx, delta, committed, target, t0, defer=wh.pipelining, writes=writes,
                          order=order)


def _loads_in_one_job(wh: StepWarehouse, obj: CatalogObject, m: Manifest, engine, batches: list[str]) -> bool:
    """Whether a table step is a first load on Spark that one job can do (_first_load): no rows
    yet, staged batches to apply, a key, no watermark, no interval column (which Arrow cannot sort
    and Parquet cannot hold)."""
    return (engine is not wh.engine and hasattr(engine, "write_first_load") and bool(batches)
            and not m.state.get(OUTPUT) and bool(obj.stream_key) and not obj.options.get("watermark_column")
            and not conflicts.has_policy(obj)
            and not any(pa.types.is_interval(f.type) for f in object_schema(obj)))


def _first_load(wh: StepWarehouse, obj: CatalogObject, m: Manifest, ctx: StepContext, batches: list[str], rows: int,
                committed: int, target: int, t0: float) -> int:
    """A table's first load on Spark, in one job: the staged rows shuffled by key range, and each
    task keeps its keys' last operations and writes them twice, as the table's state file and as
    its change-log file (inserts only: nothing was there to delete)."""
    out = output_table(wh, obj, m, ctx.engine)
    state, changes = ctx.engine.write_first_load(
        read_batches(wh, obj, batches, ctx.engine), wh.store, list(obj.stream_key), rows,
        [(out.key_dir, out.file_schema, {EPOCH: target, DELETED: False}),
         (f"objects/{obj.key_folder}/changes", changelog_schema(obj), {W: 1})], committed, target)
    for key in batches:  # applied: a retry after a failed commit reads the files again
        sst_cache.discard(wh.store.cache_path(key))
    ctx.rows_in = rows
    counts = {"ins": sum(f.rows for f in state), "del": 0}
    return _finish_commit(wh, obj, m, ctx.rows_in, ctx.engine, {OUTPUT: out}, {OUTPUT: state, None: changes}, counts, committed, target,
                          t0)


def _with_watermark(engine, obj: CatalogObject, m: Manifest, delta, target: int) -> Manifest:
    """A table with WATERMARK FOR: its manifest's watermark after this step (the newest event
    time inserted, minus the delay, never moving back), recorded per epoch as a source's is."""
    col = obj.options["watermark_column"]
    top = engine.to_arrow(engine.sql(f"SELECT max({quote(col)}) AS {quote(col)} FROM d WHERE {W} > 0", d=delta))
    advanced = advance_watermark(col, obj.options["watermark_delay_us"], m.positions, top, target)
    return dataclasses.replace(m, positions={**m.positions, **advanced})


def _input_rows(wh: StepWarehouse, obj: CatalogObject, m: Manifest, backfill: bool, target: int) -> int:
    """How many change rows a step will read (from manifests alone), to pick its engine."""
    total = 0
    for name in obj.inputs:
        im = wh.manifest(name, provisional=not backfill)
        if backfill:
            total += sum(f.rows for f in im.state.get(OUTPUT, []))
        else:
            total += sum(f.rows for f in im.changelog if f.epoch_from >= m.epoch and f.epoch_to <= target)
    return total


def _deferred_builds(wh: StepWarehouse, m: Manifest, plan, target: int) -> int:
    """The rows of the inputs from which this step will build deferred state: those of a join
    side whose other side reads an input that changed (operators.join); those of every input of
    an aggregate whose inputs' changes take rows away (MIN/MAX's value counts, built from the
    aggregate's whole input; operators.aggregate)."""
    rows = 0
    for name in m.deferred:
        op_id, table = name[2:].split(".")
        node = next(n for n in plan.walk() if n.id == int(op_id))
        if table.startswith("vcount"):
            scans = {n.source for n in node.walk() if isinstance(n, Scan)}
            changed = [s for s in scans if _changes_between(wh.manifest(s, provisional=True), m.epoch, target)]
            if changed and _takes_rows_away(wh, changed, m.epoch, target):
                rows += sum(sum(f.rows for f in wh.manifest(s, provisional=True).state.get(OUTPUT, []))
                            for s in scans)
            continue
        own, other = (node.left, node.right) if table == "left" else (node.right, node.left)
        if any(_changes_between(wh.manifest(n.source, provisional=True), m.epoch, target)
               for n in other.walk() if isinstance(n, Scan)):
            scan = next(n for n in own.walk() if isinstance(n, Scan))
            rows += sum(f.rows for f in wh.manifest(scan.source, provisional=True).state.get(OUTPUT, []))
    return rows


def _change_rows(wh: StepWarehouse, source: str, key: str) -> pa.Table:
    """A change file's rows: from the cache when this process wrote it (perhaps still being
    written and uploaded by a deferred commit), else read (downloaded first from S3)."""
    table = sst_cache.cached(wh.store.cache_path(key))
    if table is not None:
        return table
    wh.settle([source])  # evicted before its deferred commit wrote it: wait for the file
    return sst_cache.read(wh.store.local_path(key))


def _takes_rows_away(wh: StepWarehouse, sources: list[str], start: int, target: int) -> bool:
    """Whether the change files of `sources` in the epochs (start, target] hold a deletion: as
    their manifests record it; for a file committed without the record (or not committed yet),
    read where a step of that size runs in-process (it reads them anyway), else assumed."""
    files = [(s, f) for s in sources for f in wh.manifest(s, provisional=True).changelog
             if f.epoch_from >= start and f.epoch_to <= target and f.rows]
    if any(f.retracts for _, f in files):
        return True
    unknown = [(s, f) for s, f in files if f.retracts is None]
    if not unknown:
        return False
    if wh.options["engine"] == "spark" or sum(f.rows for _, f in unknown) > wh.options["spark_threshold_rows"]:
        return True
    return any(pc.min(_change_rows(wh, s, f.key).column(W)).as_py() < 0 for s, f in unknown)


def _batch_rows(wh: StepWarehouse, keys: list[str]) -> int:
    return sum(wh.store.parquet_rows(k) for k in keys)


def read_batches(wh: StepWarehouse, obj: CatalogObject, keys: list[str], engine=None):
    """Staged DML batches in acceptance order, with `_batch` and `_seq` giving that order (on
    Spark, read by the executors)."""
    if engine is not None and engine is not wh.engine:
        if not keys:
            return None
        schema = object_schema(obj).append(pa.field("_op", pa.int8())).append(pa.field("_seq", pa.int64()))
        return ParquetScan(tuple(keys), schema.append(pa.field("_batch", pa.int64())), wh.store, tag="_batch")
    tables = []
    for i, key in enumerate(keys):
        t = sst_cache.cached(wh.store.cache_path(key))  # staged by this process (Warehouse.stage)
        if t is None:
            t = sst_cache.read_parquet(wh.store.local_path(key))
        t = t.append_column("_batch", pa.array(np.full(t.num_rows, i, np.int64)))
        tables.append(t)
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")


def apply_batches(wh: StepWarehouse, obj: CatalogObject, m: Manifest, keys: list[str], engine=None):
    """The table's change for a list of staged batches: per key the last operation wins; an
    upsert replaces the row with that key; a delete removes it."""
    return table_change(wh, obj, m, keys, engine)[0]


def table_change(wh: StepWarehouse, obj: CatalogObject, m: Manifest, keys: list[str], engine=None):
    """apply_batches' change, the table's state writes for it when the step found them on the way
    (the fast path: new rows put, deleted keys' tombstones), else None, and a function giving the
    order that sorts the change by key for its change log when the step knows it (then the change
    is not sorted yet: its writer thread sorts it), else None."""
    engine = engine or wh.engine
    staged = read_batches(wh, obj, keys, engine)
    if staged is None or (isinstance(staged, pa.Table) and staged.num_rows == 0):
        return None, None, None
    pk = list(obj.stream_key)
    cols = [c.name for c in obj.columns]
    if conflicts.has_policy(obj):  # ON CONFLICT: the staged rows meet the stored ones by its rule
        state = output_table(wh, obj, m, engine)
        old = state.lookup(engine.sql(f"SELECT DISTINCT {col_list(pk)} FROM rw_staged", rw_staged=staged), pk)
        return engine.sql(
            consolidate_sql(cols, "rw_u"),
            rw_u=engine.sql(
                f"SELECT {col_list(cols)}, CAST(-1 AS BIGINT) AS {W} FROM rw_old UNION ALL "
                f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM rw_new",
                rw_old=old, rw_new=conflicts.resolved_rows(engine, obj, staged, old))), None, None
    if engine is wh.engine:
        fast = _apply_batches_in_arrow(wh, obj, m, staged, pk, cols)
        if fast is not None:
            return fast
    state = output_table(wh, obj, m, engine)
    last = engine.sql(  # the lookup of the old rows reads it too, where there are any
        f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {col_list(pk)} ORDER BY _batch DESC, _seq DESC) "
        f"AS _rn FROM rw_staged) rw_x WHERE _rn = 1", shared=bool(state.files), rw_staged=staged)
    if not state.files and engine is not wh.engine:
        # a first load on Spark: every staged key's last upsert is an insert, each key once (no old
        # row cancels it, nothing to consolidate), and the state's writes are those rows
        delta = engine.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM rw_last WHERE _op = 1",
                           shared=True, rw_last=last)
        return delta, engine.sql(f"SELECT {col_list(cols)}, false AS {DELETED} FROM rw_d", rw_d=delta), None
    old = state.lookup(last, pk)
    return engine.sql(
        consolidate_sql(cols, "rw_u"),
        rw_u=engine.sql(
            f"SELECT {col_list(cols)}, CAST(-1 AS BIGINT) AS {W} FROM rw_old UNION ALL "
            f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM rw_last WHERE _op = 1",
            rw_old=old, rw_last=last)), None, None


def _apply_batches_in_arrow(wh: StepWarehouse, obj: CatalogObject, m: Manifest, staged: pa.Table, pk: list[str],
                            cols: list[str]) -> tuple[pa.Table, pa.Table] | None:
    """table_change without SQL, for the common case: every staged key once, and a key the state
    files can be searched by. Returns None when that does not hold (the SQL path then runs)."""
    schema = object_schema(obj)
    codes = sst_cache.key_codes(staged.select(pk).cast(pa.schema([schema.field(k) for k in pk])), pk)
    if codes is None:
        return None
    order, codes = sst_cache.sorted_order(codes)
    if (codes[1:] == codes[:-1]).any():  # a key changed twice: the SQL path orders the changes
        return None
    last = staged.select(cols + ["_op"]).take(order)
    state = output_table(wh, obj, m)
    # each old row with its key's place among the staged keys (found by their codes, when the key
    # is of integers: no search to pair the rows afterwards), else by a search of the codes
    found = state.find_codes(codes, in_order=True) if state.files and all(
        pa.types.is_integer(schema.field(k).type) for k in pk) else None
    if found is not None:
        old_rank, old = found
    else:
        old = state.lookup(last, pk)
        if not isinstance(old, pa.Table):
            return None
        old_rank = np.searchsorted(codes, sst_cache.key_codes(old, pk)) if old.num_rows else np.zeros(0, np.int64)
    upsert = np.asarray(pc.equal(last.column("_op"), 1))
    new = last if upsert.all() else last.filter(pa.array(upsert))
    new_rank = np.flatnonzero(upsert)  # each new row's place among the staged keys (sorted)
    new = new.select(cols).cast(schema)
    old = old.select(cols).cast(schema)
    replaced = upsert[old_rank]  # old rows whose key gets a new row (no tombstone)
    if replaced.any():
        # a key whose new row equals its old row does not change: drop both
        pos = (np.cumsum(upsert) - 1)[old_rank]  # the new row of each old row's key (if replaced)
        same = replaced.copy()
        equal = rows_equal(old, new, [c for c in cols if c not in pk] + pk, np.flatnonzero(replaced),
                           pos[replaced])
        if equal is None:
            return None  # a type Arrow cannot compare: SQL decides
        same[replaced] = equal
        if same.any():
            drop_new = np.zeros(new.num_rows, bool)
            drop_new[pos[same]] = True
            old, old_rank, replaced = old.filter(pa.array(~same)), old_rank[~same], replaced[~same]
            new, new_rank = new.filter(pa.array(~drop_new)), new_rank[~drop_new]
    # every row's place among the staged keys orders the step's files by key; the change log's
    # order is applied on its writer thread (this process's steps downstream read the rows as they
    # are: old rows, each key's delete, before new ones)
    minus = pa.array(np.full(old.num_rows, -1, np.int64))
    plus = pa.array(np.ones(new.num_rows, np.int64))
    delta = pa.concat_tables([old.append_column(W, minus), new.append_column(W, plus)])
    order = partial(_merged_order, len(codes), old_rank, new_rank) if old.num_rows else None
    if order is None:
        delta = in_key_order(delta, pk + [W])
    gone = old.filter(pa.array(~replaced))
    writes = pa.concat_tables([new.append_column(DELETED, pa.array(np.zeros(new.num_rows, bool))),
                               gone.append_column(DELETED, pa.array(np.ones(gone.num_rows, bool)))])
    if gone.num_rows:
        writes = writes.take(pa.array(_merged_order(len(codes), new_rank, old_rank[~replaced])))
    return delta, in_key_order(writes, pk), order


def _merged_order(n: int, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The row order, by key, of two tables' rows concatenated, given each row's rank among `n`
    sorted distinct keys (`first`, `second`: distinct ranks within each table, either order);
    where both tables have a key, the first table's row comes first. No sort: a count per key."""
    in_first = np.zeros(n, np.int64)
    in_first[first] = 1
    per_key = in_first.copy()
    per_key[second] += 1
    start = np.cumsum(per_key) - per_key
    dest = np.concatenate([start[first], start[second] + in_first[second]])
    order = np.empty(len(dest), np.int64)
    order[dest] = np.arange(len(dest))
    return order


def _commit_output(wh: StepWarehouse, obj: CatalogObject, m: Manifest, ctx: StepContext, delta, start: int, target: int,
                   t0: float, defer: bool = False, writes=None, order=None) -> int:
    """Write the step's files and commit its manifest. With `defer` (a step inside a
    FLUSH, in-process) the files are only sorted and named here, for this process's downstream
    steps to read from the cache, while a background thread writes them and commits; a view
    commits only after its inputs' deferred commits succeeded (Warehouse.settle). `writes`: the output
    state's writes, when the step found them on the way (else derived from the delta); `order`: a
    function giving the row order that sorts the delta for its change log, when the step found it."""
    engine = ctx.engine
    cols = [c.name for c in obj.columns]
    key = list(obj.stream_key)
    # a table's fast path builds its delta one row per key and sign: unique by construction
    check = writes is None
    if isinstance(delta, pa.Table):
        if check:
            _check_unique_key(engine, obj, delta, key)
        counts = _insert_delete_counts(engine, delta)
    else:  # on Spark: computed once for the check, the counts, the change log and the state writes
        delta = engine.shared(delta)
        counts = _counts_and_check(engine, obj, delta, key if check else [])
    if ctx.rows_in is None:
        ctx.rows_in = int(counts["ins"] + counts["del"])
    out = output_table(wh, obj, m, engine)
    if obj.kind != SOURCE:  # a source keeps only its change log
        out.stage(writes if writes is not None else state_writes(engine, delta, cols, key, not out.files))
    tables = {OUTPUT: out, **ctx.tables}
    logged = bool(counts["ins"] or counts["del"])  # whether the step writes a change file
    if logged and not _log_is_read(wh, obj, target):
        # nothing will read this step's change file: write none, and let the commit conflict when a
        # consumer may have been created meanwhile (the retry plans under the new catalog)
        logged = False
        m = dataclasses.replace(m, positions={**m.positions, PLANNED_UNDER: {
            "catalog": wh.catalog().version, "step": uuid.uuid4().hex[:12]}})
    elif PLANNED_UNDER in m.positions and not (obj.options or {}).get("connector"):  # (a connector's: its own)
        m = dataclasses.replace(m, positions={k: v for k, v in m.positions.items() if k != PLANNED_UNDER})
    if defer and engine is wh.engine:
        early = ctx.written  # being written already, by write_now
        prepared = {name: table.prepare(start, target) for name, table in tables.items() if name not in early}
        if logged:
            prepared[None] = _prepare_changelog(wh, engine, obj, delta, start, target, order)
        pool = _writers()
        futures = {k: pool.submit(_finish, wh, p) for k, p in prepared.items() if p is not None}
        for name, p in prepared.items():  # the next step's lookups find the new files indexed
            if name is not None and p is not None:
                _indexer().submit(tables[name].index_ahead, p.provisional())
        futures.update(early)
        prepared.update({name: ctx.ready[name].result() for name in early})
        provisional = Manifest(
            object=obj.name, version=m.version, epoch=target,
            state={**m.state, **{n: list(t.files) + ([prepared[n].provisional()] if prepared[n] else [])
                                 for n, t in tables.items()}},
            changelog=list(m.changelog) + ([prepared[None].provisional()] if logged else []),
            garbage=m.garbage, positions=m.positions, deferred=ctx.deferred)

        def finish() -> int:
            written = {k: (futures[k].result() if k in futures else None) for k in prepared}
            return _finish_commit(wh, obj, m, ctx.rows_in, ctx.engine, tables, written, counts, start, target, t0,
                                  ctx.deferred)

        wh.defer_commit(obj.name, provisional, finish)
        return target
    # the step's files are independent: in-process, sort and write them on the writer threads (numpy's
    # sort, Arrow's take and Parquet's writer release the GIL); Spark writes them one by one
    early = ctx.written
    jobs = {name: (table.flush, start, target) for name, table in tables.items() if name not in early}
    if logged:
        jobs[None] = (_write_changelog, wh, engine, obj, delta, start, target, order)
    written = _run_all(jobs, parallel=engine is wh.engine)
    if engine is wh.engine:  # the next step's lookups find the new files indexed
        for name in jobs:
            if name is not None and written[name] is not None:
                _indexer().submit(tables[name].index_ahead, written[name])
    written.update({name: future.result() for name, future in early.items()})
    return _finish_commit(wh, obj, m, ctx.rows_in, ctx.engine, tables, written, counts, start, target, t0,
                          ctx.deferred)


def _finish_commit(wh: StepWarehouse, obj: CatalogObject, m: Manifest, rows_in: int | None, engine, tables: dict,
                   written: dict, counts: dict, start: int, target: int, t0: float, deferred=None) -> int:
    """Commit the step's manifest: its new files (`written`, by state table; None: the change log),
    merges the compactor chose, change files every consumer has read let go, and the step's stats
    (`deferred`: the state tables left unbuilt after the step, when it ran operators)."""
    state = dict(m.state)
    dropped: list[str] = []
    for name, table in tables.items():
        table.files = list(table.files) + _as_list(written[name])
        files, gone = wh.compactor.compact(obj.name, name, table)
        dropped.extend(gone)
        state[name] = files
    changelog = list(m.changelog) + [dataclasses.replace(f, retracts=bool(counts["del"]))
                                     for f in _as_list(written.get(None))]
    # change files every consumer has read are no longer needed
    watermark = wh.consumer_watermark(obj.name, target)
    keep = [f for f in changelog if f.epoch_to > watermark]
    dropped.extend(f.key for f in changelog if f.epoch_to <= watermark)
    nxt = Manifest(object=obj.name, version=m.version, epoch=target, state=state, changelog=keep,
                   garbage=m.garbage, positions=m.positions, deferred=list(m.deferred if deferred is None else deferred))
    previous_rows = m.stats.get("row_count", None if m.state.get(OUTPUT) else 0) if m.exists else 0
    nxt.stats = {
        # exact: a consolidated step delta inserts and deletes whole rows of the output
        "row_count": None if previous_rows is None else int(previous_rows + counts["ins"] - counts["del"]),
        "epochs_processed": target - start if m.exists else 0,
        "rows_in": rows_in,
        "rows_inserted": int(counts["ins"]),
        "rows_deleted": int(counts["del"]),
        "step_seconds": round(time.perf_counter() - t0, 6),
        "engine": engine.name,
        **({"spark_joins": "broadcast" if engine.join_strategy == "broadcast" else "shuffle"}
           if engine is not wh.engine else {}),
        "committed_at": time.time(),
    }
    if not wh.batching:  # (a FLUSH's round commits all its objects at once, or none)
        wh.settle(obj.inputs)  # never commit past an input whose own commit is still in flight or failed
    wh.commit_manifest(nxt, dropped)
    return target


def _log_is_read(wh: StepWarehouse, obj: CatalogObject, target: int) -> bool:
    """Whether a change file of a step to `target` would be read: by a consumer that has committed
    an epoch before `target` (one still to back-fill reads a snapshot, and a change file every
    consumer has passed is let go at its own commit). A source keeps only its change log."""
    return obj.kind == SOURCE or wh.consumer_watermark(obj.name, target) < target


def _changes_between(m: Manifest, start: int, target: int) -> bool:
    """Whether an input's change log has files for epochs (start, target] (what input_delta reads)."""
    return any(f.epoch_from >= start and f.epoch_to <= target for f in m.changelog)


def _advance_idle(wh: StepWarehouse, obj: CatalogObject, m: Manifest, target: int, t0: float) -> int:
    """An object whose inputs brought nothing new up to `target` (a table without staged DML, a view
    whose inputs wrote no change files and that reads neither a watermark nor the time) moves to
    `target` without a step: no operator runs and no file is written; its manifest's new epoch
    joins the commit, and change files every consumer has read are let go, as a step would. Its
    stats are an empty step's, on the engine an empty step gets (in-process unless the connection
    forces Spark)."""
    return _finish_commit(wh, obj, m, 0, wh.step_engine(0), {}, {}, {"ins": 0, "del": 0}, m.epoch, target, t0)


def _finish(wh: StepWarehouse, prepared):
    """Write a prepared step file: into the FLUSH's pack when the store packs small files."""
    prepared.pack = wh.pack
    return prepared.finish()


def _done(result) -> Future:
    done = Future()
    done.set_result(result)
    return done


def _as_list(written) -> list[SstFile]:
    """What a write gave: no file, one file, or (on Spark) a run of files."""
    if written is None:
        return []
    return list(written) if isinstance(written, list) else [written]


def _index_ahead(table: StateTable, written) -> None:
    """When a state file written early in a step is done: index it on the indexing thread."""
    if not written.cancelled() and written.exception() is None and written.result() is not None:
        _indexer().submit(table.index_ahead, written.result())


def _indexer():
    """One thread indexing new state files (StateTable.index_ahead), apart from the writers: the
    files a commit waits for are never queued behind indexing that no commit needs. Inside a
    FLUSH the jobs wait for its end (`hold_indexing`): they are for the next steps, and a view's
    operators would share the cores with them."""
    global _index_pool
    if _index_pool is None:
        _index_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rw-index")
    return _held if _held is not None else _index_pool


class _Held:
    """Index jobs held back while a FLUSH runs."""

    def __init__(self):
        self.jobs: list = []

    def submit(self, fn, *args):
        self.jobs.append((fn, args))


def hold_indexing(hold: bool) -> None:
    """Hold index jobs back (a FLUSH begins), or hand the held ones to the indexing thread (it
    ends). Measured at 50M rows: a FLUSH 47.5 -> 43.9 ms, at 5M rows unchanged. A job handed in
    late is lost at worst: the lookup that needs the index then builds it."""
    global _held
    if hold:
        _held = _held or _Held()
        return
    held, _held = _held, None
    for fn, args in (held.jobs if held else []):
        _indexer().submit(fn, *args)


_held: _Held | None = None
_index_pool: ThreadPoolExecutor | None = None


def _writers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        # four, on two cores: a writer spends much of its time waiting for fsync, and a view's last
        # small files should not queue behind its big ones (measured at 50M rows: the view's wait
        # for its files 7.4 -> 5.2 ms, against two writers)
        _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rw-write")
    return _pool


_pool: ThreadPoolExecutor | None = None


def forget_parent_pools() -> None:
    """In a forked child: the writer and indexing pools are the parent's (their threads did not
    follow the fork); new ones start on first use. Index jobs held back by the parent's FLUSH are
    dropped (a lookup that needs an index builds it)."""
    global _pool, _index_pool, _held
    from ..after_fork import keep

    keep(_pool, _index_pool)
    _pool = _index_pool = _held = None


def _run_all(jobs: dict, parallel: bool) -> dict:
    """Call each job (function, *args); on the shared writer threads when `parallel`."""
    if not parallel or len(jobs) < 2:
        return {k: f(*args) for k, (f, *args) in jobs.items()}
    futures = {k: _writers().submit(f, *args) for k, (f, *args) in jobs.items()}
    return {k: fut.result() for k, fut in futures.items()}


def _prepare_changelog(wh: StepWarehouse, engine, obj: CatalogObject, delta, start: int, target: int, order=None):
    return prepare_sst(wh.store, engine, delta, f"objects/{obj.key_folder}/changes", list(obj.stream_key) + [W],
                       start, target, order=order)


def _write_changelog(wh: StepWarehouse, engine, obj: CatalogObject, delta, start: int, target: int, order=None):
    """The step's change log: sorted by stream key, deletes (-1) before inserts (+1) per key (on
    Spark, a run of files by key range, a key's changes in one file)."""
    if hasattr(engine, "write_files") and not isinstance(delta, pa.Table):
        key = list(obj.stream_key)
        return engine.write_files(delta, wh.store, f"objects/{obj.key_folder}/changes", key + [W], changelog_schema(obj),
                                  start, target, range_keys=key)
    return _prepare_changelog(wh, engine, obj, delta, start, target, order).finish()


def _insert_delete_counts(engine, delta) -> dict:
    if isinstance(delta, pa.Table):
        w = delta.column(W).to_numpy()
        total, moved = int(w.sum()), int(np.abs(w).sum())
        return {"ins": (moved + total) // 2, "del": (moved - total) // 2}
    counts = engine.sql(
        f"SELECT coalesce(sum(CASE WHEN {W} > 0 THEN {W} END), 0) AS ins, "
        f"coalesce(-sum(CASE WHEN {W} < 0 THEN {W} END), 0) AS del FROM rw_delta", rw_delta=delta)
    return engine.to_arrow(counts).to_pylist()[0]


def _counts_and_check(engine, obj: CatalogObject, delta, key: list[str]) -> dict:
    """_insert_delete_counts of an engine's relation and, with a `key`, _check_unique_key's check,
    in one query (per key and sign: the rows, their weights' sum and largest magnitude)."""
    if not key:
        return _insert_delete_counts(engine, delta)
    counts = engine.to_arrow(engine.sql(
        f"SELECT coalesce(sum(CASE WHEN rw_s > 0 THEN rw_t END), 0) AS ins, "
        f"coalesce(-sum(CASE WHEN rw_s < 0 THEN rw_t END), 0) AS del, "
        f"coalesce(max(CASE WHEN rw_n > 1 OR rw_m > 1 THEN 1 ELSE 0 END), 0) AS dup FROM ("
        f"SELECT sign({W}) AS rw_s, sum({W}) AS rw_t, count(*) AS rw_n, max(abs({W})) AS rw_m FROM rw_delta "
        f"GROUP BY {col_list(key)}, sign({W})) rw_k", rw_delta=delta)).to_pylist()[0]
    if counts.pop("dup"):
        _check_unique_key(engine, obj, delta, key)
    return counts


def _check_unique_key(engine, obj: CatalogObject, delta, key: list[str]) -> None:
    """A consolidated step delta holds at most one insert and one delete per stream key."""
    if not key:
        return
    if isinstance(delta, pa.Table) and delta.num_rows > 1:  # keys ascending: distinct without a sort
        ordered = sst_cache.order_codes(delta, key)
        if ordered is not None and sst_cache.ascending(ordered) and np.abs(delta.column(W).to_numpy()).max() <= 1:
            return
    codes = sst_cache.local_hash(delta, key) if isinstance(delta, pa.Table) else None
    if codes is not None:  # distinct hashes are distinct keys (equal ones: the exact check below)
        w = delta.column(W).to_numpy()
        if not len(w) or np.abs(w).max() <= 1:
            ordered = sst_cache.sort_values(codes[w > 0]), sst_cache.sort_values(codes[w < 0])
            if all(not (o[1:] == o[:-1]).any() for o in ordered):
                return
    if isinstance(delta, pa.Table):
        w = delta.column(W)
        signed = delta.select(key).append_column("rw_sign", pc.sign(w)).append_column(
            "rw_one", pa.array(np.ones(delta.num_rows, np.int8)))
        try:
            per_key = signed.group_by(key + ["rw_sign"], use_threads=False).aggregate([("rw_one", "count")])
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            per_key = None  # a key type Arrow cannot group: ask the engine below
        if per_key is not None and pc.max(pc.abs(w)).as_py() in (None, 0, 1) and (
                per_key.num_rows == 0 or pc.max(per_key.column("rw_one_count")).as_py() <= 1):
            return
    dup = engine.sql(
        f"SELECT {col_list(key)}, sign({W}) AS rw_sign, count(*) AS rw_n FROM rw_delta GROUP BY ALL "
        f"HAVING count(*) > 1 OR max(abs({W})) > 1 LIMIT 1", rw_delta=delta)
    if engine.num_rows(dup):
        row = engine.to_arrow(dup).to_pylist()[0]
        raise IntegrityError(
            f"{obj.name!r}: the step produced more than one row for stream key "
            f"{ {k: row[k] for k in key} } (an internal invariant was broken; nothing was committed)")


__all__ = ["DELETED", "refresh_table", "refresh_view"]
