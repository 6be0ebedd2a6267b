"""Continuous mode: one long-lived loop that cuts a barrier every interval when an input has
something new, advances every object to it and delivers the sinks (what FLUSH does), with no
scheduler in between.

A tick: read what other processes committed; when some table has accepted DML, some source has
records or files beyond the newest barrier, or an epoch sealed by another process (the barrier
sensor, a FLUSH elsewhere) is still unapplied, run a FLUSH (or, for sealed epochs alone, the
refresh without a new barrier). The next tick starts `interval` seconds after this one started, or
at once when this one took longer. Nothing else is kept between ticks: a loop killed at any point
leaves the warehouse at its last committed epoch, and the next loop (or FLUSH) continues from there.

`on_epoch(Tick)` hears of every tick that committed something: the epoch, per object that
advanced the epochs it went from and to (every object advances to each epoch), and which of them
changed (inserted or deleted rows). A tick that fails (a broken object, a conflict that
persisted) is reported to `on_error` and logged; the loop goes on at the next tick, as a streaming
job does, and stops after `max_failures` failures in a row (None: never).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

from ..errors import Error
from ..storage.local_files import reports_file_errors

log = logging.getLogger("dagster_rw.continuous")


@dataclasses.dataclass
class Tick:
    epoch: int  # the newest epoch after the tick
    advanced: dict[str, tuple[int | None, int]]  # object -> (epoch before or None, epoch after)
    changed: list[str]  # the advanced objects whose rows changed (or that were stepped for the first time)
    seconds: float  # the tick's work
    started: float  # time.time() at its start


def _epochs(wh) -> dict[str, int | None]:
    out = {}
    for obj in wh.catalog().topological():
        m = wh.manifest(obj.name)
        out[obj.name] = m.epoch if m.exists else None
    return out


@reports_file_errors("a tick of continuous mode")
def tick(wh) -> Tick | None:
    """One tick: None when there was nothing to do."""
    started, t0 = time.time(), time.perf_counter()
    wh.sync()
    if wh.pending_inputs():
        before = _epochs(wh)
        epoch = wh.flush(synced=True)
    elif wh.sealed_unapplied():
        before = _epochs(wh)
        epoch = wh.refresh_all()
    else:
        return None
    after = _epochs(wh)
    advanced = {name: (before.get(name), e) for name, e in after.items()
                if e is not None and e != before.get(name)}
    changed = [name for name, (was, _) in advanced.items() if was is None or _changed(wh.manifest(name).stats)]
    return Tick(epoch=epoch, advanced=advanced, changed=changed, seconds=time.perf_counter() - t0, started=started)


def _changed(stats: dict) -> bool:
    return bool(stats.get("rows_inserted") or stats.get("rows_deleted"))


def run(wh, interval: float = 1.0, stop: threading.Event | None = None,
        on_epoch: Callable[[Tick], None] | None = None, on_error: Callable[[Exception], None] | None = None,
        max_ticks: int | None = None, max_failures: int | None = None) -> int:
    """Tick every `interval` seconds until `stop` is set (or `max_ticks` ticks committed something);
    returns how many ticks committed something."""
    if interval <= 0:
        raise ValueError("the interval of continuous mode must be positive")
    stop = stop or threading.Event()
    committed = failures = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            done = tick(wh)
            failures = 0
        except Error as e:
            failures += 1
            log.error("continuous mode: a tick failed (%s); trying again at the next tick", e)
            if on_error is not None:
                on_error(e)
            if max_failures is not None and failures >= max_failures:
                raise
            done = None
        if done is not None:
            committed += 1
            if on_epoch is not None:
                on_epoch(done)
            if max_ticks is not None and committed >= max_ticks:
                break
        stop.wait(max(0.0, interval - (time.monotonic() - began)))
    return committed
