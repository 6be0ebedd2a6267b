"""The byte-bounded cache of decoded files, one per process: a file's rows decoded once (or, past
_MAP_FRACTION of the cache, mapped from raw column files), the least recently used evicted."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import mapped_columns
from ..pack import ensure_copy


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
    ensure_copy(path)  # a packed file of this process whose copy is not written yet
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
        if f is None:
            ensure_copy(path)
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
