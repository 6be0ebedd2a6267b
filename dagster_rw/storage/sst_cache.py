"""A process-wide cache of decoded SST files, and key lookups into them by binary search.

SST files are immutable, so a decoded copy can never go stale; the cache is bounded by bytes and
evicts the least recently used file. Correctness never depends on it: a new process starts empty
and reads the files again. A lookup binary-searches the sorted key columns (`searchsorted`) for the
wanted keys, so its cost follows the number of keys looked up, not the size of the file.

A file larger than an eighth of the cache is not decoded into it but mapped (storage.
mapped_columns): converted once into raw column files that the operating system pages in as
lookups touch them. Such a file takes no room in the cache beyond its small indexes, and a lookup
in it reads the pages it searches and takes, so state larger than the cache (or than memory)
costs a small epoch what its keys touch.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

from . import mapped_columns
from .tuning import TUNING
from .key_codes import (  # noqa: F401 - callers reach them as sst_cache.<name>
    is_small_int, _searchable, _encode, _biased, _int_like,
    _int_codes, decode_codes, key_codes, key_hash, local_hash, sorted_order,
    _unsigned, _packed_order, sort_values, _polars_sort, _best_of_three,
    hash_order, _range_codes, order_codes, sort_indices, sorted_for_file, _MIX, _sort_lock,
)

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

_LIMIT = int(os.environ.get("DAGSTER_RW_SST_CACHE_BYTES", str(4 << 30)))


class _File:
    counted = False  # in the cache, its size added to the total

    def __init__(self, table: pa.Table, combine: bool = True, mapped: bool = False):
        self.table = table.combine_chunks() if combine else table  # one chunk per column: take() is much faster
        self.indexes: dict[tuple[str, ...], tuple[int, np.ndarray] | None] = {}
        self.mapped = mapped  # columns mapped from disk (mapped_columns): only its indexes take memory
        self.size = 0 if mapped else table.nbytes


_cache: OrderedDict[str, _File] = OrderedDict()
_bytes = 0
_lock = threading.Lock()


def _file(path: str) -> _File:
    with _lock:
        f = _cache.get(path)
        if f is not None:
            _cache.move_to_end(path)
            return f
    if _too_large(path):
        table = mapped_columns.map_file(path)
        if table is not None:
            f = _File(table, combine=False, mapped=True)
            f.path = path
            return _insert(path, f)
    return _insert(path, _File(read_parquet(path)))


def _too_large(path: str) -> bool:
    """Whether a file decodes to more than _MAP_FRACTION of the cache (then it is mapped); the
    footer is read only for files whose size on disk leaves the question open."""
    limit = _LIMIT * _MAP_FRACTION
    return os.path.getsize(path) * 32 > limit and mapped_columns.estimated_bytes(path) > limit


_MAP_FRACTION = 1 / 8


def too_large(paths: list[str]) -> bool:
    """Whether files decode, together, to more than a mapped file's threshold (a merge of them
    then streams from the files instead of decoding them)."""
    limit, total = _LIMIT * _MAP_FRACTION, 0
    for path in paths:
        with _lock:
            f = _cache.get(path)
        if f is not None and f.mapped:
            return True
        total += f.size if f is not None else mapped_columns.estimated_bytes(path)
        if total > limit:
            return True
    return False


def is_mapped(path: str) -> bool:
    """Whether `path` is (or would be) mapped rather than decoded into the cache."""
    with _lock:
        f = _cache.get(path)
    return f.mapped if f is not None else _too_large(path)


def written(path: str) -> None:
    """A file this process kept decoded while writing it is now on disk: too large for the cache,
    it is dropped, to be mapped from the file by its next reader."""
    with _lock:
        f = _cache.get(path)
    if f is not None and not f.mapped and f.size > _LIMIT * _MAP_FRACTION:
        discard(path)


def _insert(path: str, f: _File) -> _File:
    """Add a decoded file (unless another thread did) and evict the least recently used beyond the limit."""
    with _lock:
        f = _cache.setdefault(path, f)
        if not f.counted:
            f.counted = True
            _grow(f.size)
    return f


def set_limit(nbytes: int) -> None:
    """Bound the cache to `nbytes` of decoded files (process-wide), evicting down to it now."""
    global _LIMIT
    with _lock:
        _LIMIT = int(nbytes)
        _grow(0)


def _grow(nbytes: int) -> None:
    """Account for nbytes more in the cache (the lock is held) and evict down to the limit."""
    global _bytes
    _bytes += nbytes
    while _bytes > _LIMIT and len(_cache) > 1:
        _, old = _cache.popitem(last=False)
        old.counted = False
        _bytes -= old.size


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema` (its columns' names and order): cast only when a type differs."""
    if table.schema.equals(schema, check_metadata=False):
        return table
    return table.cast(schema)


