"""The barrier sensor: cuts the input into epochs and asks for the runs that apply them.

On each tick: if any input has something a barrier would seal, cut one barrier and request one run
of exactly the assets that can advance (the inputs holding new data, everything downstream of them,
and the lagging inputs those views also read, so the views can reach the new epoch). The epoch is in
the run key and the tags; the cursor keeps the last epoch requested. An epoch sealed but never
requested (a tick that died after its barrier, a FLUSH from another process) is requested by the next
tick without cutting another barrier, so a retried tick never seals the same data into two epochs.
Sinks run in their own run, so a failing sink never fails the views' run.

Views with a temporal filter (`WHERE ts > now() - INTERVAL ...`) change as time passes, with no new
input: every run brings them to its epoch, and while no input brings anything, a tick cuts a barrier
for them alone once the newest barrier is `time_barrier_seconds` old.

While a run of continuous mode (dagster.continuous) drives the same warehouse, a tick does nothing:
that run's loop cuts the barriers and applies them.
"""
from __future__ import annotations

import json
import time

import dagster as dg

from ..runtime import dataflow, epochs
from ..storage.catalog import MATERIALIZED_VIEW
from .project import RwProject
from .resource import EPOCH_TAG, RwResource, project_for, spec_object

EPOCHS_TAG = "dagster_rw/epochs"  # the epochs the run applies: first-last
WAREHOUSE_TAG = "dagster_rw/continuous"  # on a run of continuous mode: the warehouse its loop drives


def continuous_runs(instance: dg.DagsterInstance, warehouse: str) -> list[dg.DagsterRun]:
    """The runs of continuous mode (dagster.continuous) driving `warehouse` now, oldest first."""
    runs = instance.get_run_records(filters=dg.RunsFilter(
        tags={WAREHOUSE_TAG: warehouse},
        statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]))
    return [r.dagster_run for r in sorted(runs, key=lambda r: r.storage_id)]


def _project_and_keys(assets: list[dg.AssetsDefinition]) -> tuple[RwProject, dict[str, dg.AssetKey], set[str]]:
    project, keys, sink_names = None, {}, set()
    for a in assets:
        for spec in a.specs:
            path, name = spec_object(spec)
            if path is None or name is None:
                continue
            p = project_for(path)
            if project is not None and p.project_dir != project.project_dir:
                raise dg.DagsterInvalidDefinitionError("build_barrier_sensor: the assets come from two SQL projects")
            project = p
            keys[name] = spec.key
            if p.get(name).kind == "sink":
                sink_names.add(name)
    if project is None:
        raise dg.DagsterInvalidDefinitionError("build_barrier_sensor: no dagster-rw assets given")
    return project, keys, sink_names


def time_driven(conn) -> set[str]:
    """The warehouse's views whose rows change as time passes (a temporal filter in their plan)."""
    wh = conn.wh
    return {o.name for o in wh.catalog().objects.values()
            if o.kind == MATERIALIZED_VIEW and dataflow.reads_the_time(wh.plan(o))}


def advancing_objects(conn, project: RwProject, upto: int) -> list[str]:
    """The project's objects a run to epoch `upto` would advance, in topological order: those
    whose inputs hold new data, what reads them, and the views that time alone changes."""
    wh = conn.wh
    wh.sync()
    fresh = set(wh.sealed_unapplied(upto)) | time_driven(conn)

    def committed(name: str) -> int:
        m = wh.manifest(name)
        obj = wh.catalog().get(name)
        return m.epoch if m.exists else (obj.created_epoch if obj else 0)

    selected: set[str] = set()
    for name, obj in project.objects.items():
        if wh.catalog().get(name) is None:
            continue
        if (name in fresh and committed(name) < upto) or any(
                d in selected or committed(d) > committed(name) for d in obj.deps):
            selected.add(name)
    # a view can only reach the new epoch once every input has: bring its lagging inputs along
    for name in project.upstream(selected):
        if committed(name) < upto:
            selected.add(name)
    return [n for n in project.objects if n in selected]


