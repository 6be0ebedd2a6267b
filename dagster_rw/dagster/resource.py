"""`RwResource`: the warehouse and Spark settings of a deployment, and the work a materialization does.

One resource instance opens one connection per run (the first time a step needs it) and so at most
one Spark session per run process, started only when a step is large enough to need Spark. That
session is an embedded one (`spark="local"`), a Spark Connect server's (`spark="sc://..."`), or the
one of a nested `dagster_pyspark` resource (`pyspark=LazyPySparkResource(spark_config={...})`), so a
deployment configures Spark once for dagster-rw and its other Spark assets. Inside an
asset function, `yield from rw.refresh(context).stream()` brings every selected object to the newest
epoch its inputs have committed and yields its materialization and check results, like dagster-dbt's
`dbt.cli([...], context=context).stream()`.
"""
# no `from __future__ import annotations`: Dagster reads RwResource's field annotations as objects
# to tell its nested resource (`pyspark`) from its config fields
import os
import sys
import time
from collections.abc import Iterator
from typing import NamedTuple

import dagster as dg
from pydantic import Field, PrivateAttr, field_validator

from .. import dbapi
from ..errors import Error
from .project import RwProject
from .timing import timed

PROJECT_DIR_KEY = "dagster_rw/project_dir"
EPOCH_TAG = "dagster_rw/epoch"  # a barrier sensor's run: the epoch it applies
NAME_KEY = "dagster_rw/name"
_PROJECTS: dict[str, RwProject] = {}

