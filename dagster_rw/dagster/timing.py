"""Per-object timing inside a step: one engine event when an object's work starts and one when it
ends, carrying Dagster's step markers (`marker_start` / `marker_end`).

A run of the project's assets is one step, so Dagster's timeline has one bar for all of them. The
run page's timeline ("Timed" view) draws a step's markers as segments inside its bar, with the
marker's name as the tooltip, the way it draws resource initialisation; the run's event log lists
both events, the ending one with the object's start, end, seconds and outcome as metadata.
Markers are named `refresh <object>` and `check <object>:<check>`.

Engine events are Dagster's own event type, logged through its internal API; outside a step (a
direct invocation of the asset function), the same figures go to the log as one line.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg


def _step_context(context):
    try:
        return context.get_step_execution_context()
    except Exception:  # a context built for direct invocation has no step
        return None


def _engine_event(step_context, message: str, metadata: dict | None = None,
                  marker_start: str | None = None, marker_end: str | None = None) -> None:
    from dagster._core.events import DagsterEvent, EngineEventData

    DagsterEvent.engine_event(step_context, message, EngineEventData(
        metadata=metadata or {}, marker_start=marker_start, marker_end=marker_end))


@contextmanager
def timed(context, marker: str, what: str) -> Iterator[dict]:
    """Time the block as the step's marker `marker`; the dict yielded takes more metadata for the
    ending event (an epoch, an engine, a check's outcome)."""
    step_context = _step_context(context)
    extra: dict = {}
    started = time.time()
    t0 = time.perf_counter()
    if step_context is not None:
        _engine_event(step_context, f"{what}: started", marker_start=marker)
    outcome = "failed"
    try:
        yield extra
        outcome = "done"
    finally:
        seconds = time.perf_counter() - t0
        metadata = {
            "dagster_rw/started": dg.MetadataValue.timestamp(started),
            "dagster_rw/finished": dg.MetadataValue.timestamp(started + seconds),
            "dagster_rw/seconds": float(round(seconds, 6)),
            "dagster_rw/outcome": outcome,
            **extra,
        }
        message = f"{what}: {outcome} in {seconds:.3f} s"
        if step_context is not None:
            _engine_event(step_context, message, metadata, marker_end=marker)
        else:
            context.log.info(message)
