"""A warehouse as the runtime sees it: catalog, epochs, objects' manifests and the steps that
advance them. The class is composed of one part per concern, each in a module of its own:

- runtime.catalog_access: the catalog, SQL functions and plans;
- runtime.versions: objects' manifests, a FLUSH's one commit, commits running in the background;
- runtime.staging: DML staged for the next barrier, barriers, pending rows;
- runtime.scheduling: refreshing one object, and a FLUSH's round over all of them;
- runtime.definitions: CREATE and DROP.

What is left here: the warehouse's state (set up once, in __init__), its engines, maintenance
(garbage, sweeping, compaction) and status. Steps and sinks see it through the narrow interfaces
of runtime.interfaces.
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from ..engine.duck import DuckEngine
from ..storage import catalog as catalogs
from ..storage import manifest as manifests
from ..storage import sweep as sweeping
from ..storage.catalog import SOURCE, Catalog, CatalogObject
from ..storage.manifest import Manifest
from ..storage.object_store import ObjectStore
from .. import after_fork as fork
from . import epochs, ingest, isolation, lag, step
from .catalog_access import CatalogAccess
from .compaction import Compactor
from .definitions import Definitions
from .interfaces import SinkService
from .options import Options
from .scheduling import Scheduling
from .staging import OP, ROW_ID, SEQ, Staging
from .versions import Versions

__all__ = ["OP", "ROW_ID", "SEQ", "SinkService", "Warehouse"]


class Warehouse(CatalogAccess, Versions, Staging, Scheduling, Definitions):
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
        self._plans: dict[tuple, object] = {}  # CatalogAccess.plan_key -> the plan
        self._manifests: dict[str, Manifest] = {}
        self.sink_targets: dict[str, tuple] = {}  # sink -> (created epoch, open connector)
        self.pipelining = False  # inside a FLUSH: steps commit in the background (defer_commit)
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

    @property
    def has_spark(self) -> bool:
        """Whether the connection has Spark (a session, or a way to start one), without starting it."""
        return self._spark_engine is not None

    def spark_engine(self):
        """The connection's Spark engine, started when first needed."""
        if callable(self._spark_engine):
            self._spark_engine = self._spark_engine()
        if self._spark_engine is None:
            from ..errors import OperationalError

            raise OperationalError("this step needs Spark, but the connection has no Spark session")
        return self._spark_engine

    # -- maintenance and status ----------------------------------------------------------------
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
                self.store, self.engine, f"objects/{obj.key_folder}/state/{table_name}", pk, schema, files)
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
            return ingest.ERROR_KEY, ingest.ERROR_SCHEMA
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
