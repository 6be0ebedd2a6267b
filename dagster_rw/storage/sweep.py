"""The sweep: deleting warehouse files that nothing accounts for once they are old enough.

Every file a step, a statement or a merge writes goes into storage before the log entry that
commits it. A process killed between the two (or a write cut short) leaves files that no entry
lists: a step's state and change files, a FLUSH's pack, a staged batch no entry accepted, a
merge nobody adopted, garbage whose deletion a crash cut short, a partial write (`.tmp`, on a
local folder, under any prefix, the log's own included). The log explains every other file under
the prefixes it governs (storage/log.py LogState): a manifest lists it (as state, change file or
garbage in its grace period), the log accepted it as a staged batch (unsealed, sealed, or in the
trash the next checkpoint empties), or it is a recorded pack.

A file nothing explains may also be another process's write in flight, whose commit has not
landed yet. So the sweep deletes only files last modified more than a grace period ago (hours by
default, far longer than any step takes to commit what it wrote), and it lists the files before
it reads the log, so a file whose commit lands meanwhile is seen as explained. The log's entries
and checkpoints, the row-id claims and the sinks' progress are outside the swept prefixes.
"""
from __future__ import annotations

import logging
import time

from .log import LogState, log_of
from .object_store import ObjectStore
from .pack import PACKS

# the prefixes whose every file the log accounts for: objects' files, staged DML batches (the
# runtime's epochs.STAGING), packs
SWEPT = ("objects/", "staging/", f"{PACKS}/")
PARTIAL = ".tmp"  # a local write in progress, renamed into place once whole: anywhere, never committed


def explained_keys(state: LogState) -> set[str]:
    """The keys the log's state `state` accounts for."""
    staged = set(state.trash) | set(state.due)
    staged.update(k for keys in state.unsealed.values() for k in keys)
    staged.update(k for record in state.epochs.values() for keys in record.get("batches", {}).values() for k in keys)
    return state.listed_files() | staged | set(state.packs)


def unexplained(store: ObjectStore) -> list[tuple[str, float]]:
    """(key, last modified) of the files under the swept prefixes that the log's newest state does
    not explain, and of partial writes anywhere, whatever their age."""
    found = store.list_modified("")
    explained = explained_keys(log_of(store).refresh())  # read after the listing (see above)
    return [(key, modified) for key, modified in found
            if key.endswith(PARTIAL) or (key.startswith(SWEPT) and key not in explained)]


def sweep(store: ObjectStore, grace_seconds: float, now: float | None = None) -> list[str]:
    """Delete the unexplained files last modified more than `grace_seconds` before `now` (the
    present by default); returns their keys."""
    cutoff = (time.time() if now is None else now) - grace_seconds
    swept = []
    for key, modified in unexplained(store):
        if modified >= cutoff:  # perhaps a write in flight: its commit may still come
            continue
        try:
            store.delete(key)
        except FileNotFoundError:  # another sweep, or the writer's own clean-up, got there first
            continue
        swept.append(key)
    if swept:
        logging.getLogger("dagster_rw").info("swept %d files nothing in the log explains", len(swept))
    return swept
