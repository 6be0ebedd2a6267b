"""Barriers and epochs: sealing staged DML into strictly increasing, durable epochs.

A barrier writes `epochs/<n>.json` listing, per table, the staged DML batches it seals (put-if-absent:
two processes cutting a barrier at once get two different epochs, never the same batch twice).
Staged files that every table has applied are deleted, then a watermark records that; barriers only
need the epoch records above the watermark to tell sealed files from unsealed ones.
"""
from __future__ import annotations

import json
import time
import uuid

from ..errors import OperationalError
from ..storage.catalog import key_name, name_of_key
from ..storage.object_store import ObjectStore

EPOCHS = "epochs"
STAGING = "staging"
WATERMARK = "staging_gc.json"
_WIDTH = 20


def epoch_key(epoch: int) -> str:
    return f"{EPOCHS}/{epoch:0{_WIDTH}d}.json"


def epoch_numbers(store: ObjectStore) -> list[int]:
    return [int(k.rsplit("/", 1)[-1][:-5]) for k in store.list(EPOCHS + "/") if k.endswith(".json")]


def newest_epoch(store: ObjectStore) -> int:
    nums = epoch_numbers(store)
    return max(nums) if nums else 0


def load_epoch(store: ObjectStore, epoch: int) -> dict:
    return json.loads(store.read_bytes(epoch_key(epoch)))


def staging_key(table: str) -> str:
    return f"{STAGING}/{key_name(table)}/{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"


def _watermark(store: ObjectStore) -> int:
    try:
        return json.loads(store.read_bytes(WATERMARK))["epoch"]
    except FileNotFoundError:
        return 0


def barrier(store: ObjectStore, extra: dict | None = None, attempts: int = 20) -> int:
    """Seal every staged batch not yet in an epoch into a new epoch; returns its number.

    `extra` adds fields to the epoch record: a dict, or a function of the newest epoch before this
    one (evaluated again if another process takes that number first), for positions that must
    follow the previous record's (Kafka offsets).
    """
    for _ in range(attempts):
        wm = _watermark(store)
        listed = epoch_numbers(store)  # one listing: the newest epoch and the sealed set must agree
        nums = sorted(n for n in listed if n > wm)
        sealed: set[str] = set()
        try:
            for n in nums:
                for keys in load_epoch(store, n)["batches"].values():
                    sealed.update(keys)
        except FileNotFoundError:
            continue  # staged files were collected meanwhile: look again
        newest = max(listed) if listed else wm
        batches: dict[str, list[str]] = {}
        for key in store.list(STAGING + "/"):
            if key in sealed or not key.endswith(".parquet"):
                continue
            table = name_of_key(key.split("/")[1])
            batches.setdefault(table, []).append(key)
        for keys in batches.values():
            keys.sort()  # staging keys start with a timestamp: the order DML was accepted
        record = {"epoch": newest + 1, "time": time.time(), "batches": batches}
        more = extra(newest) if callable(extra) else extra
        if more:
            record.update(more)
        data = json.dumps(record, indent=1).encode()
        if store.put_if_absent(epoch_key(newest + 1), data):
            return newest + 1
    raise OperationalError("could not cut a barrier: other processes kept committing epochs first")


def batches_for(store: ObjectStore, table: str, after: int, upto: int) -> list[str]:
    """The staged batches of `table` sealed in epochs (after, upto], in the order they were accepted."""
    out: list[str] = []
    for n in sorted(n for n in epoch_numbers(store) if after < n <= upto):
        out.extend(load_epoch(store, n)["batches"].get(table, []))
    return out


def unsealed_batches(store: ObjectStore, table: str) -> list[str]:
    """Batches of `table` accepted but not yet sealed by any barrier."""
    wm = _watermark(store)
    sealed: set[str] = set()
    for n in epoch_numbers(store):
        if n > wm:
            sealed.update(load_epoch(store, n)["batches"].get(table, []))
    return [k for k in store.list(f"{STAGING}/{key_name(table)}/") if k.endswith(".parquet") and k not in sealed]


def unsealed_counts(store: ObjectStore) -> dict[str, int]:
    """Per table, how many staged DML batches no barrier has sealed yet (one listing of staging)."""
    wm = _watermark(store)
    sealed: set[str] = set()
    for n in epoch_numbers(store):
        if n > wm:
            try:
                for keys in load_epoch(store, n)["batches"].values():
                    sealed.update(keys)
            except FileNotFoundError:
                continue
    out: dict[str, int] = {}
    for key in store.list(STAGING + "/"):
        if key.endswith(".parquet") and key not in sealed:
            table = name_of_key(key.split("/")[1])
            out[table] = out.get(table, 0) + 1
    return out


def collect_staging(store: ObjectStore, applied_epoch: int) -> None:
    """Delete staged batches sealed in epochs <= applied_epoch (every table has applied them)."""
    wm = _watermark(store)
    if applied_epoch <= wm:
        return
    numbers = epoch_numbers(store)
    # deleted here, not in the background: a barrier takes a staged file that no epoch above the
    # watermark lists for a new one, so every such file must be gone before the watermark moves
    for n in sorted(n for n in numbers if wm < n <= applied_epoch):
        try:
            record = load_epoch(store, n)
        except FileNotFoundError:  # another process collected it meanwhile
            continue
        for keys in record["batches"].values():
            for k in keys:
                store.delete(k)
    # the watermark only lets barriers skip older epoch records: a crash that loses it (or the
    # deletions) leaves records of batches every table has applied, which nothing reads again
    store.write_bytes(WATERMARK, json.dumps({"epoch": applied_epoch}).encode(), durable=False)
    # records below the watermark describe batches that are gone; keep the watermark's own record
    for n in numbers:
        if n < applied_epoch:
            store.delete(epoch_key(n))
