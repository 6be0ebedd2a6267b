"""Files under a local warehouse folder that nothing explains.

A file is explained when the log's state (storage/log.py LogState) accounts for it: a manifest
lists it (its state files, change files, or garbage still waiting out the grace period), it is a
staged batch the log accepted (unsealed, sealed in an epoch not yet collected, or in the trash the
next checkpoint deletes), or it is a pack the log records (storage/sweep.py explained_keys). The
log's own files and the row-id claims (never deleted, by design) are explained by being what they
are. Anything else (a step's file no commit adopted, garbage whose deletion never ran, a batch no
entry accepted) is left over: this looks at every folder, wider than what the sweep deletes.
"""
from __future__ import annotations

import os

from dagster_rw.storage import log as log_mod
from dagster_rw.storage.object_store import LocalStore
from dagster_rw.storage.sweep import explained_keys

ALWAYS_EXPLAINED = ("log", "row_ids")  # the log itself; row-id claims, kept for ever


def unexplained_files(root: str) -> list[str]:
    """Keys of the files under the warehouse folder `root` that the log's newest state does not
    explain (read by a fresh process: nothing cached)."""
    state = log_mod.log_of(LocalStore(root)).refresh()
    explained = explained_keys(state)
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            key = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if key.split("/", 1)[0] in ALWAYS_EXPLAINED or key in explained:
                continue
            out.append(key)
    return sorted(out)
