"""Order-preserving codes of key columns and hashes of keys: pure functions over Arrow columns and
numpy arrays (the decoded-file cache, storage.sst_cache, searches files by these codes; the sorts
built on them are storage.sorting)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def is_small_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) and t.bit_width <= 32


def _searchable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_date(t)
            or pa.types.is_timestamp(t) or pa.types.is_string(t) or pa.types.is_large_string(t))


def _encode(columns: list) -> np.ndarray:
    """One sortable numpy array for one column, or two small-integer columns packed into uint64."""
    if len(columns) == 1:
        col = columns[0]
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            return np.asarray(col.to_pylist(), dtype=object)
        return col.to_numpy(zero_copy_only=False)
    hi = _biased(columns[0]).astype(np.uint64)
    hi <<= np.uint64(32)
    hi |= _biased(columns[1])
    return hi


def _biased(column) -> np.ndarray:
    """A small-integer column's values plus 2**31, as uint32 (flipping the sign bit of an int32)."""
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype == np.uint32:  # (as before: beyond 2**31 such codes do not keep the order)
        return (values.astype(np.int64) + (1 << 31)).astype(np.uint64)
    if values.dtype != np.int32:
        values = values.astype(np.int32)
    return values.view(np.uint32) ^ np.uint32(1 << 31)


def _int_like(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)


def _int_codes(columns: list) -> np.ndarray | None:
    """Order-preserving integer codes for one integer-like column, or two small-integer columns
    packed into one uint64; None when they cannot be coded (other types, NULLs)."""
    if not columns or any(c.null_count for c in columns) or not all(_int_like(c.type) for c in columns):
        return None
    if len(columns) == 2 and not all(is_small_int(c.type) for c in columns):
        return None
    if len(columns) > 2:
        return None
    if len(columns) == 1:
        c = columns[0]
        if not pa.types.is_integer(c.type):
            c = c.cast(pa.int64() if c.type.bit_width == 64 else pa.int32())
        return c.to_numpy(zero_copy_only=False)
    return _encode(columns)


def decode_codes(codes: np.ndarray, types: list[pa.DataType]) -> list[pa.Array] | None:
    """The key columns (of `types`) that key_codes coded as `codes`, or None when their coding
    cannot be undone here (only signed integers and one-column integer codes are)."""
    if len(types) == 1 and pa.types.is_integer(types[0]):
        return [pa.array(codes).cast(types[0])]
    if len(types) == 2 and all(pa.types.is_signed_integer(t) and t.bit_width <= 32 for t in types):
        flip = np.uint32(1 << 31)
        high = ((codes >> np.uint64(32)).astype(np.uint32) ^ flip).view(np.int32)
        low = (codes.astype(np.uint32) ^ flip).view(np.int32)
        return [pa.array(high).cast(types[0]), pa.array(low).cast(types[1])]
    return None


def key_codes(table: pa.Table, keys: list[str]) -> np.ndarray | None:
    """Order-preserving numpy codes for the key columns of every row (one integer-like column, or
    two small-integer ones), or None when the key cannot be coded that way."""
    if not keys or len(keys) > 2:
        return None
    return _int_codes([table.column(k).combine_chunks() for k in keys])


_MIX = np.uint64(0x9E3779B97F4A7C15)


def key_hash(table: pa.Table, keys: list[str]) -> np.ndarray | None:
    """A 64-bit hash of the key columns of every row (integer-like columns without NULLs; None
    otherwise). Equal keys hash equal; unequal keys almost never do, so callers compare the rows
    of equal hashes before trusting a match."""
    if not keys:
        return None
    h = np.zeros(table.num_rows, np.uint64)
    for k in keys:
        c = table.column(k)
        if c.null_count or not (_int_like(c.type) or pa.types.is_boolean(c.type)):
            return None
        if not pa.types.is_integer(c.type):
            c = c.cast(pa.int8() if pa.types.is_boolean(c.type) else
                       pa.int64() if c.type.bit_width == 64 else pa.int32())
        v = c.to_numpy().astype(np.int64).view(np.uint64)
        h = (h ^ v) * _MIX
        h ^= h >> np.uint64(29)
    return h


def local_hash(table: pa.Table, keys: list[str]) -> np.ndarray | None:
    """key_hash for comparisons within `table` alone: string and binary columns (without NULLs)
    are hashed by their index in the column's own dictionary, so equal values hash equal inside
    this one table only. Never compare these hashes with another table's."""
    if not keys:
        return None
    coded, changed = [], False
    for k in keys:
        c = table.column(k)
        t = c.type
        if not c.null_count and (pa.types.is_string(t) or pa.types.is_large_string(t)
                                 or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            c = pc.dictionary_encode(c.combine_chunks()).indices
            changed = True
        coded.append(c)
    if not changed:
        return key_hash(table, keys)
    return key_hash(pa.table(coded, names=[f"k{i}" for i in range(len(coded))]), [f"k{i}" for i in range(len(coded))])
