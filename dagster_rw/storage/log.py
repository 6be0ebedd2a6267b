"""The warehouse log: every commit to a warehouse is one numbered entry, `log/<n>.json`.

An entry is written with put-if-absent at the position after the newest one its writer knows
(an atomic hard link on local disk, `If-None-Match: *` on S3): of two writers that reach for the
same position one wins, and the other reads the entries it missed and tries the next position,
rebuilding its entry on what it read (where the two really conflict, the rebuild raises
CommitConflict). The log's order is the warehouse's order: catalog versions, accepted DML batches,
barriers and every object's manifest versions are all entries, and one entry can hold many of them
(a FLUSH's entry holds its barrier and commits every object it advanced).

A process keeps the state the entries add up to (LogState) and continues from the position it
knows: seeing what other processes committed costs one GET of the next position (absent when
nothing happened). Nothing on that path lists the store.

Every CHECKPOINT_INTERVAL entries the state is written whole (`log/<n>.checkpoint.json`) and
`log/_last_checkpoint.json` names it, so a new process reads one checkpoint and the entries after
it. A checkpoint that cannot be written (a full disk, a failing store) does not fail the commit
whose entry landed: it is logged, and the next interval writes one. Entries and checkpoints
older than a checkpoint that is itself older than the retention period are deleted. A process
that has not read the log for a quarter of that period starts again from the newest checkpoint,
so it never continues from a position whose successors were pruned.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field

from ..errors import CommitConflict, OperationalError
from .object_store import ObjectStore

LOG = "log"
POINTER = f"{LOG}/_last_checkpoint.json"
CHECKPOINT_INTERVAL = 50
RETENTION_SECONDS = 3600.0
_WIDTH = 20
_ATTEMPTS = 200
_log = logging.getLogger("dagster_rw")


def entry_key(position: int) -> str:
    return f"{LOG}/{position:0{_WIDTH}d}.json"


def checkpoint_key(position: int) -> str:
    return f"{LOG}/{position:0{_WIDTH}d}.checkpoint.json"


@dataclass
class LogState:
    """What the log's entries up to `position` add up to."""

    position: int = 0
    catalog: dict | None = None  # the newest catalog version: {"version", "objects", "functions"}
    manifests: dict[str, dict] = field(default_factory=dict)  # object -> its newest manifest (JSON)
    newest_epoch: int = 0
    epochs: dict[int, dict] = field(default_factory=dict)  # epoch -> its barrier's record, from `collected` up
    unsealed: dict[str, list[str]] = field(default_factory=dict)  # table -> staged batches no barrier sealed
    collected: int = 0  # staged batches of epochs up to this one have been deleted
    marks: list[list] = field(default_factory=list)  # [position, time] of entries at checkpoint positions
    pruned_below: int = 1  # entries below this position are (as far as this process knows) deleted
    packs: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # pack -> file -> [offset, length]
    packed: dict[str, str] = field(default_factory=dict)  # file -> its pack (derived from `packs`)
    # staged batches every table has applied, deleted in bulk by the writer of the next checkpoint
    # (`due`: those the entry at the newest checkpoint position handed over)
    trash: list[str] = field(default_factory=list)
    due: list[str] = field(default_factory=list)

    def seal(self, barrier: dict) -> int:
        """A barrier's effect: the next epoch, sealing the batches it lists (a FLUSH's barrier,
        committed with the FLUSH's entry) or, without a list, every batch not yet sealed."""
        record = dict(barrier)
        listed = record.get("batches")
        record["epoch"] = self.newest_epoch + 1
        if listed is None:
            record["batches"], self.unsealed = self.unsealed, {}
        else:
            for table, keys in listed.items():
                taken = set(keys)
                left = [k for k in self.unsealed.get(table, []) if k not in taken]
                if left:
                    self.unsealed[table] = left
                else:
                    self.unsealed.pop(table, None)
        self.epochs[record["epoch"]] = record
        self.newest_epoch = record["epoch"]
        return record["epoch"]

    def unseal(self, epoch: int) -> None:
        """Take back `seal` of the newest epoch (a barrier sealed here and not yet in the log): its
        batches are unsealed again, ahead of those accepted since."""
        record = self.epochs.pop(epoch)
        self.newest_epoch = epoch - 1
        for table, keys in record["batches"].items():
            self.unsealed[table] = list(keys) + self.unsealed.get(table, [])

    def apply(self, position: int, entry: dict, sealed_here: bool = False) -> None:
        if "catalog" in entry:
            self.catalog = entry["catalog"]
        for name in entry.get("drop", []):
            self.manifests.pop(name, None)
            self.unsealed.pop(name, None)
        for old, new in entry.get("rename", {}).items():
            self.rename(old, new)
        for table, keys in entry.get("stage", {}).items():
            self.unsealed.setdefault(table, []).extend(keys)
        if "barrier" in entry and not sealed_here:
            self.seal(entry["barrier"])
        for pack, layout in entry.get("packs", {}).items():
            self.packs[pack] = layout
            self.packed.update((key, pack) for key in layout)
        for name, doc in entry.get("commits", {}).items():
            change = doc.get("garbage_change")
            if change is not None:  # manifest.garbage_as_change
                drop = set(change["drop"])
                kept = [g for g in self.manifests.get(name, {}).get("garbage", []) if g["key"] not in drop]
                doc = {k: v for k, v in doc.items() if k != "garbage_change"}
                doc["garbage"] = kept + change["add"]
            self.manifests[name] = doc
        if entry.get("collected", 0) > self.collected:
            for e, record in sorted(self.epochs.items()):
                if self.collected < e <= entry["collected"]:
                    self.trash.extend(k for keys in record["batches"].values() for k in keys)
            self.collected = entry["collected"]
            self.epochs = {e: r for e, r in self.epochs.items() if e >= self.collected}
        self.due = []
        if position % CHECKPOINT_INTERVAL == 0:
            self.marks.append([position, entry.get("time", 0.0)])
            self.due, self.trash = self.trash, []
        self.position = position

    def rename(self, old: str, new: str) -> None:
        """Everything the log keeps under object name `old` goes under `new`: its manifest, its
        unsealed batches, and its part of every epoch record (staged batches, source positions:
        the fields keyed by object name). What a dropped object of the name `new` left in the
        records is no one's: its staged batches go to the trash, the rest is forgotten."""
        doc = self.manifests.pop(old, None)
        if doc is not None:
            self.manifests[new] = {**doc, "object": new}
        if old in self.unsealed:
            self.unsealed[new] = self.unsealed.pop(old)
        for record in self.epochs.values():
            for field_name, value in record.items():
                if not isinstance(value, dict):
                    continue
                stale = value.pop(new, None)
                if stale is not None and field_name == "batches":
                    self.trash.extend(stale)
                if old in value:
                    value[new] = value.pop(old)

    def to_json(self) -> dict:
        return {"position": self.position, "catalog": self.catalog, "manifests": self.manifests,
                "newest_epoch": self.newest_epoch, "epochs": {str(e): r for e, r in self.epochs.items()},
                "unsealed": self.unsealed, "collected": self.collected, "marks": self.marks,
                "pruned_below": self.pruned_below, "packs": self.packs, "trash": self.trash}

    @classmethod
    def from_json(cls, d: dict) -> LogState:
        return cls(position=d["position"], catalog=d["catalog"], manifests=d["manifests"],
                   newest_epoch=d["newest_epoch"], epochs={int(e): r for e, r in d["epochs"].items()},
                   unsealed=d["unsealed"], collected=d["collected"], marks=d["marks"],
                   pruned_below=d.get("pruned_below", 1), packs=d.get("packs", {}), trash=d.get("trash", []),
                   packed={key: pack for pack, layout in d.get("packs", {}).items() for key in layout})

    def listed_files(self) -> set[str]:
        """Every file some manifest lists, its garbage (still readable by others) included."""
        out: set[str] = set()
        for doc in self.manifests.values():
            for files in doc.get("state", {}).values():
                out.update(f["key"] for f in files)
            out.update(f["key"] for f in doc.get("changelog", []))
            out.update(g["key"] for g in doc.get("garbage", []))
        return out

    def drop_unlisted_packs(self) -> list[str]:
        """Forget the packs none of whose files any manifest lists; returns them (to delete)."""
        listed = self.listed_files()
        dead = [p for p, layout in self.packs.items() if not any(k in listed for k in layout)]
        for pack in dead:
            for key in self.packs.pop(pack):
                self.packed.pop(key, None)
        return dead


