"""Continuous mode seen from Dagster.

Every epoch the loop commits is reported as materializations, one per object whose rows changed in
it, with the metadata a run's step records (resource.materialization_metadata). An object that only
moved to the new epoch (nothing new reached it) records nothing: its last materialization still
holds its data. The asset pages show the epochs, their plots and lag without a run per epoch; asset
checks still run on whatever schedule the deployment gives them.

Two ways to run the loop:

- as a process of its own, reporting to the instance as runless events:
  `conn.run(interval=1.0, on_epoch=EpochReporter(dg.DagsterInstance.get(), conn, project))`, or
  `dagster-rw run --project DIR --dagster` (the instance of DAGSTER_HOME);
- as a long-lived Dagster run (`build_continuous_job`): launched from the UI, or kept running by
  `build_continuous_sensor`; its events are the run's, terminating the run stops the loop after the
  tick in progress commits, and the barrier sensor cuts no barrier while it runs.
"""

import queue
import threading
import time

import dagster as dg

from ..runtime.continuous import Tick
from .asset_decorator import build_rw_specs
from .project import RwProject
from .resource import materialization_metadata, spec_object
from .sensor import WAREHOUSE_TAG, _project_and_keys, continuous_runs
from .translator import DagsterRwTranslator

UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


class ContinuousConfig(dg.Config):
    """A continuous run's config: its interval (None: the job's) and, for a bounded run, how many
    committed epochs end it (None: it runs until terminated)."""

    interval_seconds: float | None = None
    max_epochs: int | None = None


class EpochReporter:
    """`on_epoch` for continuous mode: reports each changed object of `project` (every object of
    the warehouse, keyed by name, without a project) to `instance` as runless materializations, or
    hands each materialization to `emit` when given."""

    def __init__(self, instance: dg.DagsterInstance | None, conn, project: RwProject | None = None,
                 translator: DagsterRwTranslator | None = None, emit=None):
        self.conn = conn
        self.emit = emit or instance.report_runless_asset_event
        self.keys: dict[str, dg.AssetKey] | None = None
        if project is not None:
            specs, _ = build_rw_specs(project, translator)
            self.keys = {spec_object(spec)[1]: spec.key for spec in specs}
        self.reported = 0

    def key_of(self, name: str) -> dg.AssetKey | None:
        if self.keys is not None:
            return self.keys.get(name)
        return dg.AssetKey([name])

    def materializations(self, tick: Tick) -> list[dg.AssetMaterialization]:
        out = []
        for name in tick.changed:
            before, after = tick.advanced[name]
            key = self.key_of(name)
            if key is None:
                continue
            seconds = float(self.conn.wh.manifest(name).stats.get("step_seconds") or 0.0)
            metadata = materialization_metadata(self.conn, name, after, True, seconds)
            metadata["dagster_rw/continuous"] = True
            out.append(dg.AssetMaterialization(
                asset_key=key, metadata=metadata,
                description=f"epoch {after} committed by continuous mode"
                            + (f" (from epoch {before})" if before is not None else "")))
        return out

    def __call__(self, tick: Tick) -> None:
        for event in self.materializations(tick):
            self.emit(event)
            self.reported += 1


