"""Hidden row ids of tables without a primary key, unique by construction across processes and hosts.

A writer claims a block of ids from the warehouse before it stages rows: the claims form a chain of
keys `row_ids/<first block>.json`, each naming how many blocks it takes, and a claim is a
put-if-absent at the end of the chain. Two writers that try the same key get one claim and one
refusal (the refused one reads the chain again and claims after the winner), so no two writers,
on any host, ever hold the same block. A batch of n rows takes n consecutive ids of the writer's
block, in row order (a batch larger than what is left of the block claims blocks of its own).

An id is `block * BLOCK + position`, a bigint. Ids grow over time: a writer's batches take
increasing ids, and blocks claimed later are higher. A warehouse's first claim starts above the
ids of earlier versions (a millisecond shifted left by 22 bits), so ids stay increasing in
warehouses written before, and top-N, which breaks ties by the stream key, keeps preferring older
rows. Claims are never deleted: a writer holding a stale view of the chain must find its key
taken. A writer uses one claim per BLOCK rows it stages (and one per process at least).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time

from ..errors import OperationalError

PREFIX = "row_ids"
BLOCK_BITS = 24
BLOCK = 1 << BLOCK_BITS
_LEGACY_BITS = 22  # earlier versions: a millisecond << 22 plus a random offset
_ATTEMPTS = 100


def claim_key(first_block: int) -> str:
    return f"{PREFIX}/{first_block:020d}.json"


class Allocator:
    """This process's ids for one warehouse: the block it holds and the next free position."""

    def __init__(self, store):
        self.store = store
        self.next_id = 0  # the next id to hand out
        self.limit = 0  # the end of the claimed range (next_id == limit: nothing left)
        self.chain_end: int | None = None  # the first block after the newest claim seen

    def take(self, n: int) -> int:
        """The first of n consecutive ids no other writer holds."""
        if n > self.limit - self.next_id:
            blocks = max(1, -(-n // BLOCK))
            first = self._claim(blocks)
            self.next_id, self.limit = first * BLOCK, (first + blocks) * BLOCK
        base = self.next_id
        self.next_id += n
        return base

    def _claim(self, blocks: int) -> int:
        body = json.dumps({"blocks": blocks, "host": socket.gethostname(), "pid": os.getpid(),
                           "time": time.time()}).encode()
        for _ in range(_ATTEMPTS):
            if self.chain_end is None:
                self.chain_end = self._read_chain_end()
            first = self.chain_end
            if self.store.put_if_absent(claim_key(first), body):
                self.chain_end = first + blocks
                return first
            self.chain_end = None  # another writer claimed there first: read the chain again
        raise OperationalError(f"could not claim hidden row ids in {PREFIX}/: other writers kept claiming first")

    def _read_chain_end(self) -> int:
        keys = [k for k in self.store.list(PREFIX + "/") if k.endswith(".json")]
        if not keys:
            return ((int(time.time() * 1000) + 1) << _LEGACY_BITS >> BLOCK_BITS) + 1
        newest = keys[-1]  # zero-padded: the listing's order is the blocks' order
        first = int(newest.rsplit("/", 1)[-1][:-5])
        return first + json.loads(self.store.read_bytes(newest))["blocks"]


_allocators: dict[str, Allocator] = {}
_lock = threading.Lock()


def allocate(store, n: int) -> int:
    """The first of n consecutive hidden row ids for a batch staged into `store`'s warehouse."""
    with _lock:
        allocator = _allocators.get(store.url)
        if allocator is None:
            allocator = _allocators[store.url] = Allocator(store)
        return allocator.take(n)


def forget_parent_blocks() -> None:
    """In a forked child: the blocks this process held are the parent's; the child claims its own."""
    from ..after_fork import reinit

    _allocators.clear()
    reinit(_lock)