def read_parquet(path: str) -> pa.Table:
    """A Parquet file as Arrow; INTERVAL columns (which pyarrow sees as 12 raw bytes: months, days,
    milliseconds) come back as month_day_nano intervals."""
    return restore_types(pq.ParquetFile(path).read())  # one known file: no dataset discovery


def restore_types(table: pa.Table) -> pa.Table:
    """read_parquet's corrections of what pyarrow reads: nullable fields, INTERVAL columns."""
    if not all(f.nullable for f in table.schema):  # written REQUIRED where it held no NULLs
        table = pa.Table.from_arrays(table.columns, schema=pa.schema(
            [f.with_nullable(True) for f in table.schema], table.schema.metadata))
    for i, field in enumerate(table.schema):
        if pa.types.is_fixed_size_binary(field.type) and field.type.byte_width == 12:
            raw = table.column(i).combine_chunks()
            valid = raw.is_valid()
            buf = np.frombuffer(raw.buffers()[1], dtype=np.uint32)[raw.offset * 3:(raw.offset + len(raw)) * 3]
            parts = buf.reshape(-1, 3).astype(np.int64)
            values = [pa.MonthDayNano([int(m), int(d), int(ms) * 1_000_000]) if ok else None
                      for (m, d, ms), ok in zip(parts.tolist(), valid.to_pylist())]
            table = table.set_column(i, pa.field(field.name, pa.month_day_nano_interval()),
                                     pa.array(values, pa.month_day_nano_interval()))
    return table


def put(path: str, table: pa.Table, combine: bool = True) -> None:
    """Remember a file this process just wrote (its sorted rows), saving the read-back
    (`combine=False`: rows read through once, left in their chunks)."""
    _insert(path, _File(table, combine))


def discard(path: str) -> None:
    """Forget a decoded file no reader needs again (a staged batch its table has applied)."""
    global _bytes
    with _lock:
        f = _cache.pop(path, None)
        if f is not None and f.counted:
            f.counted = False
            _bytes -= f.size
    if f is not None and f.mapped:
        mapped_columns.unmap(path)


def replace(path: str, table: pa.Table) -> None:
    """Put `table` in place of the cached rows of `path` (the same rows, now in the file's order)."""
    discard(path)
    put(path, table)


def read(path: str) -> pa.Table:
    return _file(path).table


def cached(path: str) -> pa.Table | None:
    """The decoded file if the cache holds it (a file this process is still writing, for one)."""
    with _lock:
        f = _cache.get(path)
        if f is not None:
            _cache.move_to_end(path)
        return f.table if f is not None else None


def usable_prefix(schema: pa.Schema, on: list[str]) -> list[str]:
    """The key columns a binary search can use: both of a two-small-integer key, else the first."""
    if len(on) >= 2 and all(is_small_int(schema.field(c).type) for c in on[:2]):
        return on[:2]
    return on[:1] if _searchable(schema.field(on[0]).type) else []


