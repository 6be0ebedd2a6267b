"""A warehouse as the runtime sees it: catalog, epochs, objects' manifests and the steps that advance them."""
from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

import pyarrow as pa

from ..engine.duck import DuckEngine
from ..errors import CommitConflict, IntegrityError, OperationalError, ProgrammingError
from ..sql.planner import Planner
from ..storage import catalog as catalogs
from ..storage import manifest as manifests
from ..storage import sst_cache
from ..storage import sweep as sweeping
from ..storage.catalog import (
    MATERIALIZED_VIEW,
    SOURCE,
    TABLE,
    Catalog,
    CatalogObject,
    Column,
)
from ..storage.log import log_of
from ..storage.manifest import Manifest
from ..storage.pack import Pack
from ..storage.object_store import ObjectStore
from ..storage.state_table import write_sorted
from .. import after_fork as fork
from . import epochs, ingest, isolation, lag, row_ids, step
from .compaction import Compactor
from .options import Options

ROW_ID = "_row_id"
OP = "_op"
SEQ = "_seq"


_STAGED_KEPT_BYTES = 256 << 20


class SinkService(Protocol):
    """What the runtime asks of sinks (the sinks package implements it; the connection hands it to
    the warehouse): the runtime schedules sinks like other objects but knows no connector."""

    def create(self, wh: Warehouse, statement) -> bool: ...
    def drop(self, wh: Warehouse, name: str, if_exists: bool) -> bool: ...
    def deliver(self, wh: Warehouse, obj: CatalogObject) -> int: ...
    def deliver_best_effort(self, wh: Warehouse, obj: CatalogObject) -> None: ...
    def forget_target(self, wh: Warehouse, name: str) -> None: ...
    def delivered_epoch(self, m: Manifest) -> int: ...
    def status_fields(self, wh: Warehouse, obj: CatalogObject) -> dict: ...


