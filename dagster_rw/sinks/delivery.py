"""Delivering a sink: read what it has not delivered, convert it to the sink's key, write it to the
target with retries, and commit the sink's position only after the target acknowledged the batch.

The position is the epoch in the sink's own manifest (so the input keeps its change files until the
sink has passed them, like any consumer). A crash between the target's acknowledgement and the
commit re-delivers that batch on the next refresh: at-least-once, never a gap.
"""
from __future__ import annotations

import contextlib
import time

from ..errors import Error, IntegrityError, OperationalError
from ..runtime import step
from ..storage import manifest as manifests
from ..storage.catalog import CatalogObject
from ..storage.manifest import Manifest
from . import health as healths
from . import lease as leases
from .key_conversion import append_changes, upsert_changes
from .log_reader import Batch, cut_batches, pending_files, read_batch
from .retry import RetryPolicy
from .spec import SinkSpec, build_spec
from .connectors import open_target
from .target import Changes, Target, TargetError
from ..runtime.interfaces import SinkWarehouse


def spec_of(obj: CatalogObject) -> SinkSpec:
    spec = build_spec(obj.name, obj.options)
    spec.primary_key = list(obj.pk)
    if not spec.type:
        spec.type = "append-only" if obj.append_only else "upsert"
    return spec


def delivered_epoch(m: Manifest) -> int:
    """The newest epoch whose changes the target has: the commit, less any own log not yet written."""
    return min([m.epoch] + [f.epoch_from for f in m.changelog])


def policy_of(wh: SinkWarehouse, spec: SinkSpec) -> RetryPolicy:
    if spec.retry is not None:
        return spec.retry
    o = wh.options
    return RetryPolicy(max_attempts=int(o["sink_retry_attempts"]), initial_seconds=float(o["sink_retry_initial_seconds"]),
                       max_seconds=float(o["sink_retry_max_seconds"]))


def deliver(wh: SinkWarehouse, obj: CatalogObject, max_attempts: int | None = None, sleep=time.sleep) -> int:
    """Deliver everything the sink's input has committed; returns the epoch delivered.

    Each batch is retried with backoff up to the policy's attempts (or `max_attempts`); when they are
    exhausted the error (naming the sink and its target) is raised and that batch is not committed.
    """
    spec = spec_of(obj)
    policy = policy_of(wh, spec)
    attempts = max_attempts or policy.max_attempts
    source = wh.get(obj.inputs[0])
    if source.options.get("internal_of") == obj.name:
        wh.refresh(source.name)  # the view planned for CREATE SINK ... AS query is the sink's own
    m = wh.manifest(obj.name)
    target_epoch = step.target_epoch(wh, obj, m.epoch)
    own, files = pending_files(m, wh.manifest(source.name), target_epoch)
    if not own and target_epoch <= m.epoch:
        return delivered_epoch(m)
    lease = leases.acquire(wh.store, obj.name)
    try:
        # what another deliverer committed before this one took the lease is not delivered again
        wh.remember_manifest(manifests.load(wh.store, obj.name))
        m = wh.manifest(obj.name)
        target_epoch = step.target_epoch(wh, obj, m.epoch)
        own, files = pending_files(m, wh.manifest(source.name), target_epoch)
        batches = cut_batches(own, files, m.epoch, target_epoch, spec.max_batch_rows)
        health = healths.load(wh.store, obj.name)
        columns = [c.name for c in obj.columns]
        schema = step.object_schema(obj)
        rows = 0
        for batch in batches:
            changes = _changes(wh, spec, obj, batch, columns, schema, health)
            if changes.table.num_rows:
                _write(wh, spec, obj, changes, attempts, policy, health, sleep)
                rows += changes.table.num_rows
            m = _commit_position(wh, m, batch)
            lease.renew()
        health.succeeded(rows)
        healths.save(wh.store, obj.name, health)
    finally:
        lease.release()
    return delivered_epoch(m)


def _changes(wh: SinkWarehouse, spec: SinkSpec, obj, batch: Batch, columns, schema, health) -> Changes:
    what = f"sink {obj.name!r}"
    log = read_batch(wh.store, batch, columns, schema)
    try:
        if spec.upsert:
            table = upsert_changes(wh.engine, log, columns, spec.primary_key, what)
        else:
            table = append_changes(wh.engine, log, columns, spec.force_append_only, what)
    except IntegrityError as e:  # the input's data cannot be delivered: retrying would not help
        health.failed(str(e))
        healths.save(wh.store, obj.name, health)
        raise
    return Changes(table=table, columns=columns, key=list(spec.primary_key), epoch_from=batch.epoch_from,
                   epoch_to=batch.epoch_to, upsert=spec.upsert)


def _target(wh: SinkWarehouse, spec: SinkSpec, obj) -> Target:
    cached = wh.sink_targets.get(obj.name)
    if cached is not None and cached[0] == obj.created_epoch:
        return cached[1]
    spec.unseal(wh.catalog().secrets or {})  # secrets are read where they are used, at delivery
    target = open_target(wh, spec, obj)
    wh.sink_targets[obj.name] = (obj.created_epoch, target)
    return target


