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

The package's modules: `files` (the cache and its byte bound), `file_index` (one file's indexes),
`search` (lookups in one file) and `table_index` (indexes over a state table's files); key codes
are `storage.key_codes` and sorts `storage.sorting`. Callers reach all of them as `sst_cache.<name>`.
"""
from __future__ import annotations

from .. import mapped_columns
from ..key_codes import decode_codes, is_small_int, key_codes, key_hash, local_hash
from ..sorting import ascending, hash_order, order_codes, sort_indices, sort_values, sorted_for_file, sorted_order
from . import file_index, files, search, table_index  # noqa: F401 - their state: tests, after_fork
from .file_index import build_indexes, has_tombstones
from .files import (
    cached, conform, discard, is_mapped, put, read, read_parquet, replace, restore_types, set_limit, too_large,
    written,
)
from .search import encode_keys, positions, rows_from, rows_in_range, rows_matching, usable_prefix
from .table_index import newest_holders, note_merge, union_admits

__all__ = [
    "ascending", "build_indexes", "cached", "clear", "conform", "decode_codes", "discard", "encode_keys", "has_tombstones",
    "hash_order", "is_mapped", "is_small_int", "key_codes", "key_hash", "local_hash", "newest_holders",
    "note_merge", "order_codes", "positions", "put", "read", "read_parquet", "replace", "restore_types",
    "rows_from", "rows_in_range", "rows_matching", "set_limit", "sort_indices", "sort_values", "sorted_for_file",
    "sorted_order", "too_large", "union_admits", "usable_prefix", "written",
]


def clear() -> None:
    with files._lock:
        files._cache.clear()
        table_index._unions.clear()
        table_index._holders.clear()
        table_index._holder_locks.clear()
        table_index._merged_from.clear()
        files._bytes = 0
    for path in mapped_columns.mapped_files():
        mapped_columns.unmap(path)