class Warehouse:
    def __init__(self, store: ObjectStore, duck: DuckEngine | None = None, spark_engine=None,
                 sinks: SinkService | None = None, options: Options | None = None):
        self.store = store
        self._sinks = sinks
        self.engine = duck or DuckEngine(folders=store.local_folders())
        self._spark_engine = spark_engine  # a SparkEngine, or a callable that makes one when first needed
        self.options = options or Options()
        self.flush_retries = 0  # FLUSHes that went on after losing a commit race (for tests and status)
        self.refresh_retries = 0  # refreshes of one object that stepped again after losing one
        self._sealed: int | None = None  # the epoch a FLUSH in progress sealed (epochs.seal)
        self._catalog: Catalog | None = None
        self._plans: dict[tuple[str, int], object] = {}
        self._manifests: dict[str, Manifest] = {}
        self.sink_targets: dict[str, tuple] = {}  # sink -> (created epoch, open connector)
        self.pipelining = False  # inside a FLUSH: tables commit in the background (defer_commit)
        self._deferred: dict[str, tuple[Manifest, Future]] = {}
        # inside a FLUSH's round: the manifest versions its steps made, committed together at its
        # end (object -> (the version it started from, its newest version)), and the garbage
        # those versions let go
        self._batch: dict[str, tuple[int, Manifest]] | None = None
        self._batch_expired: list[str] = []
        self._batch_lock = threading.Lock()
        self.pack = None  # inside a FLUSH's round on a store that packs files: the round's Pack
        self._committer: ThreadPoolExecutor | None = None
        self.compactor = Compactor(self)
        self._staged_kept: deque[tuple[str, int]] = deque()  # staged batches kept decoded, oldest first
        self._staged_kept_bytes = 0
        fork.track_warehouse(self)

    def forget_parent_work(self) -> None:
        """In a forked child: commits and merges in flight are the parent's, and so are the
        committer thread and the sinks' open connections; manifests are read again."""
        fork.keep(self._committer, *self.sink_targets.values())
        self._committer = None
        self._deferred.clear()
        self._manifests.clear()
        self.sink_targets.clear()
        self.compactor.forget_parent_work()
        fork.fresh_duckdb(self.engine)

    def step_engine(self, input_rows: int):
        """The engine for a step: in-process for small inputs, Spark for large ones (or as forced)."""
        choice = self.options["engine"]
        if choice == "duckdb" or (choice == "auto" and input_rows <= self.options["spark_threshold_rows"]):
            return self.engine
        return self.spark_engine()

    def spark_engine(self):
        """The connection's Spark engine, started when first needed."""
        if callable(self._spark_engine):
            self._spark_engine = self._spark_engine()
        if self._spark_engine is None:
            from ..errors import OperationalError

            raise OperationalError("this step needs Spark, but the connection has no Spark session")
        return self._spark_engine

    # -- catalog -------------------------------------------------------------------------------
    def catalog(self, reload: bool = False) -> Catalog:
        if self._catalog is None or reload:
            self._catalog = catalogs.load(self.store, refresh=reload)
        return self._catalog

    def sync(self) -> None:
        """See what other processes committed since the last statement."""
        self.catalog(reload=True)
        self._manifests.clear()

    def get(self, name: str) -> CatalogObject:
        obj = self.catalog().get(name)
        if obj is None:
            raise ProgrammingError(f'relation "{name}" does not exist')
        return obj

    def commit_catalog(self, objects: dict[str, CatalogObject], what: str, functions: dict | None = None,
                       dropped: list[str] = ()) -> None:
        """Commit the next catalog version; `dropped`: objects whose manifests it removes."""
        current = self.catalog(reload=True)
        self._catalog = catalogs.commit(self.store, Catalog(
            version=current.version, objects=objects,
            functions=current.functions if functions is None else functions), what, dropped)

    def functions(self) -> dict:
        """The catalog's SQL functions, by name (sql.functions.SqlFunction)."""
        from ..sql.functions import SqlFunction

        return {name: SqlFunction.from_json(f) for name, f in self.catalog().functions.items()}

    def inline_functions(self, tree):
        """A parsed query with the catalog's SQL functions inlined where it calls them."""
        from ..sql.functions import inline
        from ..sql.statements import DIALECT

        return inline(tree, self.functions(), DIALECT)

    def create_function(self, function, replace: bool) -> None:
        cat = self.catalog(reload=True)
        if function.name in cat.functions:
            if not replace:
                raise ProgrammingError(f"function {function.name} already exists")
            from ..sql.functions import check_droppable

            check_droppable(function.name, cat.objects.values(), "replace")  # callers planned with the old body
        self.commit_catalog(dict(cat.objects), f"CREATE FUNCTION {function.name}",
                            functions={**cat.functions, function.name: function.to_json()})

    def drop_function(self, name: str, if_exists: bool) -> bool:
        from ..sql.functions import check_droppable

        cat = self.catalog(reload=True)
        if name not in cat.functions:
            if if_exists:
                return False
            raise ProgrammingError(f"function {name} does not exist")
        check_droppable(name, cat.objects.values())
        self.commit_catalog(dict(cat.objects), f"DROP FUNCTION {name}",
                            functions={k: v for k, v in cat.functions.items() if k != name})
        return True

    def plan(self, obj: CatalogObject):
        key = (obj.name, obj.created_epoch)
        if key not in self._plans:
            from ..sql.statements import view_emits_on_window_close, view_query

            planner = Planner(self.catalog().get, obj.sql, obj.name, self.engine)
            query = self.inline_functions(view_query(obj.sql))
            self._plans[key] = planner.plan(query, view_emits_on_window_close(obj.sql))
        return self._plans[key]

    # -- manifests -----------------------------------------------------------------------------
    def manifest(self, name: str, provisional: bool = False) -> Manifest:
        """An object's committed manifest. While its commit runs in the background (a table's step
        inside a FLUSH), `provisional` gives the manifest it is committing, whose new files this
        process's cache already holds; without it, this waits for that commit."""
        if name in self._deferred:
            if provisional:
                return self._deferred[name][0]
            self.settle([name])
        if name not in self._manifests:
            self._manifests[name] = manifests.load(self.store, name)
        return self._manifests[name]

    def remember_manifest(self, m: Manifest) -> None:
        self._manifests[m.object] = m

    @property
    def batching(self) -> bool:
        """Inside a FLUSH's round: commits join the round's one commit."""
        return self._batch is not None

    def commit_manifest(self, m: Manifest, dropped: list[str]) -> Manifest:
        """Commit the next version of `m`, whose files no longer include `dropped`; inside a
        FLUSH's round, the version joins the round's one commit (Warehouse._publish_round)."""
        grace = self.options["gc_grace_seconds"]
        if self._batch is None:
            try:
                nxt = manifests.commit(self.store, m, dropped, grace)
            except BaseException:
                self._discard_unlisted([m], dropped)
                raise
        else:
            nxt, expired = manifests.successor(m, dropped, grace)
            with self._batch_lock:
                base = self._batch[m.object][0] if m.object in self._batch else m.version
                self._batch[m.object] = (base, nxt)
                self._batch_expired.extend(expired)
        self.remember_manifest(nxt)
        return nxt

    def forget_manifest(self, name: str) -> None:
        """Read `name`'s manifest from the warehouse again when next asked for it."""
        self._manifests.pop(name, None)

    def defer_commit(self, name: str, provisional: Manifest, finish) -> None:
        """Run `finish` (which writes a step's files and commits its manifest) on the committer thread."""
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rw-commit")
        self._deferred[name] = (provisional, self._committer.submit(finish))

    def settle(self, names=None, report: bool = True) -> None:
        """Wait for deferred commits (of `names`, or all); raises the first that failed (unless
        not `report`), after forgetting what it would have committed."""
        pending = list(self._deferred) if names is None else [n for n in names if n in self._deferred]
        error = None
        for name in pending:
            _, future = self._deferred.pop(name)
            try:
                future.result()
            except BaseException as e:  # noqa: BLE001 - re-raised below, once every commit has ended
                self._manifests.pop(name, None)
                error = error or e
        if error is not None and report:
            raise error

    def consumer_watermark(self, name: str, own_target: int) -> int:
        """The lowest epoch any consumer of `name` has committed (consumers still to back-fill
        read snapshots, not change files)."""
        marks = []
        for c in self.catalog().consumers(name):
            m = self.manifest(c.name, provisional=True)
            if m.exists:
                marks.append(m.epoch)
        return min(marks) if marks else own_target

    # -- DDL -----------------------------------------------------------------------------------
    def create_table(self, name: str, columns: list[Column], pk: list[str], sql: str, append_only: bool,
                     if_not_exists: bool = False, options: dict | None = None) -> bool:
        cat = self.catalog(reload=True)
        if name in cat.objects:
            if if_not_exists:
                return False
            raise ProgrammingError(f'relation "{name}" already exists')
        cols = list(columns)
        for c in cols:
            if c.name in pk and c.type.endswith("[]"):
                raise ProgrammingError(f"{name!r}: column {c.name!r} of type {c.type} cannot be part of a primary key")
        stream_key = list(pk)
        if not pk:
            cols.append(Column(ROW_ID, "bigint", hidden=True))
            stream_key = [ROW_ID]
        created = epochs.newest_epoch(self.store)
        obj = CatalogObject(name=name, kind=TABLE, sql=sql, columns=cols, pk=list(pk), stream_key=stream_key,
                            created_epoch=created, append_only=append_only, options=dict(options or {}))
        objects = dict(cat.objects)
        objects[name] = obj
        self.clear_leftovers(name)
        # the manifest first: the catalog commit is the statement's last step, so a CREATE that
        # fails leaves nothing in the catalog (and files the next CREATE of the name clears)
        m = manifests.commit(self.store, Manifest(object=name, epoch=created), [], 0)
        self.commit_catalog(objects, f"CREATE TABLE {name}")
        self.remember_manifest(m)
        return True

    def create_source(self, statement) -> bool:
        """CREATE SOURCE, or CREATE TABLE with a connector (which also stores the rows)."""
        s = statement
        cat = self.catalog(reload=True)
        if s.name in cat.objects:
            if s.if_not_exists:
                return False
            raise ProgrammingError(f'relation "{s.name}" already exists')
        options, positions = ingest.connector_definition(self, s)
        created = epochs.newest_epoch(self.store)
        obj = CatalogObject(name=s.name, kind=TABLE if s.is_table else SOURCE, sql=s.sql,
                            columns=list(s.columns) + [Column(ROW_ID, "bigint", hidden=True)], pk=[],
                            stream_key=[ROW_ID], created_epoch=created, append_only=True,
                            options=options)
        objects = dict(cat.objects)
        objects[s.name] = obj
        self.clear_leftovers(s.name)
        m = Manifest(object=s.name, epoch=created, positions=positions)
        m = manifests.commit(self.store, m, [], 0)  # before the catalog, as for create_table
        self.commit_catalog(objects, f"CREATE {'TABLE' if s.is_table else 'SOURCE'} {s.name}")
        self.remember_manifest(m)
        return True

    def create_view(self, name: str, sql: str, query, if_not_exists: bool = False,
                    emit_on_window_close: bool = False, kind: str = MATERIALIZED_VIEW) -> bool:
        """A materialized view; with kind TABLE, a table created AS SELECT: it keeps receiving the
        query's rows, so the query must only ever insert (a stream, filtered, projected, joined
        with FOR SYSTEM_TIME AS OF PROCTIME(), or aggregated per window EMIT ON WINDOW CLOSE)."""
        cat = self.catalog(reload=True)
        if name in cat.objects:
            if if_not_exists:
                return False
            raise ProgrammingError(f'relation "{name}" already exists')
        planner = Planner(cat.get, sql, name, self.engine)
        plan = planner.plan(query, emit_on_window_close)
        if kind == TABLE and not planner.append_only(plan):
            raise ProgrammingError(
                f"CREATE TABLE {name} AS SELECT: the query can update or delete its rows, and a table created AS "
                "SELECT only ever receives inserts (use CREATE MATERIALIZED VIEW, or aggregate per window with "
                "EMIT ON WINDOW CLOSE)")
        visible = [c for c in plan.columns if not c.hidden]
        seen = set()
        for c in visible:
            if c.name in seen:
                raise ProgrammingError(f'column "{c.name}" specified more than once in {name!r}')
            seen.add(c.name)
        columns = [Column(c.name if not c.hidden else f"_rw_h{i}", c.type, c.hidden)
                   for i, c in enumerate(plan.columns)]
        stream_key = [columns[k].name for k in plan.stream_key]
        # DML accepted before the view is in its snapshot, as in RisingWave (whose CREATE waits for a
        # barrier of its own): when an upstream table has staged DML, cut a barrier first
        ancestors = self.ancestors(planner.inputs)
        staged = epochs.unsealed_counts(self.store)
        if any(upstream.name in staged for upstream in ancestors):
            self.barrier()
        # bring the inputs to one epoch, so the view starts from a consistent snapshot
        for upstream in ancestors:
            self.refresh(upstream.name)
        created = min((self.manifest(i).epoch for i in planner.inputs), default=epochs.newest_epoch(self.store))
        obj = CatalogObject(name=name, kind=kind, sql=sql, columns=columns, pk=[],
                            stream_key=stream_key, inputs=list(planner.inputs), created_epoch=created,
                            append_only=kind == TABLE, options={"as_query": True} if kind == TABLE else {})
        objects = dict(cat.objects)
        objects[name] = obj
        self.clear_leftovers(name)
        self.commit_catalog(objects, f"CREATE {'TABLE' if kind == TABLE else 'MATERIALIZED VIEW'} {name}")
        self._plans[(name, created)] = plan
        try:
            self.refresh(name)  # back-fill from the snapshot
        except BaseException:
            self._undo_create(name)
            raise
        return True

    def _undo_create(self, name: str) -> None:
        """Take back a CREATE whose object the catalog already lists but whose back-fill failed:
        the object leaves the catalog and its files go, so the failed statement leaves no trace
        (unless another process created a consumer of it meanwhile: then it stays, as created)."""
        try:
            self.settle([name], report=False)
            cat = self.catalog(reload=True)
            if name in cat.objects and not cat.consumers(name):
                self.commit_catalog({k: v for k, v in cat.objects.items() if k != name},
                                    f"DROP {name} (its CREATE failed)", dropped=[name])
                self._manifests.pop(name, None)
                self._plans = {k: v for k, v in self._plans.items() if k[0] != name}
                self.compactor.forget(name)
                self.clear_leftovers(name)
        except Exception:  # noqa: BLE001 - the CREATE's own error is the one to report
            logging.getLogger("dagster_rw").warning("could not take back the failed CREATE of %s", name,
                                                    exc_info=True)

    @property
    def sinks(self) -> SinkService:
        if self._sinks is None:
            raise OperationalError("this connection was opened without sink support (no SinkService)")
        return self._sinks

    def create_sink(self, statement) -> bool:
        return self.sinks.create(self, statement)

    def close_sink_targets(self) -> None:
        """Close the connections sinks keep open to their targets between refreshes."""
        for name in list(self.sink_targets):
            self.sinks.forget_target(self, name)

    def drop_sink(self, name: str, if_exists: bool) -> bool:
        return self.sinks.drop(self, name, if_exists)

    def drop(self, name: str, kind: str, if_exists: bool) -> bool:
        cat = self.catalog(reload=True)
        obj = cat.get(name)
        if obj is None:
            if if_exists:
                return False
            what = {TABLE: "table", SOURCE: "source", catalogs.SINK: "sink"}.get(kind, "materialized view")
            raise ProgrammingError(f'{what} "{name}" does not exist')
        if obj.kind != kind:
            what, verb = {TABLE: ("a table", "TABLE"), SOURCE: ("a source", "SOURCE"),
                          catalogs.SINK: ("a sink", "SINK")}.get(
                obj.kind, ("a materialized view", "MATERIALIZED VIEW"))
            raise ProgrammingError(f'"{name}" is {what}; use DROP {verb}')
        users = [c.name for c in cat.consumers(name)]
        users += [o.name for o in cat.objects.values() if o.kind == catalogs.SINK and o.options.get("into") == name]
        if users:
            raise IntegrityError(f'cannot drop {name!r}: other objects depend on it ({", ".join(users)})')
        objects = {k: v for k, v in cat.objects.items() if k != name}
        self.commit_catalog(objects, f"DROP {name}", dropped=[name])
        self._manifests.pop(name, None)
        self.compactor.forget(name)
        self.clear_leftovers(name)
        return True

    def clear_leftovers(self, name: str) -> None:
        folder = catalogs.key_name(name)  # (raises for a name no key can hold)
        for key in self.store.list(f"objects/{folder}/") + self.store.list(f"{epochs.STAGING}/{folder}/") \
                + self.store.list(f"sinks/{folder}/"):
            self.store.delete(key)

    def ancestors(self, names: list[str]) -> list[CatalogObject]:
        """The objects `names` depend on (themselves included), in topological order."""
        cat = self.catalog()
        needed: set[str] = set()
        stack = list(names)
        while stack:
            n = stack.pop()
            if n in needed:
                continue
            needed.add(n)
            stack.extend(cat.get(n).inputs)
        return [o for o in cat.topological() if o.name in needed]

    # -- DML -----------------------------------------------------------------------------------
    def stage(self, table: str, rows: pa.Table, ops: list[int] | None = None, null_keys: bool = False) -> int:
        """Durably accept rows (upserts, or deletes where ops says -1) for the next barrier. A
        NULL in a primary key column is refused, as PostgreSQL refuses it, unless `null_keys`
        (a sink INTO the table writes what its query gives: RisingWave's keys admit NULL)."""
        obj = self.get(table)
        if obj.kind != TABLE:
            raise ProgrammingError(f'cannot modify {table!r}: it is a materialized view')
        if ingest.is_connector(obj):
            raise ProgrammingError(f"cannot modify {table!r}: its rows come from its connector "
                                   "(DML on a table with a connector is not supported)")
        if obj.options.get("as_query"):
            raise ProgrammingError(f"cannot modify {table!r}: its rows come from its AS SELECT query "
                                   "(DML on a table created AS SELECT is not supported)")
        n = rows.num_rows
        if n == 0:
            return 0
        if not obj.pk and ROW_ID not in rows.column_names:
            base = row_ids.allocate(self.store, n)
            rows = rows.append_column(ROW_ID, pa.array(range(base, base + n), pa.int64()))
        op = pa.array(ops if ops is not None else [1] * n, pa.int8())
        rows = rows.append_column(OP, op).append_column(SEQ, pa.array(range(n), pa.int64()))
        if obj.pk and not null_keys:
            nulls = [c for c in obj.pk if rows.column(c).null_count]
            if nulls:
                raise IntegrityError(f'null value in column "{nulls[0]}" of {table!r} violates its primary key')
        key = epochs.staging_key(table)
        tmp = os.path.join(self.store.scratch_dir(), f"{uuid.uuid4().hex}.parquet")
        by_arrow = write_sorted(rows, tmp, []) is not None
        if not by_arrow:  # a type pyarrow cannot write: DuckDB writes it
            self.engine.write_parquet(rows, tmp, [])
        self.store.upload_file(tmp, key)
        epochs.accept(self.store, obj, key)
        if by_arrow:
            self._keep_staged(self.store.cache_path(key), rows)
        return n

    def _keep_staged(self, path: str, rows: pa.Table) -> None:
        """Keep a staged batch decoded for this process's table step (it reads it back from the
        cache, not the file), within _STAGED_KEPT_BYTES: a process that only stages (a producer
        whose batches another process applies) keeps no more than that."""
        sst_cache.put(path, rows)
        self._staged_kept.append((path, rows.nbytes))
        self._staged_kept_bytes += rows.nbytes
        while self._staged_kept_bytes > _STAGED_KEPT_BYTES and self._staged_kept:
            gone, n = self._staged_kept.popleft()
            sst_cache.discard(gone)  # (nothing if its table step already took it)
            self._staged_kept_bytes -= n

    def dml_engine(self, table: str):
        """The engine that finds the rows an UPDATE or DELETE touches: Spark for large tables (or
        as forced), so the table is read by the cluster and only the touched rows reach here."""
        return self.step_engine(self.manifest(table).state_rows())

    def pending_rows(self, table: str, engine=None):
        """The table as the next barrier will make it: committed rows plus DML accepted since (an
        Arrow table in-process; on Spark, a relation the executors compute)."""
        try:
            return self._pending_rows(table, engine)
        except FileNotFoundError:
            # a staged batch this process took for unapplied was applied by another process's FLUSH
            # and collected meanwhile: its rows are committed now; read the log again, once
            self.sync()
            return self._pending_rows(table, engine)

    def _pending_rows(self, table: str, engine=None):
        engine = engine or self.engine
        obj = self.get(table)
        m = self.manifest(table)
        committed = m.epoch if m.exists else obj.created_epoch
        keys = epochs.batches_for(self.store, table, committed, epochs.newest_epoch(self.store))
        keys += epochs.unsealed_batches(self.store, table)
        current = step.output_table(self, obj, m, engine).read_all()
        delta = step.apply_batches(self, obj, m, keys, engine)
        finish = self.engine.to_arrow if engine is self.engine else (lambda rel: rel)
        if delta is None:
            return finish(current)
        cols = ", ".join(f'"{c.name}"' for c in obj.columns)
        return finish(engine.sql(
            f"SELECT {cols} FROM rw_cur rw_a WHERE NOT EXISTS (SELECT 1 FROM rw_delta rw_b WHERE rw_b._w < 0 AND "
            + " AND ".join(f'rw_a."{k}" IS NOT DISTINCT FROM rw_b."{k}"' for k in obj.stream_key)
            + f") UNION ALL SELECT {cols} FROM rw_delta WHERE _w > 0", rw_cur=current, rw_delta=delta))

    # -- epochs and steps ----------------------------------------------------------------------
    def barrier(self) -> int:
        return epochs.barrier(self.store, extra=ingest.barrier_offsets(self))

    def pending_inputs(self) -> dict[str, int]:
        """Inputs with something a barrier would seal, and how much: staged DML batches per table.

        The barrier sensor cuts a barrier only when this is non-empty. Every kind of input (tables'
        staged DML; sources' unread records) reports here, by object name.
        """
        out = epochs.unsealed_counts(self.store)
        out.update(ingest.pending(self))  # sources: records in Kafka beyond the newest barrier's offsets
        return out

    def sealed_unapplied(self, upto: int | None = None) -> dict[str, int]:
        """Inputs holding data sealed in epochs up to `upto` (default: the newest) that they have not
        applied yet, and how much: staged DML batches per table, Kafka records or files per source."""
        upto = epochs.newest_epoch(self.store) if upto is None else upto
        out = {}
        for obj in self.catalog().topological():
            m = self.manifest(obj.name)
            if ingest.is_connector(obj):
                n = ingest.sealed_unapplied(self, obj, m, upto)
            elif obj.kind == TABLE and not obj.options.get("as_query"):
                committed = m.epoch if m.exists else obj.created_epoch
                n = len(epochs.batches_for(self.store, obj.name, committed, upto)) if committed < upto else 0
            else:
                continue
            if n:
                out[obj.name] = n
        return out

    def release_spark(self) -> None:
        """A statement or a step is over: let Spark drop what its rules registered."""
        engine = self._spark_engine
        if engine is not None and hasattr(engine, "release"):
            engine.release()

    def refresh(self, name: str, retry_conflicts: bool = False) -> int:
        """Advance `name` to the newest epoch its inputs committed; returns its epoch. With
        `retry_conflicts` (a statement of its own, as a Dagster asset step's, not a step inside a
        FLUSH's round): a commit lost to another writer that committed the object first is not a
        failure; the warehouse is read again and the step plans anew from what that writer
        committed (often nothing is left to do), up to `flush_conflict_retries` times."""
        def attempt():
            try:
                return self._refresh(name)
            finally:
                self.release_spark()

        if not retry_conflicts:
            return attempt()

        def again():
            self.refresh_retries += 1
            self.sync()

        return self._retry_conflicts(attempt, again)

    def _retry_conflicts(self, attempt, again):
        """`attempt()`, again after each CommitConflict (backing off with jitter, then calling
        `again()`, which reads the warehouse anew) until it succeeds or the retries are used up."""
        delay, retries = self.options["flush_retry_initial_seconds"], self.options["flush_conflict_retries"]
        while True:
            try:
                return attempt()
            except CommitConflict:
                if retries <= 0:
                    raise
                retries -= 1
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(2 * delay, self.options["flush_retry_max_seconds"])
            again()

    def _refresh(self, name: str) -> int:
        obj = self.get(name)
        if obj.kind == catalogs.SINK:  # deliver what its input committed; raises once retries are exhausted
            return self.sinks.deliver(self, obj)
        if ingest.is_connector(obj):
            return ingest.refresh_connector(self, obj)
        if obj.options.get("as_query"):  # CREATE TABLE ... AS SELECT: maintained like a view
            return step.refresh_view(self, obj, self.plan(obj))
        if obj.kind == TABLE:
            return step.refresh_table(self, obj)
        return step.refresh_view(self, obj, self.plan(obj))

    def flush(self, synced: bool = False) -> int:
        """FLUSH: seal what was accepted into a new epoch, then advance every object to it (or past
        it) and deliver the sinks; returns the epoch. Another writer committing an object first
        (CommitConflict) is not this FLUSH's failure: its rows were sealed by the barrier and stay
        staged until an object applies them, so the FLUSH reads the warehouse again and continues
        from what the other writer committed, backing off between attempts. Only a conflict that
        persists past `flush_conflict_retries` attempts is raised. `synced`: the caller has just
        read what other processes committed (Warehouse.sync)."""
        if not synced:
            self.sync()
        # the barrier is held here and written with the round's commit: one log entry per FLUSH
        self._sealed = epochs.seal(self.store, extra=ingest.barrier_offsets(self))

        def attempt():
            self.refresh_all()
            return self._sealed

        def again():
            self.flush_retries += 1
            self.sync()
            if epochs.sealed_lost(self.store, self._sealed):  # another barrier sealed epochs first: seal anew
                self._sealed = epochs.seal(self.store, extra=ingest.barrier_offsets(self))

        try:
            return self._retry_conflicts(attempt, again)
        finally:
            self._sealed = None
            # written by the round's commit; else (a round that failed or committed nothing) now, as a
            # barrier written before the round would be: what it sealed stays sealed
            epochs.write_sealed(self.store)

    def refresh_all(self) -> int:
        """Advance every object to the newest epoch and deliver the sinks. A sink INTO a table
        stages its rows as that table's DML: while such sinks staged something, cut another
        barrier and go round again, so FLUSH returns with their rows visible downstream (as in
        RisingWave, where the sink is part of the same dataflow). Bounded by the number of such
        sinks (a chain of sinks and tables takes one round per link; cycles are refused at CREATE)."""
        newest = self._refresh_round()
        into = [o for o in self.catalog().objects.values()
                if o.kind == catalogs.SINK and (o.options or {}).get("into")]
        for _ in into:
            if not self.options["flush_delivers_sinks"] or not any(
                    epochs.unsealed_counts(self.store).get(o.options["into"]) for o in into):
                break
            self.barrier()
            newest = self._refresh_round()
        return newest

    def _refresh_round(self) -> int:
        """Advance every object but the sinks to the newest epoch, committing them all in one log
        entry (which also records the staged batches every table has now applied)."""
        newest = epochs.newest_epoch(self.store)
        self.pipelining = True
        self._batch, self._batch_expired = {}, []
        versions, expired = self._batch, self._batch_expired  # (kept when the commit takes them)
        self.pack = Pack(self.store) if self.store.packs_files else None
        step.hold_indexing(True)
        try:
            try:  # an object that cannot advance is left behind with its consumers (runtime/isolation.py)
                broken, skipped = isolation.step_all(
                    self, [o for o in self.catalog().topological() if o.kind != catalogs.SINK])
            except BaseException:
                self.pipelining = False
                self.settle(report=False)  # the step's own error is the one to report
                raise
            self.pipelining = False
            self.settle()
            self._publish_round()
        except BaseException:
            self.pipelining = False
            self._batch = None
            if self.pack is not None:
                self.pack.discard()
            self._discard_unlisted([nxt for _, nxt in versions.values()], expired)
            self._manifests.clear()  # nothing of the round was committed
            raise
        finally:
            self.pack = None
            step.hold_indexing(False)
        if self.options["flush_delivers_sinks"]:  # after every view committed: views never wait for sinks
            for obj in [o for o in self.catalog().topological() if o.kind == catalogs.SINK]:
                self.sinks.deliver_best_effort(self, obj)
        isolation.report(self, broken, skipped)  # raises BrokenObject, naming them, when some broke
        return newest

    def _publish_round(self) -> None:
        """Commit the versions a FLUSH's round made, in one log entry; then delete the garbage
        they let go and the staged batches every table has applied."""
        with self._batch_lock:
            batch, expired, self._batch, self._batch_expired = self._batch, self._batch_expired, None, []
        if not batch:
            return
        versions = [dataclasses.replace(nxt, version=base + 1) for base, nxt in batch.values()]
        collection = epochs.Collection({m.object: m.epoch for m in versions})
        packs = self.pack.upload() if self.pack is not None else {}
        sealed = self._sealed

        def extra(state):
            if sealed is not None:  # the FLUSH's barrier goes into this entry, unless another came first
                epochs.check_sealed(self.store, sealed, "FLUSH")
            return {**collection(state), **({"packs": packs} if packs else {})}

        manifests.publish(self.store, versions, "FLUSH", extra=extra)
        self.pack = None  # committed: its files are the warehouse's now
        for m in versions:
            self.remember_manifest(m)
        manifests.settle_garbage(self.store, expired, self.options["gc_grace_seconds"])

    def _discard_unlisted(self, versions: list[Manifest], expired: list[str]) -> None:
        """After a commit that failed or was lost to another process (a FLUSH's round, or one
        object's): delete the files its versions list that no committed manifest lists (written
        for it, never seen by anyone), so a retried step or FLUSH leaves nothing behind."""
        listed = log_of(self.store).current().listed_files()
        mine = {f.key for m in versions for files in [*m.state.values(), m.changelog] for f in files}
        mine.update(g["key"] for m in versions for g in m.garbage)  # its own change files, dropped at once
        mine.update(expired)
        for key in mine - listed:
            try:
                self.store.delete(key)
            except Exception:  # noqa: BLE001 - a file left behind is garbage; the round's error is the one to report
                logging.getLogger("dagster_rw").warning("could not delete %s", key, exc_info=True)

    def collect_garbage(self) -> None:
        """Delete the staged batches every table has applied (worked out on the log's newest
        state: a table another process just created holds them back too)."""
        self.sync()
        epochs.collect_staging(self.store)

    def sweep(self, now: float | None = None) -> list[str]:
        """Delete the files a crash left (nothing in the log explains them) that are older than
        `sweep_grace_seconds`; returns their keys."""
        return sweeping.sweep(self.store, self.options["sweep_grace_seconds"], now)

    def compact(self, name: str) -> int:
        """Merge each state table of `name` into one file; returns how many files were removed."""
        obj = self.get(name)
        self.compactor.finish([name])
        m = manifests.load(self.store, name)
        if not m.exists:
            return 0
        state, dropped = dict(m.state), []
        for table_name, files in m.state.items():
            if len(files) <= 1:
                continue
            pk, schema, *kind = self._state_spec(obj, table_name)
            table = (kind[0] if kind else step.StateTable)(
                self.store, self.engine, f"objects/{catalogs.key_name(name)}/state/{table_name}", pk, schema, files)
            state[table_name], gone = table.compact_all()
            dropped.extend(gone)
        if dropped:
            m.state = state
            self.remember_manifest(manifests.commit(self.store, m, dropped, self.options["gc_grace_seconds"]))
        return len(dropped)

    def _state_spec(self, obj: CatalogObject, table_name: str):
        if table_name == step.OUTPUT:
            return list(obj.stream_key), step.object_schema(obj)
        if table_name == ingest.ERRORS:
            return ["partition", "offset"], ingest.ERROR_SCHEMA
        from . import dataflow

        ctx = step.StepContext(self, obj, self.manifest(obj.name), 0, False, self.engine)
        return dataflow.state_layout(self.plan(obj), ctx)[table_name]

    def snapshot(self, name: str):
        obj = self.get(name)
        if obj.kind == SOURCE:
            return ingest.source_snapshot(self, obj, self.manifest(name))
        return step.output_table(self, obj, self.manifest(name)).read_all()

    def status(self, names: list[str] | None = None) -> list[dict]:
        """Per object (all, or those named), its kind, committed epoch, lag and figures."""
        broken = isolation.broken_objects(self)
        committed, manifests = {}, {}
        for obj in self.catalog().topological():
            m = manifests[obj.name] = self.manifest(obj.name)
            # the epoch a sink shows is the one it delivered
            committed[obj.name] = (self.sinks.delivered_epoch(m) if obj.kind == catalogs.SINK
                                   else m.epoch if m.exists else obj.created_epoch)
        behind = lag.behind(self, committed)
        out = []
        for obj in self.catalog().topological():
            if names is not None and obj.name not in names:
                continue
            m, epoch = manifests[obj.name], committed[obj.name]
            lagging = {"lag_epochs": behind[obj.name][0], "lag_seconds": behind[obj.name][1]}
            if obj.kind == catalogs.SINK:
                out.append({"name": obj.name, "kind": obj.kind, "epoch": epoch, **lagging,
                            **self.sinks.status_fields(self, obj)})
                continue
            out.append({
                "name": obj.name, "kind": obj.kind, "epoch": epoch, **lagging,
                "state_rows": m.state_rows(), "state_bytes": m.state_bytes(), "sst_files": m.sst_count(),
                **{k: v for k, v in m.stats.items() if k != "committed_at"},
                **(ingest.status_fields(self, obj, m) if ingest.is_connector(obj) else {}),
                "broken": broken.get(obj.name),  # why its last step failed, while it stays there
            })
        return out
