"""Advancing objects: one object's refresh, and a FLUSH's round that advances every object to the
newest epoch and commits them all in one log entry; commit conflicts with other writers are
retried (reading the warehouse again, backing off) until they succeed or the retries run out.

Part of runtime.warehouse.Warehouse (a mixin): the round's state is the warehouse's `pipelining`,
`pack`, `_batch`, `_batch_expired`, `_sealed` and the retry counters.
"""
from __future__ import annotations

import dataclasses
import logging
import random
import time

from ..errors import CommitConflict
from ..storage import catalog as catalogs
from ..storage import manifest as manifests
from ..storage.catalog import TABLE
from ..storage.log import log_of
from ..storage.manifest import Manifest
from ..storage.pack import Pack
from . import epochs, ingest, isolation, step


class Scheduling:
    def release_spark(self) -> None:
        """A statement or a step is over: let Spark drop what its rules registered."""
        engine = self._spark_engine
        if engine is not None and hasattr(engine, "release"):
            engine.release()

    def refresh(self, name: str, retry_conflicts: bool = False) -> int:
        """Advance `name` to the newest epoch its inputs committed; returns its epoch. With
        `retry_conflicts` (a statement of its own, as a Dagster asset step's, not a step inside a
        FLUSH's round): a commit lost to another writer that committed the object first is not a
        failure; the warehouse is read again and the step plans anew from what that writer
        committed (often nothing is left to do), up to `flush_conflict_retries` times."""
        def attempt():
            try:
                return self._refresh(name)
            finally:
                self.release_spark()

        if not retry_conflicts:
            return attempt()

        def again():
            self.refresh_retries += 1
            self.sync()

        return self._retry_conflicts(attempt, again)

    def _retry_conflicts(self, attempt, again):
        """`attempt()`, again after each CommitConflict (backing off with jitter, then calling
        `again()`, which reads the warehouse anew) until it succeeds or the retries are used up."""
        delay, retries = self.options["flush_retry_initial_seconds"], self.options["flush_conflict_retries"]
        while True:
            try:
                return attempt()
            except CommitConflict:
                if retries <= 0:
                    raise
                retries -= 1
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(2 * delay, self.options["flush_retry_max_seconds"])
            again()

    def _refresh(self, name: str) -> int:
        obj = self.get(name)
        if obj.kind == catalogs.SINK:  # deliver what its input committed; raises once retries are exhausted
            return self.sinks.deliver(self, obj)
        if ingest.is_connector(obj):
            return ingest.refresh_connector(self, obj)
        if obj.options.get("as_query"):  # CREATE TABLE ... AS SELECT: maintained like a view
            return step.refresh_view(self, obj, self.plan(obj))
        if obj.kind == TABLE:
            return step.refresh_table(self, obj)
        return step.refresh_view(self, obj, self.plan(obj))

    def flush(self, synced: bool = False) -> int:
        """FLUSH: seal what was accepted into a new epoch, then advance every object to it (or past
        it) and deliver the sinks; returns the epoch. Another writer committing an object first
        (CommitConflict) is not this FLUSH's failure: its rows were sealed by the barrier and stay
        staged until an object applies them, so the FLUSH reads the warehouse again and continues
        from what the other writer committed, backing off between attempts. Only a conflict that
        persists past `flush_conflict_retries` attempts is raised. `synced`: the caller has just
        read what other processes committed (Warehouse.sync)."""
        if not synced:
            self.sync()
        # the barrier is held here and written with the round's commit: one log entry per FLUSH
        self._sealed = epochs.seal(self.store, extra=self.barrier_extra())

        def attempt():
            self.refresh_all()
            return self._sealed

        def again():
            self.flush_retries += 1
            self.sync()
            if epochs.sealed_lost(self.store, self._sealed):  # another barrier sealed epochs first: seal anew
                self._sealed = epochs.seal(self.store, extra=self.barrier_extra())

        try:
            return self._retry_conflicts(attempt, again)
        finally:
            self._sealed = None
            # written by the round's commit; else (a round that failed or committed nothing) now, as a
            # barrier written before the round would be: what it sealed stays sealed
            epochs.write_sealed(self.store)

    def refresh_all(self) -> int:
        """Advance every object to the newest epoch and deliver the sinks. A sink INTO a table
        stages its rows as that table's DML: while such sinks staged something, cut another
        barrier and go round again, so FLUSH returns with their rows visible downstream (as in
        RisingWave, where the sink is part of the same dataflow). Bounded by the number of such
        sinks (a chain of sinks and tables takes one round per link; cycles are refused at CREATE)."""
        newest = self._refresh_round()
        into = [o for o in self.catalog().objects.values()
                if o.kind == catalogs.SINK and (o.options or {}).get("into")]
        for _ in into:
            if not self.options["flush_delivers_sinks"] or not any(
                    epochs.unsealed_counts(self.store).get(o.options["into"]) for o in into):
                break
            self.barrier()
            newest = self._refresh_round()
        return newest

    def _refresh_round(self) -> int:
        """Advance every object but the sinks to the newest epoch, committing them all in one log
        entry (which also records the staged batches every table has now applied)."""
        newest = epochs.newest_epoch(self.store)
        self.pipelining = True
        self._batch, self._batch_expired = {}, []
        versions, expired = self._batch, self._batch_expired  # (kept when the commit takes them)
        self.pack = Pack(self.store) if self.store.packs_files else None
        step.hold_indexing(True)
        try:
            try:  # an object that cannot advance is left behind with its consumers (runtime/isolation.py)
                broken, skipped = isolation.step_all(
                    self, [o for o in self.catalog().topological() if o.kind != catalogs.SINK])
            except BaseException:
                self.pipelining = False
                self.settle(report=False)  # the step's own error is the one to report
                raise
            self.pipelining = False
            self.settle()
            self._publish_round()
        except BaseException:
            self.pipelining = False
            self._batch = None
            if self.pack is not None:
                self.pack.discard()
            self._discard_unlisted([nxt for _, nxt in versions.values()], expired)
            self._manifests.clear()  # nothing of the round was committed
            raise
        finally:
            self.pack = None
            step.hold_indexing(False)
        if self.options["flush_delivers_sinks"]:  # after every view committed: views never wait for sinks
            for obj in [o for o in self.catalog().topological() if o.kind == catalogs.SINK]:
                self.sinks.deliver_best_effort(self, obj)
        isolation.report(self, broken, skipped)  # raises BrokenObject, naming them, when some broke
        return newest

    def _publish_round(self) -> None:
        """Commit the versions a FLUSH's round made, in one log entry; then delete the garbage
        they let go and the staged batches every table has applied."""
        with self._batch_lock:
            batch, expired, self._batch, self._batch_expired = self._batch, self._batch_expired, None, []
        if not batch:
            return
        versions = [dataclasses.replace(nxt, version=base + 1) for base, nxt in batch.values()]
        collection = epochs.Collection({m.object: m.epoch for m in versions})
        packs = self.pack.upload() if self.pack is not None else {}
        sealed = self._sealed

        def extra(state):
            if sealed is not None:  # the FLUSH's barrier goes into this entry, unless another came first
                epochs.check_sealed(self.store, sealed, "FLUSH")
            return {**collection(state), **({"packs": packs} if packs else {})}

        manifests.publish(self.store, versions, "FLUSH", extra=extra)
        self.pack = None  # committed: its files are the warehouse's now
        for m in versions:
            self.remember_manifest(m)
        manifests.settle_garbage(self.store, expired, self.options["gc_grace_seconds"])

    def _discard_unlisted(self, versions: list[Manifest], expired: list[str]) -> None:
        """After a commit that failed or was lost to another process (a FLUSH's round, or one
        object's): delete the files its versions list that no committed manifest lists (written
        for it, never seen by anyone), so a retried step or FLUSH leaves nothing behind."""
        listed = log_of(self.store).current().listed_files()
        mine = {f.key for m in versions for files in [*m.state.values(), m.changelog] for f in files}
        mine.update(g["key"] for m in versions for g in m.garbage)  # its own change files, dropped at once
        mine.update(expired)
        for key in mine - listed:
            try:
                self.store.delete(key)
            except Exception:  # noqa: BLE001 - a file left behind is garbage; the round's error is the one to report
                logging.getLogger("dagster_rw").warning("could not delete %s", key, exc_info=True)