def forget_target(wh: SinkWarehouse, name: str) -> None:
    cached = wh.sink_targets.pop(name, None)
    if cached is not None:
        with contextlib.suppress(Exception):  # closing a broken connection may fail too; it is dropped anyway
            cached[1].close()


def _write(wh: SinkWarehouse, spec: SinkSpec, obj, changes: Changes, attempts: int, policy: RetryPolicy, health, sleep) -> None:
    description = ""
    for attempt in range(1, attempts + 1):
        try:
            target = _target(wh, spec, obj)
            description = target.description
            _write_once(target, changes)
            return
        except TargetError as e:
            forget_target(wh, obj.name)  # a fresh connection for the next attempt
            description = description or _describe(spec)
            cause = spec.redact(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            message = (f"sink {obj.name!r} could not deliver epochs ({changes.epoch_from}, {changes.epoch_to}] "
                       f"to {description}: {cause}")
            health.failed(message)
            healths.save(wh.store, obj.name, health)
            if attempt == attempts:
                cls = IntegrityError if e.integrity else OperationalError
                tries = f" (after {attempts} attempts; nothing of this batch was committed)" if attempts > 1 \
                    else " (nothing of this batch was committed)"
                raise cls(message + tries) from None
            sleep(policy.delay(attempt))


def _write_once(target: Target, changes: Changes) -> None:
    """One attempt. A connector maps its client's errors to TargetError; anything else its client
    library raises (their hierarchies are wide) is a failed attempt too, never a failed FLUSH."""
    try:
        target.write(changes)
    except TargetError:
        raise
    except Exception as e:  # third-party client code: reported and retried
        raise TargetError(f"{type(e).__name__}: {e}") from e


def _describe(spec: SinkSpec) -> str:
    o = spec.options
    if spec.connector == "postgres":
        return (f'postgres table "{o.get("schema", "public")}"."{o["table"]}" at '
                f'{o.get("user", "postgres")}@{o.get("host", "127.0.0.1")}:{o.get("port", "5432")}/'
                f'{o.get("database", "postgres")}')
    if spec.connector == "kafka":
        return f"kafka topic {o['topic']!r} at {o['properties.bootstrap.server']}"
    if spec.connector == "file":
        return f"files under {o['path']}"
    return f"table {spec.into!r}"


def describe_target(spec: SinkSpec) -> str:
    return spec.redact(_describe(spec))


def _commit_position(wh: SinkWarehouse, m: Manifest, batch: Batch) -> Manifest:
    nxt = Manifest(object=m.object, version=m.version, epoch=max(m.epoch, batch.epoch_to),
                   state=m.state, changelog=[f for f in m.changelog if f not in batch.own],
                   garbage=m.garbage, positions=m.positions)
    nxt.stats = {"delivered_epochs": [batch.epoch_from, batch.epoch_to], "committed_at": time.time()}
    committed = manifests.commit(wh.store, nxt, [f.key for f in batch.own], wh.options["gc_grace_seconds"])
    wh.remember_manifest(committed)
    return committed


def backlog(wh: SinkWarehouse, obj: CatalogObject) -> tuple[int, int]:
    """(epochs, change rows) the input has committed that the sink has not delivered."""
    m = wh.manifest(obj.name)
    im = wh.manifest(obj.inputs[0])
    delivered = delivered_epoch(m)
    upstream = max(im.epoch, m.epoch)
    rows = sum(f.rows for f in m.changelog) + sum(f.rows for f in im.changelog if f.epoch_from >= m.epoch)
    return upstream - delivered, rows


def status_fields(wh: SinkWarehouse, obj: CatalogObject) -> dict:
    spec = spec_of(obj)
    m = wh.manifest(obj.name)
    health = healths.load(wh.store, obj.name)
    epochs_behind, rows_behind = backlog(wh, obj)
    return {
        "connector": spec.connector, "target": describe_target(spec), "input": obj.inputs[0],
        "sink_type": spec.type, "delivered_epoch": delivered_epoch(m),
        "backlog_epochs": epochs_behind, "backlog_rows": rows_behind,
        "last_error": spec.redact(health.last_error) if health.last_error else None,
        "last_error_at": health.last_error_at, "retries": health.retries, "failing_since": health.failing_since,
        "last_success_at": health.last_success_at, "rows_delivered": health.rows_delivered,
        # how long the sink has failed with work waiting: what an asset check compares with its limit
        "stuck_seconds": round(time.time() - health.failing_since, 3)
        if health.failing_since is not None and epochs_behind > 0 else 0.0,
    }


def deliver_best_effort(wh: SinkWarehouse, obj: CatalogObject) -> None:
    """One attempt, no waiting; a failure is recorded in the sink's health and not raised."""
    try:
        deliver(wh, obj, max_attempts=1)
    except Error:
        pass