def _index(f: _File, cols: tuple[str, ...]):
    """(rows with a NULL key at the start, encoded sorted keys of the other rows), or None."""
    if cols not in f.indexes:
        columns = [f.table.column(c) for c in cols]
        nulls = columns[0].null_count
        if len(cols) > 1 and any(c.null_count for c in columns):
            f.indexes[cols] = None  # NULLs inside a packed key would break the order
        elif f.mapped:
            codes = _mapped_codes(f, cols, [c.slice(nulls) for c in columns])
            f.indexes[cols] = None if codes is None else (nulls, codes)
        else:
            f.indexes[cols] = (nulls, _encode([c.slice(nulls) for c in columns]))
            extra = f.indexes[cols][1].nbytes
            with _lock:
                f.size += extra
                if f.counted:
                    _grow(extra)
    return f.indexes[cols]


def _mapped_codes(f: _File, cols: tuple[str, ...], columns: list) -> np.ndarray | None:
    """_index's sorted key codes for a mapped file: the mapped column itself where it is its own
    code (one integer-like column), else computed a slice at a time into a mapped file of their
    own. None for keys coded as Python objects (strings): such a file is searched by query."""
    if any(not (_int_like(c.type) or pa.types.is_floating(c.type) or pa.types.is_boolean(c.type))
           for c in columns):
        return None
    if len(columns) == 1:
        codes = _encode(columns)
        if not codes.flags.owndata:  # a view of the mapped column
            return codes
    step = 1 << 22
    return mapped_columns.spill(f.path, "codes-" + "-".join(cols), (
        _encode([c.slice(start, step) for c in columns]) for start in range(0, len(columns[0]), step)))


def encode_keys(keys: pa.Table, cols: list[str], schema: pa.Schema) -> tuple[np.ndarray, bool]:
    """The distinct wanted keys, encoded and sorted like the files, and whether NULL is wanted."""
    columns = [keys.column(c).cast(schema.field(c).type) for c in cols]
    want_null = False
    if any(c.null_count for c in columns):
        nullmask = None
        for c in columns:
            m = pc.is_null(c)
            nullmask = m if nullmask is None else pc.or_(nullmask, m)
        want_null = bool(pc.any(nullmask).as_py())
        keep = pc.invert(nullmask)
        columns = [c.filter(keep) for c in columns]
    if len(columns) == 1 and _int_like(columns[0].type):
        codes = columns[0].to_numpy(zero_copy_only=False)
        if len(codes) > 1 and not (codes[1:] > codes[:-1]).all():  # not already sorted and distinct
            codes = sort_values(codes)
            codes = codes[np.concatenate(([True], codes[1:] != codes[:-1]))]
        return codes, want_null
    if len(columns) == 1 and not (pa.types.is_string(columns[0].type) or pa.types.is_large_string(columns[0].type)):
        return np.sort(pc.unique(columns[0]).to_numpy(zero_copy_only=False)), want_null
    codes = _encode(columns)
    if codes.dtype == object:
        return np.unique(codes), want_null
    codes = sort_values(codes)  # a sort and a mask: several times faster than np.unique's hashing
    return codes[np.concatenate(([True], codes[1:] != codes[:-1]))] if len(codes) else codes, want_null