def _time_barrier_due(conn, newest: int, seconds: float) -> bool:
    """Whether the warehouse has views that time alone changes and its newest barrier (the time
    it recorded, on the connection's clock) is at least `seconds` old."""
    if not time_driven(conn):
        return False
    cut = epochs.barrier_time(conn.wh.store, newest) if newest else None
    clock = conn.wh.options["clock"] or time.time
    return cut is None or clock() - cut >= seconds


def _epochs_applied(conn, names: list[str], epoch: int) -> str:
    """The epochs a run to `epoch` applies, as `first-last` (or one number): from the epoch after
    the least advanced of its objects."""
    wh = conn.wh
    first = epoch
    for name in names:
        m = wh.manifest(name)
        if m.exists:
            first = min(first, m.epoch + 1)
    return str(epoch) if first >= epoch else f"{first}-{epoch}"


def build_barrier_sensor(assets: dg.AssetsDefinition | list[dg.AssetsDefinition], *,
                         name: str = "rw_barrier_sensor", resource_key: str = "rw",
                         minimum_interval_seconds: int = 1,
                         default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
                         deploy: bool = True, time_barrier_seconds: float = 60.0) -> dg.SensorDefinition:
    """A sensor over the given rw assets. With `deploy`, each tick first creates the project's objects
    the warehouse lacks, so data can be inserted as soon as the sensor runs. Dagster's daemon looks at
    its sensors every 5 s; a `minimum_interval_seconds` below that lets the sensor tick at each look.
    `time_barrier_seconds`: while no input brings anything, how old the newest barrier may grow
    before a tick cuts one for the views a temporal filter changes as time passes (how late such a
    view lets a row leave); ignored when the project has no such view."""
    assets = [assets] if isinstance(assets, dg.AssetsDefinition) else list(assets)
    project, keys, sink_names = _project_and_keys(assets)
    check_keys = {k for a in assets for k in a.check_keys}

    @dg.sensor(name=name, target=assets, minimum_interval_seconds=minimum_interval_seconds,
               default_status=default_status, required_resource_keys={resource_key},
               description="Cuts a barrier when inputs have new data and requests the run that applies it.")
    def _barrier_sensor(context):
        rw: RwResource = getattr(context.resources, resource_key)
        running = continuous_runs(context.instance, rw.warehouse)
        if running:  # its loop cuts the barriers and applies them
            return dg.SkipReason(f"continuous mode runs over this warehouse (run {running[0].run_id})")
        conn = rw.get_connection()
        try:
            if deploy:
                created = rw.deploy(project)
                if created:
                    context.log.info(f"created in the warehouse: {', '.join(created)}")
            last = json.loads(context.cursor)["epoch"] if context.cursor else 0
            newest = epochs.newest_epoch(conn.wh.store)
            pending = conn.pending_inputs()
            if pending:
                epoch = conn.barrier()
                context.log.info(f"barrier {epoch} sealed {pending}")
            elif newest > last:
                epoch = newest  # sealed by someone else (or by a tick that died) but never requested
            elif _time_barrier_due(conn, newest, time_barrier_seconds):
                epoch = conn.barrier()
                context.log.info(f"barrier {epoch} cut for the time (views with a temporal filter)")
            else:
                return dg.SkipReason(f"nothing new since epoch {newest}")
            names = [n for n in advancing_objects(conn, project, epoch) if n in keys]
            cursor = json.dumps({"epoch": epoch})
            if not names:
                return dg.SensorResult(skip_reason=f"epoch {epoch}: no asset can advance", cursor=cursor)
            requests = []
            applied = _epochs_applied(conn, names, epoch)
            views = [n for n in names if n not in sink_names]
            sinks = [n for n in names if n in sink_names]
            for group, suffix in ((views, ""), (sinks, "-sinks")):
                if not group:
                    continue
                asset_keys = [keys[n] for n in group]
                requests.append(dg.RunRequest(
                    run_key=f"rw-epoch-{epoch}{suffix}",
                    asset_selection=asset_keys,
                    asset_check_keys=[k for k in check_keys if k.asset_key in set(asset_keys)],
                    tags={EPOCH_TAG: str(epoch), EPOCHS_TAG: applied, "dagster_rw/objects": ",".join(group)[:200]}))
            return dg.SensorResult(run_requests=requests, cursor=cursor)
        finally:
            rw.teardown_after_execution(None)

    return _barrier_sensor
