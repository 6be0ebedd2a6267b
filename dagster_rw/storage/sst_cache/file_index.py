"""The indexes of one cached file, built on first use and counted in the cache's bytes: the sorted
key codes, a dense map by key value, a sparse sample of a large file's keys, a Bloom filter."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import mapped_columns
from ..key_codes import _encode, _int_like, _MIX
from ..tuning import TUNING
from .files import _File, _cache, _file, _grow, _lock


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