def rows_matching(path: str, cols: list[str], wanted: np.ndarray, want_null: bool,
                  unique: bool = False, found: np.ndarray | None = None,
                  columns: list[str] | None = None) -> pa.Table | None:
    """Rows of one sorted file whose key columns `cols` equal a wanted key (None: cannot search).
    With `unique` (cols are the file's whole primary key) each key matches at most one row, and
    `found` (a boolean array over `wanted`) gets the wanted keys this file holds set to True."""
    f = _file(path)
    idx = _index(f, tuple(cols))
    if idx is None:
        return None
    nulls, keys = idx
    sparse = _sparse(f, tuple(cols), keys)
    parts = []
    if want_null and nulls:
        parts.append(np.arange(nulls))
    if len(wanted) and len(keys) and unique:
        pos, hit = _find_unique(f, tuple(cols), keys, wanted, in_order=True)
        pos = pos[hit]
        if found is not None:
            found |= hit
        if len(pos):
            parts.append(pos + nulls)
    elif len(wanted) and len(keys):
        lo = _search(keys, wanted, sparse=sparse)
        hi = _search(keys, wanted, "right", sparse=sparse)
        hit = hi > lo
        lo, hi = lo[hit], hi[hit]
        if len(lo):
            lengths = hi - lo
            starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
            parts.append(starts + np.arange(lengths.sum()) + nulls)
    table = f.table.select(columns) if columns is not None else f.table
    if not parts:
        return table.slice(0, 0)
    return table.take(pa.array(np.concatenate(parts)))


def _sorted_by(path: str, col: str):
    """One file sorted by `col` (its first key column) and a way to search it: (the file, its rows
    with a NULL `col` at the start, the encoded sorted values of the others, a function coding a
    value of `col` for np.searchsorted), or None when the column cannot be searched."""
    f = _file(path)
    t = f.table.schema.field(col).type
    if not _searchable(t):
        return None
    idx = _index(f, (col,))
    if idx is None:
        return None
    nulls, keys = idx
    return f, nulls, keys, lambda value: _encode([pa.array([value], t)])[0]


def rows_in_range(path: str, col: str, lo, hi) -> pa.Table | None:
    """The rows of one file sorted by `col` (its first key column) whose `col` lies in [lo, hi]
    (None: unbounded on that side; NULLs never), by two binary searches; None when the column
    cannot be searched."""
    found = _sorted_by(path, col)
    if found is None:
        return None
    f, nulls, keys, code = found
    start = 0 if lo is None else int(np.searchsorted(keys, code(lo), "left"))
    end = len(keys) if hi is None else int(np.searchsorted(keys, code(hi), "right"))
    return f.table.slice(nulls + start, max(0, end - start))


def rows_from(path: str, col: str, value, count: int, descending: bool):
    """Up to `count` rows of one file sorted by `col` (its first key column), starting at the first
    row whose `col` is at least `value` and going up (or, `descending`, at the last one at most
    `value` and going down), NULLs never: (rows, whether the file has no more rows that way), or
    None when the column cannot be searched."""
    found = _sorted_by(path, col)
    if found is None:
        return None
    f, nulls, keys, encode = found
    code = encode(value)
    if descending:
        end = int(np.searchsorted(keys, code, "right"))
        start = max(0, end - count)
        exhausted = start == 0
    else:
        start = int(np.searchsorted(keys, code, "left"))
        end = min(len(keys), start + count)
        exhausted = end >= len(keys)
    return f.table.slice(nulls + start, end - start), exhausted


def positions(path: str, cols: list[str], needles: np.ndarray, in_order: bool = False):
    """Where each needle (key codes, in any order, repeats allowed; `in_order`: sorted) sits in one
    sorted file whose primary key is `cols`: (the file's rows, row positions, found mask); None
    when the file's key cannot be searched."""
    f = _file(path)
    idx = _index(f, tuple(cols))
    if idx is None:
        return None
    nulls, keys = idx
    if not len(keys) or not len(needles):
        return f.table, np.zeros(len(needles), np.int64), np.zeros(len(needles), bool)
    pos, hit = _find_unique(f, tuple(cols), keys, needles, in_order=in_order)
    return f.table, pos + nulls, hit