class WarehouseLog:
    """One process's view of a warehouse's log: the state it has read, and appends to it."""

    retention_seconds = RETENTION_SECONDS

    def __init__(self, store: ObjectStore):
        self.store = store
        self.state: LogState | None = None
        self.lock = threading.RLock()
        self._read_at = 0.0  # monotonic time the log was last read up to its end
        # a barrier sealed in this process's state and not yet written: it goes into the next entry
        # this process appends (a FLUSH's commit); `fate`: what became of the epochs sealed here
        # ('held', 'written', or 'lost' when another process's barrier came first)
        self.sealed: dict | None = None
        self.fate: dict[int, str] = {}
        self.entries_read = 0  # entries this process read that other processes wrote
        _logs.add(self)

    # -- reading -------------------------------------------------------------------------------
    def current(self) -> LogState:
        """The state as this process last read it (read first if it never did)."""
        with self.lock:
            if self.state is None:
                self.refresh()
            return self.state

    def refresh(self) -> LogState:
        """Read the entries other processes appended since this process last looked."""
        with self.lock:
            if self.state is None or time.monotonic() - self._read_at > self.retention_seconds / 4:
                held, self.sealed = self.sealed, None
                self.state = self._from_checkpoint()
                self._read_forward()
                if held is not None:  # the barrier held here, sealed again on the state read anew
                    self.sealed = held
                    self._keep_sealed(self.state.newest_epoch + 1 != held["epoch"])
                return self.state
            self._read_forward()
            return self.state

    def _from_checkpoint(self) -> LogState:
        try:
            position = json.loads(self.store.read_bytes(POINTER))["position"]
        except FileNotFoundError:
            position = self._newest_checkpoint()  # no pointer yet (or it was lost): look
        if not position:
            return LogState()
        try:
            return LogState.from_json(json.loads(self.store.read_bytes(checkpoint_key(position))))
        except FileNotFoundError:
            position = self._newest_checkpoint()
            if not position:
                return LogState()
            return LogState.from_json(json.loads(self.store.read_bytes(checkpoint_key(position))))

    def _newest_checkpoint(self) -> int:
        """Recovery only: the newest checkpoint by listing the log (0: none)."""
        found = [int(k.rsplit("/", 1)[-1].split(".")[0]) for k in self.store.list(LOG + "/")
                 if k.endswith(".checkpoint.json")]
        return max(found, default=0)

    def _read_forward(self) -> None:
        state = self.state
        held = self.sealed
        if held is not None:  # other processes' entries come before it: take it back while reading
            state.unseal(held["epoch"])
        newest = state.newest_epoch
        while True:
            try:
                data = self.store.read_bytes(entry_key(state.position + 1))
            except FileNotFoundError:
                break
            state.apply(state.position + 1, json.loads(data))
            self.entries_read += 1
        self._read_at = time.monotonic()
        if held is not None:
            self._keep_sealed(state.newest_epoch != newest)

    def _keep_sealed(self, moved: bool) -> None:
        """Seal the held barrier again on the state just read, unless another barrier came first
        (`moved`: the newest epoch changed) or its batches are no longer all unsealed."""
        held, state = self.sealed, self.state
        if moved or any(k not in state.unsealed.get(t, []) for t, keys in held["barrier"]["batches"].items()
                        for k in keys):
            self.fate[held["epoch"]] = "lost"
            self.sealed = None
        else:
            state.seal(held["barrier"])

    def seal(self, extra=None) -> int:
        """A barrier sealed in this process only (every batch accepted so far, as the log stands
        here): the state shows its epoch at once, and the next entry this process appends writes it.
        A FLUSH seals this way, so its barrier and its commit are one entry. `extra` as for
        epochs.barrier. Sealing again while one is held returns the held epoch."""
        with self.lock:
            state = self.current()
            if self.sealed is not None:
                return self.sealed["epoch"]
            more = extra(state.newest_epoch) if callable(extra) else extra
            barrier = {"time": time.time(), **(more or {}),
                       "batches": {t: list(keys) for t, keys in state.unsealed.items() if keys}}
            epoch = state.seal(barrier)
            self.sealed = {"epoch": epoch, "barrier": barrier}
            self.fate = {e: f for e, f in self.fate.items() if e > epoch - 16}
            self.fate[epoch] = "held"
            return epoch

    def check_sealed(self, epoch: int, what: str) -> None:
        """CommitConflict when the barrier of `epoch`, sealed here, was lost to another process's."""
        if self.fate.get(epoch) == "lost":
            raise conflict(what, "another process sealed epochs before this one's barrier was written")

    def write_sealed(self) -> None:
        """Write the barrier sealed here, if one is held, in an entry of its own."""
        with self.lock:
            if self.sealed is not None:
                self.append(lambda state: None, "a barrier")

    def locate(self, key: str) -> tuple[str, dict[str, list[int]]] | None:
        """The pack holding file `key` and the pack's layout, or None (a file of its own)."""
        state = self.state
        pack = state.packed.get(key) if state is not None else None
        if pack is None:
            return None
        layout = state.packs.get(pack)
        return (pack, layout) if layout is not None else None

    # -- writing -------------------------------------------------------------------------------
    def append(self, build, what: str = "commit") -> int | None:
        """Append the entry `build(state)` returns (None: nothing to append) at the next position;
        when another process took that position first, read its entries and build again (`build`
        raises CommitConflict where the two really conflict). Returns the entry's position."""
        with self.lock:
            if self.state is None or time.monotonic() - self._read_at > self.retention_seconds / 4:
                self.refresh()
            for _ in range(_ATTEMPTS):
                entry = build(self.state)
                held = self.sealed
                if entry is None and held is None:
                    return None
                entry = entry or {}
                if held is not None and "barrier" in entry:  # the held barrier first, in an entry of its own
                    self.append(lambda state: None, what)
                    continue
                if held is not None:
                    entry = {"barrier": held["barrier"], **entry}
                entry["time"] = time.time()
                position = self.state.position + 1
                data = json.dumps(entry, separators=(",", ":"), default=str).encode()
                if self.store.put_if_absent(entry_key(position), data):
                    # as other processes will read it (its barrier is sealed here already)
                    self.state.apply(position, json.loads(data), sealed_here=held is not None)
                    if held is not None:
                        self.fate[held["epoch"]] = "written"
                        self.sealed = None
                    self._read_at = time.monotonic()
                    if position % CHECKPOINT_INTERVAL == 0:
                        try:
                            self._checkpoint()
                        except Exception:  # noqa: BLE001 - the commit landed; the next interval checkpoints
                            _log.warning("%s committed at log position %d; writing its checkpoint failed "
                                         "(the next checkpoint interval writes one)", what, position, exc_info=True)
                    return position
                self._read_forward()
            raise OperationalError(f"{what}: other processes kept appending to the warehouse log first")

    def _checkpoint(self) -> None:
        """Delete packs no manifest needs; write the state whole, point new readers at it, and
        prune what the retention allows."""
        state = self.state
        delete_many(self.store, state.drop_unlisted_packs() + state.due)
        state.due = []
        self.store.write_bytes(checkpoint_key(state.position), json.dumps(state.to_json()).encode())
        try:
            pointed = json.loads(self.store.read_bytes(POINTER))["position"]
        except FileNotFoundError:
            pointed = 0
        if pointed < state.position:  # the pointer only moves forward
            self.store.write_bytes(POINTER, json.dumps({"position": state.position}).encode())
        old = [m for m in state.marks if m[0] < state.position and m[1] < time.time() - self.retention_seconds]
        if not old:
            return
        below = max(m[0] for m in old)
        keys = [entry_key(n) for n in range(state.pruned_below, below)]
        keys += [checkpoint_key(m[0]) for m in state.marks if m[0] < below]
        delete_many(self.store, keys)
        state.marks = [m for m in state.marks if m[0] >= below]
        state.pruned_below = below


def delete_many(store: ObjectStore, keys: list[str]) -> None:
    """Delete objects, in as few requests as the store allows."""
    many = getattr(store, "delete_many", None)
    if many is not None:
        many(keys)
        return
    for key in keys:
        store.delete(key)


def conflict(what: str, detail: str) -> CommitConflict:
    return CommitConflict(f"{what}: {detail}; this attempt was discarded (nothing partial is visible), retry it")


_logs: weakref.WeakSet = weakref.WeakSet()


def log_of(store: ObjectStore) -> WarehouseLog:
    """The log of `store`'s warehouse, as this process reads it (one per store object)."""
    log = store.__dict__.get("_log")
    if log is None:
        log = store.__dict__.setdefault("_log", WarehouseLog(store))
        store.locate_packed = log.locate
    return log


def forget_parent_locks() -> None:
    """In a forked child: a log's lock may have been held by a parent's thread at the fork."""
    from ..after_fork import reinit

    for log in list(_logs):
        reinit(log.lock)
