"""Merges of state files off the step's critical path.

A step that leaves a state table with more than `compact_max_files` files used to merge the newest
ones before committing, so every few epochs one step paid for rewriting many epochs' rows (a FLUSH
of tens of milliseconds took tenths of a second). In-process, the merge now runs on a background
thread: it writes the merged file and nothing else. A later step of the same object adopts it in
its own commit (its files list the merged file in place of the files it replaced), provided those
files are still listed as they were; otherwise (another process merged or stepped differently) the
merged file is deleted unused. Closing the connection waits for the merges and commits the finished
ones as a version of their own. A table past twice the limit waits for its merge, so the number of
files stays bounded when merges fall behind. On Spark the merge stays inside the step.
"""
from __future__ import annotations

import copy
import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..engine.duck import DuckEngine
from ..errors import CommitConflict
from ..storage import manifest as manifests
from ..storage.manifest import SstFile
from ..storage.state_table import HeldFile, StateTable
from .interfaces import StepWarehouse

log = logging.getLogger("dagster_rw")


@dataclass
class _Merge:
    before: list[str]  # keys of the files listed before the merged ones, unchanged
    group: list[str]  # keys of the files the merged file replaces, oldest first
    future: Future  # -> list[SstFile]


def _lower_priority() -> None:
    """The merging thread yields the cores to the steps: a merge of a 50M-row table's newest
    files (1.6M rows) takes ~0.2 s of CPU that the FLUSHes running meanwhile would otherwise share
    (measured over 40 FLUSHes at 50M rows, merges running: mean 80/67 -> 69/64 ms, 90th percentile
    112/88 -> 82/77 ms). Between steps the merge still gets whole cores; while steps run without
    pause merges fall behind, and a step then waits for its table's merge (Compactor.compact)."""
    if not sys.platform.startswith("linux"):  # elsewhere a thread id is no process id: leave it be
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # Linux: this thread only
    except OSError:  # not allowed: merges keep the normal priority
        pass


class Compactor:
    def __init__(self, wh: StepWarehouse):
        self.wh = wh
        self._merges: dict[tuple[str, str], _Merge] = {}  # (object, state table) -> merge in flight
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def forget_parent_work(self) -> None:
        """In a forked child: the merges in flight are the parent's (it adopts or deletes what
        they write), and so is the merging thread."""
        from ..after_fork import keep, reinit

        keep(self._pool)
        self._pool = None
        self._merges = {}
        reinit(self._lock)

    def compact(self, obj_name: str, table_name: str, table: StateTable) -> tuple[list[SstFile], list[str]]:
        """A step's state table after this step's compaction: (its files, keys of the files it
        no longer lists). Adopts a finished merge, and starts one when there are too many files."""
        limit = self.wh.options["compact_max_files"]
        if not self.wh.options["background_compaction"] or not isinstance(table.engine, DuckEngine):
            return table.compact(limit)
        key = (obj_name, table_name)
        files, dropped = list(table.files), []
        with self._lock:
            merge = self._merges.get(key)
            if merge is not None and (merge.future.done() or len(manifests.runs(files)) > 2 * limit):
                del self._merges[key]
            else:
                merge = None
        if merge is not None:
            files, dropped, _ = self._adopt(merge, files)
        table.files = files
        with self._lock:
            start = table.compaction_start(limit) if key not in self._merges else None
            if start is not None:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rw-compact",
                                                    initializer=_lower_priority)
                snapshot = copy.copy(table)
                snapshot.files = list(files)
                # begun inside a FLUSH's round, its file waits for the round of the step adopting it,
                # to go into that commit's pack rather than costing a request of its own
                hold = self.wh.pack is not None
                self._merges[key] = _Merge([f.key for f in files[:start]], [f.key for f in files[start:]],
                                           self._pool.submit(snapshot.merge_files, start, hold))
        return files, dropped

    def _adopt(self, merge: _Merge, files: list[SstFile]) -> tuple[list[SstFile], list[str], list[str]]:
        """`files` with the merged file in place of its group, if they still list the group as
        they did when the merge began: (files, keys of the files replaced, the merged files' keys);
        else `files` unchanged (and the merged file deleted)."""
        try:
            merged = merge.future.result()
        except Exception:  # noqa: BLE001 - a failed merge loses nothing: the files it read stay listed
            log.warning("a background merge of state files failed; the files stay as they are", exc_info=True)
            return files, [], []
        keys = [f.key for f in files]
        n, g = len(merge.before), len(merge.group)
        if keys[:n] != merge.before or keys[n:n + g] != merge.group:
            for f in merged:
                if isinstance(f, HeldFile):
                    f.discard()
                else:
                    self.wh.store.delete(f.key)
            return files, [], []
        merged = [f.put(self.wh.pack) if isinstance(f, HeldFile) else f for f in merged]
        return files[:n] + [f for f in merged if f.rows] + files[n + g:], list(merge.group), [f.key for f in merged]

    def finish(self, names: list[str] | None = None) -> None:
        """Wait for the merges (of objects `names`, or all) and commit each finished one as a
        manifest version of its own (discarded if another process committed first)."""
        with self._lock:
            keys = [k for k in self._merges if names is None or k[0] in names]
            merges = {k: self._merges.pop(k) for k in keys}
        for (obj_name, table_name), merge in merges.items():
            m = manifests.load(self.wh.store, obj_name)
            files, dropped, merged = self._adopt(merge, m.state.get(table_name, []))
            if not dropped:
                continue
            m.state = {**m.state, table_name: files}
            try:
                self.wh.remember_manifest(
                    manifests.commit(self.wh.store, m, dropped, self.wh.options["gc_grace_seconds"]))
            except CommitConflict:
                for key in merged:
                    self.wh.store.delete(key)

    def forget(self, name: str) -> None:
        """Wait for the merges of a dropped object and delete what they wrote."""
        with self._lock:
            merges = [self._merges.pop(k) for k in list(self._merges) if k[0] == name]
        for merge in merges:
            try:
                for f in merge.future.result():
                    if isinstance(f, HeldFile):
                        f.discard()
                    else:
                        self.wh.store.delete(f.key)
            except Exception:  # noqa: BLE001 - a merge that failed wrote nothing to delete
                pass
