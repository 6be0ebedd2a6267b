"""Objects' manifests as a process sees them: the committed version of each (read once and kept),
the versions a FLUSH's round collects into its one commit, and commits still running in the
background (a step inside a FLUSH), which readers either wait for or read provisionally.

Part of runtime.warehouse.Warehouse (a mixin): its state is the warehouse's `_manifests`,
`_deferred`, `_committer`, `_batch`, `_batch_expired` and `_batch_lock`.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..storage import manifest as manifests
from ..storage.manifest import Manifest


class Versions:
    def manifest(self, name: str, provisional: bool = False) -> Manifest:
        """An object's committed manifest. While its commit runs in the background (a table's step
        inside a FLUSH), `provisional` gives the manifest it is committing, whose new files this
        process's cache already holds; without it, this waits for that commit."""
        if name in self._deferred:
            if provisional:
                return self._deferred[name][0]
            self.settle([name])
        if name not in self._manifests:
            self._manifests[name] = manifests.load(self.store, name)
        return self._manifests[name]

    def remember_manifest(self, m: Manifest) -> None:
        self._manifests[m.object] = m

    @property
    def batching(self) -> bool:
        """Inside a FLUSH's round: commits join the round's one commit."""
        return self._batch is not None

    def commit_manifest(self, m: Manifest, dropped: list[str]) -> Manifest:
        """Commit the next version of `m`, whose files no longer include `dropped`; inside a
        FLUSH's round, the version joins the round's one commit (Warehouse._publish_round)."""
        grace = self.options["gc_grace_seconds"]
        if self._batch is None:
            try:
                nxt = manifests.commit(self.store, m, dropped, grace)
            except BaseException:
                self._discard_unlisted([m], dropped)
                raise
        else:
            nxt, expired = manifests.successor(m, dropped, grace)
            with self._batch_lock:
                base = self._batch[m.object][0] if m.object in self._batch else m.version
                self._batch[m.object] = (base, nxt)
                self._batch_expired.extend(expired)
        self.remember_manifest(nxt)
        return nxt

    def forget_manifest(self, name: str) -> None:
        """Read `name`'s manifest from the warehouse again when next asked for it."""
        self._manifests.pop(name, None)

    def defer_commit(self, name: str, provisional: Manifest, finish) -> None:
        """Run `finish` (which writes a step's files and commits its manifest) on the committer thread."""
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rw-commit")
        self._deferred[name] = (provisional, self._committer.submit(finish))

    def settle(self, names=None, report: bool = True) -> None:
        """Wait for deferred commits (of `names`, or all); raises the first that failed (unless
        not `report`), after forgetting what it would have committed."""
        pending = list(self._deferred) if names is None else [n for n in names if n in self._deferred]
        error = None
        for name in pending:
            _, future = self._deferred.pop(name)
            try:
                future.result()
            except BaseException as e:  # noqa: BLE001 - re-raised below, once every commit has ended
                self._manifests.pop(name, None)
                error = error or e
        if error is not None and report:
            raise error

    def consumer_watermark(self, name: str, own_target: int) -> int:
        """The lowest epoch any consumer of `name` has committed (consumers still to back-fill
        read snapshots, not change files)."""
        marks = []
        for c in self.catalog().consumers(name):
            m = self.manifest(c.name, provisional=True)
            if m.exists:
                marks.append(m.epoch)
        return min(marks) if marks else own_target