# Session settings dagster-rw's Spark steps depend on: timestamps are UTC, as on the in-process
# engine, and Parquet files written by pyarrow hold proleptic Gregorian dates. A session that a
# nested pyspark resource built gets them when the first step needs Spark; every other setting
# stays the resource's own.
SPARK_SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
}
_UTC_NAMES = {"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "Universal", "Zulu"}


def remember_project(project: RwProject) -> None:
    """The project the assets of `project.project_dir` were built from: the sensor and the resource
    find it by that folder, and use it as planned instead of planning the folder again."""
    _PROJECTS[str(project.project_dir)] = project


def project_for(path: str) -> RwProject:
    if path not in _PROJECTS:
        _PROJECTS[path] = RwProject(path)
    return _PROJECTS[path]


class RwResource(dg.ConfigurableResource):
    """Where the warehouse lives and how Spark runs."""

    warehouse: str = Field(default=".dagster_rw", description="A local folder, file:// or s3://bucket/prefix URL.")
    s3_endpoint_url: str | None = Field(default=None, description="An S3-compatible endpoint (else boto3's own).")
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_region: str | None = None
    spark: str = Field(default="local", description="'local', 'local[N]' or a Spark Connect URL sc://host:port; "
                                                    "unused when `pyspark` is given.")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Settings for an embedded local session.")
    # typed as any resource so that loading the definitions does not import dagster_pyspark (and
    # PySpark with it) in every run worker; the validator below admits only dagster_pyspark's two
    pyspark: dg.ResourceDependency[dg.ConfigurableResource | None] = Field(
        default=None,
        description="A dagster_pyspark resource whose session runs every Spark step (in place of `spark` and "
                    "`spark_conf`): the same spark_config (master or spark.remote, packages, S3 settings, "
                    "executors) as the deployment's other Spark assets. With LazyPySparkResource the session "
                    "starts only when a step needs Spark; PySparkResource starts it with every run. The "
                    "session's time zone is set to UTC when a step first uses it.")
    engine: str = Field(default="auto", description="'auto' (by step size), 'duckdb' or 'spark'.")
    spark_threshold_rows: int = Field(default=2_000_000, description="Steps reading more rows than this use Spark.")
    spark_warehouse_url: str | None = Field(
        default=None, description="The warehouse as the Spark cluster's file system reads it (e.g. s3a://bucket/prefix); "
                                  "without it, executors read an S3 warehouse with pyarrow.")
    cache_bytes: int | None = Field(
        default=None, description="Bound of the process's cache of decoded state files (default 4 GB).")
    check_full_max_rows: int = Field(default=100_000,
                                     description="The batch-equality check compares whole views up to this size, "
                                                 "and a sample of keys above it.")
    check_sample_keys: int = 1_000
    warehouse_options: dict[str, str] = Field(
        default_factory=dict, description="Other connect() options, e.g. sink_retry_attempts, compact_max_files.")
    sink_stuck_after_seconds: float = Field(default=600.0,
                                            description="The sink_not_stuck check fails once a sink has failed "
                                                        "to deliver for longer than this.")

    _conn: dbapi.Connection | None = PrivateAttr(default=None)
    _spark_started: float | None = PrivateAttr(default=None)

    @field_validator("pyspark")
    @classmethod
    def _a_pyspark_resource(cls, value):
        if value is not None:
            from dagster_pyspark import LazyPySparkResource, PySparkResource

            if not isinstance(value, LazyPySparkResource | PySparkResource):
                raise ValueError(f"pyspark: a dagster_pyspark LazyPySparkResource or PySparkResource, "
                                 f"not {type(value).__name__}")
        return value

    # -- connection ----------------------------------------------------------------------------
    def _spark_factory(self):
        def start():
            from ..engine.spark import local_session, session_for

            t0 = time.perf_counter()
            if self.pyspark is not None:
                session = _pyspark_session(self.pyspark)
            elif self.spark.startswith("sc://"):
                session = session_for(self.spark)
            else:
                cores = self.spark[self.spark.find("[") + 1:self.spark.find("]")] if "[" in self.spark else "2"
                session = local_session(cores=int(cores) if cores.isdigit() else 2, conf=dict(self.spark_conf))
            self._spark_started = time.perf_counter() - t0
            return session

        return start

    def get_connection(self) -> dbapi.Connection:
        """The run's connection (opened on first use; Spark starts only if a step needs it)."""
        if self._conn is None or self._conn.closed:
            if self.pyspark is not None and (self.spark != "local" or self.spark_conf):
                raise dg.DagsterInvalidDefinitionError(
                    "RwResource: give Spark's settings either as `pyspark` (a dagster_pyspark resource) "
                    "or as `spark` / `spark_conf`, not both")
            self._conn = dbapi.connect(
                self.warehouse, spark=self._spark_factory(), s3_endpoint_url=self.s3_endpoint_url,
                aws_access_key_id=self.aws_access_key_id, aws_secret_access_key=self.aws_secret_access_key,
                aws_region=self.aws_region, engine=self.engine, spark_threshold_rows=self.spark_threshold_rows,
                spark_warehouse_url=self.spark_warehouse_url, cache_bytes=self.cache_bytes,
                **{k: _option_value(v) for k, v in self.warehouse_options.items()})
        return self._conn

    def teardown_after_execution(self, context) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def engine_kinds(self) -> set[str]:
        """The Dagster kinds of the engines this resource runs steps on, for the assets' badges
        (`DagsterRwTranslator(engines=rw.engine_kinds())`): `duckdb` for in-process steps, `spark`
        when Spark is configured (engine 'spark', or with 'auto' a `pyspark` resource, a Spark Connect
        URL, `local[N]` or `spark_conf`). With 'auto' and nothing configured, a step larger than
        `spark_threshold_rows` still starts an embedded session; each materialization's
        `dagster_rw/engine` says which engine ran it."""
        if self.engine == "duckdb":
            return {"duckdb"}
        if self.engine == "spark":
            return {"spark"}
        configured = self.pyspark is not None or self.spark != "local" or bool(self.spark_conf)
        return {"duckdb", "spark"} if configured else {"duckdb"}

    @property
    def spark_start_seconds(self) -> float | None:
        """How long this resource's Spark session took to start, if it started."""
        return self._spark_started

    # -- deployment ----------------------------------------------------------------------------
    def deploy(self, project: RwProject, names: list[str] | None = None) -> list[str]:
        """Create the project's objects that the warehouse lacks (with what they read), in order;
        returns the names created. An object that exists with a different definition is an error."""
        from .deploy import deploy

        return deploy(self.get_connection(), project, names)

    # -- work ----------------------------------------------------------------------------------
    def refresh(self, context: dg.AssetExecutionContext, project: RwProject | None = None) -> "RwRefresh":
        if project is None:
            project = project_from_context(context)
        return RwRefresh(self, context, project)

    def maintain(self, project: RwProject | None = None) -> dict:
        """Compaction of every object's state (of `project`'s objects, or all), removal of the
        staged batches every table has applied, and the sweep of files a crash left anywhere in
        the warehouse (older than `sweep_grace_seconds`). Returns {"merged": {object: files
        merged away}, "swept": files swept}."""
        conn = self.get_connection()
        conn.wh.sync()
        merged = {}
        names = list(project.objects) if project else [o.name for o in conn.wh.catalog().topological()]
        for name in names:
            if conn.wh.catalog().get(name) is not None:
                merged[name] = conn.compact(name)
        conn.wh.collect_garbage()
        return {"merged": merged, "swept": conn.sweep()}


def _pyspark_session(resource):
    """The session of a dagster_pyspark resource (a lazy one builds it now), with the settings
    dagster-rw's steps depend on."""
    from dagster_pyspark.resources import spark_session_from_config

    from ..engine.spark import ensure_java

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = resource.spark_session
    if session is None:  # a PySparkResource used outside a run: Dagster did not set it up
        session = spark_session_from_config(resource.spark_config)
    for key, value in SPARK_SESSION_CONF.items():
        current = session.conf.get(key, None)
        if current == value or (key == "spark.sql.session.timeZone" and current in _UTC_NAMES):
            continue
        if key == "spark.sql.session.timeZone":
            dg.get_dagster_logger().warning(
                f"dagster-rw sets the Spark session's time zone from {current} to UTC; give the pyspark "
                "resource spark_config {'spark.sql.session.timeZone': 'UTC'} to keep the other Spark assets "
                "of a run on the same zone")
        session.conf.set(key, value)
    return session


def _option_value(text):
    """Config strings as the numbers and switches connect() expects."""
    if not isinstance(text, str):
        return text
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


_BASE_STATUS = {"name", "kind", "epoch", "lag_epochs", "lag_seconds", "state_rows", "state_bytes", "sst_files", "engine",
                "epochs_processed", "rows_in", "rows_inserted", "rows_deleted", "step_seconds", "row_count"}


def status_metadata(conn, name: str, already: dict, row: dict | None = None) -> dict:
    """What `status()` says about the object (`row`, when the caller has it) beyond the common
    figures (a source's end offsets and consumer lag, a sink's position, backlog, last error and
    retries), as `dagster_rw/...` metadata."""
    if row is None:
        row = next(iter(conn.wh.status([name])), {})
    out = {}
    for k, v in row.items():
        key = f"dagster_rw/{k}"
        if k in _BASE_STATUS or key in already or v is None:
            continue
        if isinstance(v, (bool, str)):
            out[key] = str(v) if isinstance(v, bool) else v
        elif isinstance(v, (int, float)):
            out[key] = v
        elif isinstance(v, (dict, list)):
            out[key] = dg.MetadataValue.json(v)
    return out


def materialization_metadata(conn, name: str, epoch: int, stepped: bool, seconds: float) -> dict:
    """The metadata of an object's materialization at `epoch` (`stepped`: it advanced to it, so
    its step's figures apply), whether a run's step or continuous mode recorded it."""
    after = conn.wh.manifest(name)
    row = next(iter(conn.wh.status([name])), {})
    stats = after.stats if stepped else {}
    row_count = after.stats.get("row_count")
    if row_count is None:
        row_count = conn.engine.num_rows(conn.wh.snapshot(name))
    metadata = {
        "dagster_rw/epoch": epoch,
        # data sealed for it and not applied yet (runtime/lag.py), not the distance to the newest epoch
        "dagster_rw/lag_epochs": int(row.get("lag_epochs") or 0),
        "dagster_rw/lag_seconds": float(row.get("lag_seconds") or 0.0),
        "dagster_rw/epochs_processed": int(stats.get("epochs_processed", 0)),
        "dagster_rw/rows_inserted": int(stats.get("rows_inserted", 0)),
        "dagster_rw/rows_deleted": int(stats.get("rows_deleted", 0)),
        "dagster_rw/state_rows": after.state_rows(),
        "dagster_rw/state_bytes": after.state_bytes(),
        "dagster_rw/sst_files": after.sst_count(),
        "dagster_rw/step_seconds": float(round(seconds, 6)),
        "dagster_rw/engine": str(stats.get("engine", "none (already at the newest epoch)")),
        "dagster/row_count": int(row_count),
    }
    metadata.update(status_metadata(conn, name, metadata, row))
    return metadata


def spec_object(spec: dg.AssetSpec) -> tuple[str | None, str | None]:
    """The (project folder, object name) an rw asset spec stands for; (None, None) for other specs."""
    def plain(v):
        return v.value if hasattr(v, "value") else v  # a MetadataValue once Dagster normalised it

    return plain(spec.metadata.get(PROJECT_DIR_KEY)), plain(spec.metadata.get(NAME_KEY))


def project_from_context(context) -> RwProject:
    for spec in context.assets_def.specs:
        path, _ = spec_object(spec)
        if path is not None:
            return project_for(path)
    raise dg.DagsterInvariantViolationError(
        "rw.refresh(context) found no dagster-rw project on this asset: build it with @rw_assets(project=...)")


class RwRefresh:
    """The refresh of the assets selected in one step; `stream()` yields their results in order."""

    def __init__(self, resource: RwResource, context, project: RwProject):
        self.resource = resource
        self.context = context
        self.project = project

    def selected_names(self) -> list[str]:
        keys = self.context.selected_asset_keys
        names = {spec_object(spec)[1] for spec in self.context.assets_def.specs if spec.key in keys}
        return [n for n in self.project.objects if n in names]

    def stream(self) -> Iterator:
        """Refresh the selected objects in order; then their selected checks; then the checks
        selected without their asset (a check-only run), on the data already committed."""
        conn = self.resource.get_connection()
        names = self.selected_names()
        if names:
            created = self.resource.deploy(self.project, names)
            if created:
                self.context.log.info(f"created in the warehouse: {', '.join(created)}")
        conn.wh.sync()
        chosen = set(self.context.selected_asset_check_keys)
        selected_checks = [k for k in self.context.assets_def.check_keys if k in chosen]
        name_of = {spec.key: spec_object(spec)[1] for spec in self.context.assets_def.specs}
        key_of = {name: key for key, name in name_of.items()}
        checks_of = {name: [k for k in selected_checks if k.asset_key == key_of[name]] for name in names}
        # every selected object commits before any of their events is recorded: readers see the new
        # epoch in every view without waiting for the run's event log (each event is a write to
        # the instance's storage); each refresh's start and end markers still bracket its work
        refreshed: list[_Refreshed] = []
        try:
            for name in names:
                refreshed.append(self._refresh_one(conn, name, key_of[name]))
        except Exception as e:
            yield from self._recorded(conn, refreshed)
            failed = names[len(refreshed)]
            if isinstance(e, Error) and self.project.get(failed).kind == "sink":
                # a sink that cannot deliver: report how long it has been stuck, then fail the
                # step so the retry policy applies (views are in other runs: they go on)
                for check_key in checks_of[failed]:
                    yield self._check(conn, failed, check_key)
            raise
        yield from self._recorded(conn, refreshed)
        # then the checks: readers do not wait for them either (Great Expectations alone takes
        # seconds to import in a new run process)
        for name in names:
            for check_key in checks_of[name]:
                yield self._check(conn, name, check_key)
        alone = [k for k in selected_checks if name_of[k.asset_key] not in names]
        if alone:
            self.context.log.info(
                f"evaluating {len(alone)} check(s) on the committed data of "
                f"{', '.join(dict.fromkeys(name_of[k.asset_key] for k in alone))}; nothing is materialized")
        for check_key in alone:
            yield self._check(conn, name_of[check_key.asset_key], check_key)

    def _check(self, conn, name: str, check_key: dg.AssetCheckKey) -> dg.AssetCheckResult:
        from . import checks

        if conn.wh.catalog().get(name) is None:
            return dg.AssetCheckResult(
                asset_key=check_key.asset_key, check_name=check_key.name, passed=False,
                description=f"{name!r} does not exist in the warehouse yet: materialize it first")
        with timed(self.context, f"check {name}:{check_key.name}", f"check {check_key.name} of {name}") as span:
            result = checks.evaluate(self.resource, conn, self.project.get(name), check_key)
            span["dagster_rw/passed"] = str(result.passed)
        return result

    def _refresh_one(self, conn, name: str, asset_key: dg.AssetKey) -> "_Refreshed":
        """Bring the object to the newest epoch its inputs committed (its commit included)."""
        before = conn.wh.manifest(name)
        before_epoch = before.epoch if before.exists else None
        # in a sensor's run, an object whose inputs had nothing new since its epoch only moves to the
        # run's epoch: an observation, not a materialization (Dagster's automation reacts to those)
        idle = (before.exists and self.context.run.tags.get(EPOCH_TAG) is not None
                and not next(iter(conn.wh.status([name])), {}).get("lag_epochs"))
        t0 = time.perf_counter()
        with timed(self.context, f"refresh {name}", f"refresh {name}") as span:
            retried = conn.wh.refresh_retries
            epoch = conn.refresh(name, retry_conflicts=True)  # a lost commit race: step again on the winner's
            span["dagster_rw/epoch"] = epoch
            if conn.wh.refresh_retries > retried:
                span["dagster_rw/conflict_retries"] = conn.wh.refresh_retries - retried
                self.context.log.info(f"{name}: another writer committed it first; stepped again "
                                      f"{conn.wh.refresh_retries - retried} time(s) from its commit")
        return _Refreshed(name, asset_key, epoch, before_epoch is None or epoch != before_epoch,
                          time.perf_counter() - t0, idle)

    def _recorded(self, conn, refreshed: list["_Refreshed"]) -> Iterator:
        """The refreshed objects' materializations (observations for the idle ones)."""
        for r in refreshed:
            metadata = materialization_metadata(conn, r.name, r.epoch, r.stepped, r.seconds)
            if r.idle:
                self.context.log_event(dg.AssetObservation(
                    asset_key=r.asset_key, metadata=metadata,
                    description=f"nothing new to apply: moved to epoch {r.epoch}, its data unchanged"))
            else:
                yield dg.MaterializeResult(asset_key=r.asset_key, metadata=metadata)


class _Refreshed(NamedTuple):
    """An object a step brought to `epoch` (`stepped`: it advanced), in `seconds`."""

    name: str
    asset_key: dg.AssetKey
    epoch: int
    stepped: bool
    seconds: float
    idle: bool
