"""Indexes over a state table's list of files: one Bloom filter over the newer files' keys
(union_admits) and, for a dense integer key, which file holds each key's newest version
(newest_holders, kept up to date through appends and the merges noted by note_merge)."""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..tuning import TUNING
from .files import _file, _lock
from .file_index import _dense, _index, _slot


def union_admits(paths: list[str], cols: list[str], needles: np.ndarray) -> np.ndarray | None:
    """Which needles (sorted integer key codes) may be in any of these files: one Bloom filter
    over all their keys, so a lookup probes the newer small files of a state table once instead of
    once per file (most keys looked up live only in its large oldest file). None when the files'
    keys are not integer codes or too many. The filter is kept per list of files and extended in
    place when newer files are appended (an extra key can only admit more, never lose a key)."""
    if len(needles) < TUNING.filter_min_needles or needles.dtype.kind not in "iu":
        return None
    cols_t = tuple(cols)
    entry_key = (paths[0], cols_t)
    with _lock:
        entry = _unions.get(entry_key)
        if entry is not None:
            _unions.move_to_end(entry_key)
    covered, admits, count = entry if entry is not None and tuple(paths[:len(entry[0])]) == entry[0] \
        else ((), None, 0)
    if admits is not None and len(covered) == len(paths):
        return admits[_slot(needles, len(admits))]
    new_keys = []
    for path in paths[len(covered):]:
        idx = _index(_file(path), cols_t)
        if idx is None or idx[1].dtype.kind not in "iu":
            return None
        new_keys.append(idx[1])
    total = count + sum(len(k) for k in new_keys)
    if total > TUNING.union_filter_max_keys:
        return None
    if admits is None or len(admits) < 8 * total:  # none yet, or too full: a new one with room to grow
        if admits is not None:
            new_keys = [_index(_file(path), cols_t)[1] for path in paths]
        admits = np.zeros(1 << max(10, (16 * total - 1).bit_length()), bool)
    for keys in new_keys:
        admits[_slot(keys, len(admits))] = True
    with _lock:
        _unions[entry_key] = (tuple(paths), admits, total)
        _unions.move_to_end(entry_key)
        while len(_unions) > _UNION_ENTRIES:
            _unions.popitem(last=False)
    return admits[_slot(needles, len(admits))]


_unions: OrderedDict[tuple, tuple[tuple[str, ...], np.ndarray, int]] = OrderedDict()
_UNION_ENTRIES = 32  # state tables whose newer files have a filter (least recently used dropped)


