"""How far behind an object is: the data sealed for it that it has not applied, in epochs and in
seconds, rather than its distance from the newest epoch.

An object whose inputs had nothing new in the epochs since its own is not behind, however many
epochs others moved on. What counts as new, by kind:
- a table: an epoch after its own that sealed DML batches for it;
- a source or a table with a connector: records or files sealed after its own epoch (every epoch
  up to the newest counts then: the barrier records say where reading stops, not which epoch
  carried records);
- a view or a sink: a change file of an input covering epochs after its own, or an input that is
  itself behind (what the input has still to apply will reach this object too).

`lag_epochs`: how many epochs after its own carried data for the object (a change file covering
several epochs counts those whose barrier records show data for the object's base tables, while the
log holds them; all of them otherwise).
`lag_seconds`: seconds since the barrier that sealed the oldest such data (0 when there is none;
None when the warehouse log no longer holds that barrier's record).
"""
from __future__ import annotations

import time

from . import epochs, ingest
from ..storage.catalog import TABLE
from ..storage.log import log_of


def behind(wh, committed: dict[str, int]) -> dict[str, tuple[int, float | None]]:
    """Per object of the catalog, (lag_epochs, lag_seconds); `committed`: each object's epoch as
    its status reports it (a sink's: the epoch it delivered)."""
    newest = epochs.newest_epoch(wh.store)
    state = log_of(wh.store).current()
    records = state.epochs  # the barrier records the log still holds: every epoch after `collected`
    carried: dict[str, set[int] | None] = {}  # epochs whose records show data for the object's base inputs
    pending: dict[str, set[int]] = {}  # epochs with data for the object that it has not applied
    for obj in wh.catalog().topological():
        own = committed.get(obj.name, 0)
        if ingest.is_connector(obj):
            carried[obj.name] = None  # which epoch carried records is not recorded
            m = wh.manifest(obj.name)
            late = own < newest and ingest.sealed_unapplied(wh, obj, m, newest)
            pending[obj.name] = set(range(own + 1, newest + 1)) if late else set()
        elif obj.kind == TABLE and not obj.options.get("as_query"):
            carried[obj.name] = {e for e, r in records.items() if r["batches"].get(obj.name)}
            pending[obj.name] = {e for e in carried[obj.name] if own < e <= newest}
        else:
            inputs = [i for i in obj.inputs if i in carried]
            carried[obj.name] = (None if any(carried[i] is None for i in inputs)
                                 else set().union(*(carried[i] for i in inputs)))
            seen: set[int] = set()
            for name in inputs:
                for f in wh.manifest(name).changelog:
                    if f.epoch_to > own:
                        seen.update(range(max(f.epoch_from, own) + 1, f.epoch_to + 1))
                seen.update(e for e in pending[name] if e > own)
            known = carried[obj.name]
            # a change file covers a range of epochs: count those that carried data, where known
            pending[obj.name] = {e for e in seen if known is None or e <= state.collected or e in known}
    now = time.time()
    out = {}
    for name, due in pending.items():
        if not due:
            out[name] = (0, 0.0)
            continue
        oldest = records.get(min(due))
        out[name] = (len(due), round(max(0.0, now - oldest["time"]), 3) if oldest and "time" in oldest else None)
    return out
