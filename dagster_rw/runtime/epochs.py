"""Barriers and epochs: sealing accepted DML into strictly increasing, durable epochs.

A DML batch is accepted when its file is under `staging/` and a log entry (storage/log.py) names
it; a barrier is a log entry too, and seals every batch accepted before it into the next epoch:
the log's order decides, so two processes cutting a barrier at once get two different epochs,
never the same batch twice. Once every table has applied an epoch, its staged files are deleted
and a log entry records that (`collected`); the epoch records above it stay in the log's state.
"""
from __future__ import annotations

import time
import uuid

from ..errors import ProgrammingError
from ..storage.catalog import TABLE
from ..storage.log import log_of
from ..storage.object_store import ObjectStore

STAGING = "staging"


def newest_epoch(store: ObjectStore) -> int:
    """The newest epoch as this process last read the log."""
    return log_of(store).current().newest_epoch


def epoch_numbers(store: ObjectStore) -> list[int]:
    """The epochs whose records the log still holds (those whose batches are not all collected)."""
    return sorted(log_of(store).current().epochs)


def load_epoch(store: ObjectStore, epoch: int) -> dict:
    try:
        return log_of(store).current().epochs[epoch]
    except KeyError:
        raise FileNotFoundError(f"the record of epoch {epoch}") from None


def barrier_time(store: ObjectStore, epoch: int) -> float | None:
    """The time the barrier of `epoch` recorded (seconds since 1970). Once its record is gone
    (every table applied the epoch and its batches were collected), the time of the oldest epoch
    the log still records after it: a view lagging that far sees a later time, never an earlier
    one. None when the log records no epoch from `epoch` on (epoch 0, before any barrier)."""
    records = log_of(store).current().epochs
    later = [e for e in records if e >= epoch]
    return records[min(later)].get("time") if later else None


def staging_key(folder: str) -> str:
    """A new staged batch's key, under the table's folder (CatalogObject.key_folder)."""
    return f"{STAGING}/{folder}/{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"


def accept(store: ObjectStore, obj, key: str) -> None:
    """Accept the staged batch `key` of table `obj` (its file written): the next barrier seals it.
    The entry is refused when the log's newest catalog no longer holds the table as `obj`
    describes it (another process dropped it, or dropped and created it again)."""
    columns = [[c.name, c.type] for c in obj.columns]

    def build(state):
        now = next((o for o in (state.catalog or {}).get("objects", []) if o["name"] == obj.name), None)
        if now is None or now["created_epoch"] != obj.created_epoch or \
                [[c["name"], c["type"]] for c in now["columns"]] != columns:
            raise ProgrammingError(f'relation "{obj.name}" was dropped or changed by another process while '
                                   "the rows were written; nothing was accepted")
        return {"stage": {obj.name: [key]}}

    log_of(store).append(build, f"accepting a batch of {obj.name!r}")


def barrier(store: ObjectStore, extra: dict | None = None) -> int:
    """Seal every accepted batch not yet in an epoch into a new epoch; returns its number.

    `extra` adds fields to the epoch record: a dict, or a function of the newest epoch before this
    one (evaluated again if another process takes that number first), for positions that must
    follow the previous record's (Kafka offsets).
    """
    epoch = []

    def build(state):
        more = extra(state.newest_epoch) if callable(extra) else extra
        epoch[:] = [state.newest_epoch + 1]
        return {"barrier": {"time": time.time(), **(more or {})}}

    log_of(store).append(build, "a barrier")
    return epoch[0]


def seal(store: ObjectStore, extra=None) -> int:
    """barrier(), held in this process and written with its next log entry (a FLUSH's commit):
    the FLUSH's barrier and commit are one entry (storage/log.py WarehouseLog.seal)."""
    return log_of(store).seal(extra)


def write_sealed(store: ObjectStore) -> None:
    """Write the barrier this process holds (seal), if any, in an entry of its own."""
    log_of(store).write_sealed()


def check_sealed(store: ObjectStore, epoch: int, what: str) -> None:
    """CommitConflict when the barrier of `epoch` sealed here lost its place to another process's."""
    log_of(store).check_sealed(epoch, what)


def sealed_lost(store: ObjectStore, epoch: int) -> bool:
    return log_of(store).fate.get(epoch) == "lost"


def batches_for(store: ObjectStore, table: str, after: int, upto: int) -> list[str]:
    """The staged batches of `table` sealed in epochs (after, upto], in the order they were accepted."""
    state = log_of(store).current()
    out: list[str] = []
    for n in range(after + 1, upto + 1):
        record = state.epochs.get(n)
        if record is None:
            if n <= state.collected:
                raise FileNotFoundError(f"the batches of epoch {n} (collected: every table applied them)")
            continue
        out.extend(record["batches"].get(table, []))
    return out


def unsealed_batches(store: ObjectStore, table: str) -> list[str]:
    """Batches of `table` accepted but not yet sealed by any barrier."""
    return list(log_of(store).current().unsealed.get(table, []))


def unsealed_counts(store: ObjectStore) -> dict[str, int]:
    """Per table, how many accepted DML batches no barrier has sealed yet."""
    return {t: len(keys) for t, keys in log_of(store).current().unsealed.items() if keys}


class Collection:
    """Works out, on the log's newest state (as an entry's builder), the epoch every table has
    applied: `{"collected": epoch}` for the entry, or {} when it has not moved. The staged batches
    of the epochs it covers go to the log's trash, deleted in bulk at its next checkpoint
    (storage/log.py). `ours`: tables' epochs in versions the same entry commits."""

    def __init__(self, ours: dict[str, int] | None = None):
        self.ours = ours or {}

    def __call__(self, state) -> dict:
        tables = [o["name"] for o in (state.catalog or {}).get("objects", []) if o["kind"] == TABLE]
        if not tables:
            return {}
        applied = min(self.ours[t] if t in self.ours else state.manifests.get(t, {}).get("epoch", 0)
                      for t in tables)
        return {"collected": applied} if applied > state.collected else {}


def collect_staging(store: ObjectStore) -> None:
    """Record the epoch every table has applied (its staged batches are then deleted)."""
    collection = Collection()
    log_of(store).append(lambda state: collection(state) or None, "collecting staged batches")