def build_indexes(path: str, cols: list[str], like: str | None = None) -> None:
    """Build a file's key indexes for lookups by `cols` now, so that the first step to look a key
    up in it does not pay for them: a merged file's on the merging thread (the kinds its size
    calls for); with `like`, a step's cached file on the indexing thread, only the kinds that
    lookups built for the cached file `like` (its table's previous file), none if they built none."""
    cols = tuple(cols)
    if like is not None:
        with _lock:
            model, f = _cache.get(like), _cache.get(path)
        if model is None or f is None or cols not in model.indexes:
            return
    else:
        f = _file(path)
    idx = _index(f, cols)
    if idx is None or not len(idx[1]):
        return
    keys = idx[1]
    if like is not None:
        kinds = [k for k in ("dense", "sparse", "filter") if (k,) + cols in model.indexes]
    else:
        kinds = ["dense"] if _dense(f, cols, keys) is not None else \
            ["sparse"] if len(keys) >= TUNING.sparse_index_min_rows else ["filter"]
    if "dense" in kinds:
        _dense(f, cols, keys)
    if "sparse" in kinds:
        _sparse(f, cols, keys)
    if "filter" in kinds and keys.dtype.kind in "iu":
        _filter(f, cols, keys)


def has_tombstones(path: str, column: str) -> bool:
    """Whether the boolean column `column` of a file (a state file's `_del`) is ever true: a lookup
    into a file without tombstones need not read that column."""
    f = _file(path)
    name = ("any", column)
    if name not in f.indexes:
        f.indexes[name] = bool(pc.any(f.table.column(column)).as_py())
    return f.indexes[name]


def _find_unique(f: _File, cols: tuple[str, ...], keys: np.ndarray, needles: np.ndarray, in_order: bool):
    """(position of each needle among the file's distinct sorted keys, whether it is there), by the
    dense index where the file has one, else by binary search (`in_order`: needles are sorted)."""
    dense = _dense(f, cols, keys)
    hit = np.zeros(len(needles), bool)
    if dense is not None and needles.dtype.kind == "i":
        low, where = dense
        offset = needles.astype(np.int64) - low
        if where is None:  # keys without gaps: a key's row is its offset
            inside = (offset >= 0) & (offset < len(keys))
            return np.where(inside, offset, 0), inside
        inside = (offset >= 0) & (offset < len(where))
        pos = np.zeros(len(needles), np.int64)
        pos[inside] = where[offset[inside]]
        hit = pos >= 0
        hit &= inside
        pos[~hit] = 0
        return pos, hit
    if len(needles) >= TUNING.filter_min_needles and len(keys) < TUNING.sparse_index_min_rows \
            and keys.dtype.kind in "iu" and needles.dtype.kind in "iu":
        # many needles, a small file: most needles are not in it; search only those its filter admits
        admits = _filter(f, cols, keys)
        maybe = admits[_slot(needles, len(admits))]
        pos = np.zeros(len(needles), np.int64)
        pos[maybe], hit[maybe] = _search_all(f, cols, keys, needles[maybe], in_order)
        return pos, hit
    return _search_all(f, cols, keys, needles, in_order)


def _search_all(f: _File, cols: tuple[str, ...], keys: np.ndarray, needles: np.ndarray, in_order: bool):
    if in_order:
        pos = _search(keys, needles, sparse=_sparse(f, cols, keys))
    else:
        order = np.argsort(needles)  # searches in key order touch the file's keys in order: twice as fast
        pos = np.empty(len(needles), np.int64)
        pos[order] = _search(keys, needles[order], sparse=_sparse(f, cols, keys))
    hit = np.zeros(len(needles), bool)
    inside = pos < len(keys)
    hit[inside] = keys[pos[inside]] == needles[inside]
    return pos, hit


def _slot(values: np.ndarray, slots: int) -> np.ndarray:
    """A slot in a filter of `slots` (a power of two) entries for each integer key: the top bits
    of a multiplicative hash."""
    shift = np.uint64(64 - (slots.bit_length() - 1))
    return ((values.astype(np.int64).view(np.uint64) * _MIX) >> shift).astype(np.intp)