def build_continuous_job(assets: dg.AssetsDefinition | list[dg.AssetsDefinition], *,
                         name: str = "rw_continuous", resource_key: str = "rw", interval_seconds: float = 1.0,
                         deploy: bool = True, translator: DagsterRwTranslator | None = None) -> dg.JobDefinition:
    """A job whose one op runs continuous mode over the warehouse of the `resource_key` resource
    until the run is terminated: a barrier every `interval_seconds` (run config can change it)
    while an input has something new, every object advanced, each changed object's epoch logged as
    a materialization of its asset (the keys of `assets`). Terminating the run lets the tick in
    progress commit, then the run ends as canceled; a run that died is continued by the next one
    from the last committed epoch. A second run over the same warehouse is refused, and the barrier
    sensors of that warehouse cut no barrier while one runs. With `deploy`, the project's missing
    objects are created first, as the barrier sensor does."""
    assets = [assets] if isinstance(assets, dg.AssetsDefinition) else list(assets)
    project, _, _ = _project_and_keys(assets)

    @dg.op(name=f"{name}_loop", required_resource_keys={resource_key},
           description="Continuous mode: cuts a barrier every interval while inputs have something new.")
    def loop(context: dg.OpExecutionContext, config: ContinuousConfig):
        rw = getattr(context.resources, resource_key)
        instance, run_id = context.instance, context.run_id
        instance.add_run_tags(run_id, {WAREHOUSE_TAG: rw.warehouse})
        first = continuous_runs(instance, rw.warehouse)
        if first and first[0].run_id != run_id:
            raise dg.Failure(f"continuous mode already runs over {rw.warehouse} in run {first[0].run_id}: "
                             "terminate it first (two loops would both cut barriers)")
        conn = rw.get_connection()
        if deploy:
            created = rw.deploy(project)
            if created:
                context.log.info(f"created in the warehouse: {', '.join(created)}")
        events: queue.Queue = queue.Queue()
        reporter = EpochReporter(instance, conn, project, translator, emit=events.put)
        stop, failed = threading.Event(), []
        interval = config.interval_seconds or interval_seconds

        def on_epoch(tick: Tick) -> None:  # in the loop's thread, between its ticks
            reporter(tick)
            events.put(f"epoch {tick.epoch}: {len(tick.advanced)} object(s) advanced, "
                       f"{len(tick.changed)} changed, in {tick.seconds:.3f} s")

        def body() -> None:
            try:
                conn.run(interval=interval, stop=stop, on_epoch=on_epoch,
                         on_error=lambda e: events.put(e), max_ticks=config.max_epochs)
            except BaseException as e:  # noqa: BLE001 - handed to the op's thread
                failed.append(e)
            finally:
                events.put(None)

        def log_until_the_loop_ends() -> None:
            while (event := events.get()) is not None:
                if isinstance(event, dg.AssetMaterialization):
                    context.log_event(event)
                elif isinstance(event, Exception):
                    context.log.error(f"a tick failed ({event}); trying again at the next tick")
                else:
                    context.log.info(event)

        worker = threading.Thread(target=body, name="dagster-rw-continuous", daemon=True)
        context.log.info(f"continuous mode over {rw.warehouse}: a barrier every "
                         f"{interval:g} s while inputs have something new")
        worker.start()
        try:
            log_until_the_loop_ends()
        except dg.DagsterExecutionInterruptedError:
            # terminated: the tick in progress commits, its epoch is still reported, then the run ends
            stop.set()
            worker.join()
            log_until_the_loop_ends()
            context.log.info("continuous mode stopped")
            raise
        worker.join()
        if failed:
            raise failed[0]
        return reporter.reported

    @dg.job(name=name, executor_def=dg.in_process_executor,
            description="Continuous mode: one long-lived run that applies every epoch within seconds.")
    def _job():
        loop()

    return _job


def build_continuous_sensor(job: dg.JobDefinition, *, name: str | None = None, minimum_interval_seconds: int = 30,
                            default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
                            retry_after_seconds: float = 10.0) -> dg.SensorDefinition:
    """Keeps one run of the continuous `job` going: requests a run when none is queued or running.
    After a failed run (a dead worker, a broken warehouse) it waits `retry_after_seconds` before the
    next; after a run a user terminated, it starts none until a run is launched by hand again."""

    @dg.sensor(name=name or f"{job.name}_sensor", job=job, minimum_interval_seconds=minimum_interval_seconds,
               default_status=default_status, description=f"Keeps one run of {job.name} going.")
    def _keep_running(context: dg.SensorEvaluationContext):
        instance = context.instance
        unfinished = instance.get_runs(filters=dg.RunsFilter(job_name=job.name, statuses=UNFINISHED), limit=1)
        if unfinished:
            return dg.SkipReason(f"{job.name} runs: {unfinished[0].run_id}")
        last = instance.get_run_records(filters=dg.RunsFilter(job_name=job.name), limit=1)
        if last and last[0].dagster_run.status == dg.DagsterRunStatus.CANCELED:
            return dg.SkipReason(f"the last run of {job.name} was terminated: launch it to start continuous "
                                 "mode again")
        if last and last[0].dagster_run.status == dg.DagsterRunStatus.FAILURE and last[0].end_time is not None:
            waited = time.time() - last[0].end_time
            if waited < retry_after_seconds:
                return dg.SkipReason(f"the last run failed {waited:.0f} s ago; starting again after "
                                     f"{retry_after_seconds:.0f} s")
        return dg.RunRequest()

    return _keep_running
