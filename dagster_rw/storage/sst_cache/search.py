"""Lookups in one sorted file: rows by wanted keys, by a range of the first key column, from a
value on, and the positions of key codes, each by binary search (or a dense index's gather)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..key_codes import _encode, _int_like, _searchable, is_small_int
from ..sorting import ascending, sort_values
from ..tuning import TUNING
from .files import _File, _file
from .file_index import _dense, _filter, _index, _slot, _sparse


def usable_prefix(schema: pa.Schema, on: list[str]) -> list[str]:
    """The key columns a binary search can use: both of a two-small-integer key, else the first."""
    if len(on) >= 2 and all(is_small_int(schema.field(c).type) for c in on[:2]):
        return on[:2]
    return on[:1] if _searchable(schema.field(on[0]).type) else []


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
        if len(codes) > 1 and not ascending(codes):  # not already sorted and distinct
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