def _filter(f: _File, cols: tuple[str, ...], keys: np.ndarray) -> np.ndarray:
    """A one-hash Bloom filter of a file's integer keys, eight slots per key: a key whose slot is
    False is not in the file (about one absent key in nine passes anyway)."""
    name = ("filter",) + cols
    if name not in f.indexes:
        slots = 1 << max(10, (8 * len(keys) - 1).bit_length())
        admits = np.zeros(slots, bool)
        admits[_slot(keys, slots)] = True
        with _lock:
            f.size += admits.nbytes
            if f.counted:
                _grow(admits.nbytes)
        f.indexes[name] = admits
    return f.indexes[name]


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


def _dense(f: _File, cols: tuple[str, ...], keys: np.ndarray):
    """For a file of distinct integer keys that fill at least half of their range: (lowest key, the
    row of each key value from it, -1 where absent). A lookup is then one gather per key instead
    of a binary search (a fact table's dense ids, a dimension's keys); keys without gaps need not
    even that (lowest key, None): a key's row is its offset. None for other files."""
    name = ("dense",) + cols
    if name not in f.indexes:
        where = None
        if len(keys) >= TUNING.dense_index_min_rows and keys.dtype.kind == "i":
            low, span = int(keys[0]), int(keys[-1]) - int(keys[0]) + 1
            distinct = span <= 2 * len(keys) and bool((keys[1:] > keys[:-1]).all())
            if distinct and span == len(keys):
                where = (low, None)
            elif distinct and not f.mapped:  # (a mapped file's keys are searched: no map in memory)
                where = np.full(span, -1, np.int32 if len(keys) < (1 << 31) else np.int64)
                where[keys - low] = np.arange(len(keys), dtype=where.dtype)
                with _lock:
                    f.size += where.nbytes
                    if f.counted:
                        _grow(where.nbytes)
                where = (low, where)
        f.indexes[name] = where
    return f.indexes[name]



def _sparse(f: _File, cols: tuple[str, ...], keys: np.ndarray) -> np.ndarray | None:
    """Every `sparse_index_stride`-th key of a large file, kept with its index (a strided view would
    be copied, one cache miss per entry, by every search)."""
    if len(keys) < TUNING.sparse_index_min_rows or keys.dtype == object:
        return None
    name = ("sparse",) + cols
    if name not in f.indexes:
        f.indexes[name] = np.ascontiguousarray(keys[::TUNING.sparse_index_stride])
    return f.indexes[name]




def _search(keys: np.ndarray, wanted: np.ndarray, side: str = "left", sparse: np.ndarray | None = None) -> np.ndarray:
    """np.searchsorted(keys, wanted) for sorted `wanted`: when `keys` is far larger than the cache,
    a sparse index (every 512th key by default) first narrows each search to one block, then a branchless
    binary search runs in all blocks at once, each touching a few nearby cache lines instead of
    ~log2(n) scattered ones."""
    n = len(keys)
    if n < TUNING.sparse_index_min_rows or len(wanted) * 16 > n or keys.dtype == object:
        return np.searchsorted(keys, wanted, side=side)
    below = np.less if side == "left" else np.less_equal  # keys[i] before the answer
    stride = TUNING.sparse_index_stride
    block = np.searchsorted(sparse if sparse is not None else keys[::stride], wanted, side=side) - 1
    # invariant: keys[base] is before the answer, which lies in (base, base + size]
    base = block * stride
    size = stride
    while size > 1:
        half = size >> 1
        cand = base + half
        ok = below(keys[np.minimum(cand, n - 1)], wanted) & (cand < n)
        base = np.where(ok, cand, base)
        size -= half
    out = base + 1
    out[block < 0] = 0
    return out


def clear() -> None:
    global _bytes
    with _lock:
        _cache.clear()
        _unions.clear()
        _holders.clear()
        _holder_locks.clear()
        _merged_from.clear()
        _bytes = 0
    for path in mapped_columns.mapped_files():
        mapped_columns.unmap(path)