class _Holders:
    """Which file of a state table holds the newest version of each key, over the range of a
    dense integer key (its oldest file's keys fill at least half of their range, as a fact table's
    ids do): one generation number per key value. A lookup then searches each wanted key in the one
    file that holds it, whatever the number and size of the newer files (a table updated at random
    keeps a fair share of its keys in newer files, every one of which a search newest-first probes
    for every key). Generation 0 stands for the oldest file, which may or may not hold the key; an
    appended file's keys get its generation; a merge of newer files maps their generations to the
    merged file's. Kept per oldest file, brought up to date from the file list a lookup passes."""

    def __init__(self, low: int, size: int, base_keys: int):
        self.low = low
        self.owner = np.zeros(size, np.uint16)
        self.final = np.zeros(1, np.uint16)  # generation -> generation of the file now holding its keys
        self.gen_of: dict[str, int] = {}  # newer file listed -> its generation
        self.order: list[str] = []  # the newer files, oldest first
        self.keys = base_keys  # keys counted so far (bounds the range the map may grow to)

    def _new_gen(self) -> int | None:
        gen = len(self.final)
        if gen >= _HOLDER_GENERATIONS:
            return None  # rebuilt from the files listed, with fresh generations
        self.final = np.append(self.final, np.uint16(gen))
        return gen

    def _append(self, path: str, cols: tuple[str, ...]) -> bool:
        idx = _index(_file(path), cols)
        if idx is None or idx[0] or idx[1].dtype.kind not in "iu":
            return False
        keys = idx[1]
        gen = self._new_gen()
        if gen is None:
            return False
        self.keys += len(keys)
        if len(keys):
            lo, hi, end = int(keys[0]), int(keys[-1]), self.low + len(self.owner)
            if lo < self.low or hi >= end:
                new_low, top = min(lo, self.low), max(hi + 1, end)
                limit = min(4 * self.keys + (1 << 16), _HOLDER_MAX_SLOTS)
                if top - new_low > limit:
                    return False  # the keys spread too thin for a map by value
                # room for the ids still to come, within the limit (headroom alone never refuses
                # a map: growing at the low end again and again would compound it)
                size = min(top - new_low + (top - new_low) // 4, limit)
                grown = np.zeros(size, np.uint16)
                grown[self.low - new_low:self.low - new_low + len(self.owner)] = self.owner
                self.owner, self.low = grown, new_low
            self.owner[keys.astype(np.int64) - self.low] = gen
        self.gen_of[path] = gen
        self.order.append(path)
        return True

    def _merge(self, path: str, gone: list[str]) -> bool:
        """A file this process merged from a run of the files the map holds (note_merge): every key
        they held is in it, at its newest version among them."""
        with _lock:
            run = list(_merged_from.get(path, ()))
        if not run or not all(p in gone for p in run):
            return False  # not known to replace files the map saw (and only those): rebuild
        at = self.order.index(run[0])
        if self.order[at:at + len(run)] != run:
            return False
        gen = self._new_gen()
        if gen is None:
            return False
        self.final[np.isin(self.final, [self.gen_of[p] for p in run])] = gen
        for p in run:
            gone.remove(p)
            del self.gen_of[p]
        self.order[at:at + len(run)] = [path]
        self.gen_of[path] = gen
        return True

    def sync(self, paths: list[str], cols: tuple[str, ...]) -> bool:
        """Bring the map up to a file list that follows the one it describes (files appended, runs
        of files merged into one); False when the list does not follow it."""
        listed = set(paths[1:])
        if [p for p in paths[1:] if p in self.gen_of] != [p for p in self.order if p in listed]:
            return False
        gone = [p for p in self.order if p not in listed]
        for i, path in enumerate(paths[1:], start=1):
            if path in self.gen_of:
                continue
            if gone and self._merge(path, gone):
                continue
            if self.order and self.order[-1] not in paths[1:i]:
                return False  # a new file older than a file the map holds: not an append
            if not self._append(path, cols):
                return False
        return not gone and self.order == paths[1:]

    def holders(self, paths: list[str], needles: np.ndarray) -> np.ndarray:
        position = np.full(len(self.final), -1, np.int64)
        position[0] = 0
        for i, path in enumerate(paths[1:], start=1):
            position[self.gen_of[path]] = i
        holder = position[self.final]  # generation -> index of the file now holding its keys
        offset = needles.astype(np.int64) - self.low
        if not len(offset) or (offset.min() >= 0 and offset.max() < len(self.owner)):
            return holder[self.owner[offset]]
        inside = (offset >= 0) & (offset < len(self.owner))
        out = np.full(len(needles), -1, np.int64)  # outside the map's range no file holds a key
        out[inside] = holder[self.owner[offset[inside]]]
        return out


def newest_holders(paths: list[str], cols: list[str], needles: np.ndarray) -> np.ndarray | None:
    """For each needle (integer codes of a state table's whole primary key), the index in `paths`
    (the table's files, oldest first) of the newest file holding
    that key (0: only the oldest file may), or -1 when no file holds it. None when the oldest
    file's keys are not a dense integer range, or the newer files' keys spread too thin (then the
    caller searches the files newest first)."""
    if len(paths) < 2 or needles.dtype.kind not in "iu":
        return None
    entry_key = (paths[0], tuple(cols))
    with _holder_lock:
        lock = _holder_locks.setdefault(entry_key, threading.Lock())
    with lock:  # one thread at a time brings a table's map up to date (others' maps stay free)
        with _holder_lock:
            entry = _holders.get(entry_key, None)
        if entry is False:
            return None  # this oldest file's keys (or its newer files') cannot be mapped
        if entry is None or not entry.sync(paths, entry_key[1]):
            f = _file(paths[0])
            idx = None if f.mapped else _index(f, entry_key[1])  # (a map by key value is memory)
            if idx is None or idx[0] or _dense(f, entry_key[1], idx[1]) is None:
                entry = None
            else:
                keys = idx[1]
                entry = _Holders(int(keys[0]), int(keys[-1]) - int(keys[0]) + 1, len(keys))
                if not entry.sync(paths, entry_key[1]):
                    entry = None
        with _holder_lock:
            _holders[entry_key] = entry if entry is not None else False
            _holders.move_to_end(entry_key)
            # bounded by count and by memory (a map takes 2 bytes per value of its key range)
            while len(_holders) > 1 and (len(_holders) > _HOLDER_ENTRIES or sum(
                    h.owner.nbytes for h in _holders.values() if h) > _HOLDER_BYTES):
                gone, _ = _holders.popitem(last=False)
                _holder_locks.pop(gone, None)
        return entry.holders(paths, needles) if entry is not None else None


def note_merge(merged: str, group: list[str]) -> None:
    """Remember that the file `merged` holds the rows of the files `group` (oldest first) merged,
    each key's newest version among them, tombstones kept: the holders map follows such merges."""
    with _lock:
        _merged_from[merged] = tuple(group)
        _merged_from.move_to_end(merged)
        while len(_merged_from) > _MERGES_NOTED:
            _merged_from.popitem(last=False)


_merged_from: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_MERGES_NOTED = 256
_holders: OrderedDict[tuple, _Holders | bool] = OrderedDict()
_holder_lock = threading.Lock()  # guards the two dicts; each map has a lock of its own
_holder_locks: dict[tuple, threading.Lock] = {}
_HOLDER_ENTRIES = 8  # state tables with a map (least recently used dropped)
_HOLDER_BYTES = 1 << 29  # and their maps' bytes at most
_HOLDER_GENERATIONS = 1 << 16  # uint16 generations; past them the map is rebuilt
_HOLDER_MAX_SLOTS = 1 << 28
