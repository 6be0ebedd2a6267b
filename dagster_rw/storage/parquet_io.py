"""Writing a state or change-log file as Parquet: what a step, a merge and a Spark task write.

Imports only pyarrow and numpy, so Spark executors can run it with what a Spark runtime has.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import plain_parquet
from .tuning import TUNING

EPOCH = "_epoch"  # a state row's step (its epoch): the newest version of a key wins


def write_parquet(table: pa.Table, path: str, keys: list[str] | tuple = ()) -> None:
    """Write a step's or a merge's file. A column without NULLs is written as REQUIRED (no
    definition levels; read_parquet restores the nullable field). Strings are dictionary-encoded.

    Files under _COMPACT_MIN_ROWS rows (a step's files, small merges: written on a step's path and
    soon merged away) are written for speed, as RocksDB leaves its first levels uncompressed: by
    plain_parquet where it handles every column's type (values as Arrow holds them, PLAIN,
    uncompressed; a column of one value or of a few small integers as a dictionary), else by
    pyarrow with the first sort key delta-encoded and the other columns PLAIN; statistics for the
    sort `keys` only (what readers prune row groups by). Measured at 50M rows in one process, a
    FLUSH's Parquet encoding took 15.5 ms of CPU with pyarrow and 7.5 ms with plain_parquet, for
    ~1.3x the bytes (the sort keys no longer delta-encoded).
    Larger files (merges, off the step's path, kept long) are compact: integer-like columns
    delta-encoded (bit-packed differences: sorted keys and small values take a fraction of their
    plain size), snappy."""
    table = _required_where_no_nulls(table)
    if table.num_rows < _COMPACT_MIN_ROWS:
        with open(path, "wb") as f:
            f.writelines(_step_file(table, keys))
        return
    delta = {f.name: "DELTA_BINARY_PACKED" for f in table.schema if pa.types.is_integer(f.type)
             or pa.types.is_date32(f.type) or pa.types.is_timestamp(f.type)}
    pq.write_table(table, path, compression="snappy", column_encoding=delta, use_dictionary=_strings(table))


def parquet_bytes(table: pa.Table, keys: list[str] | tuple = ()) -> bytes:
    """A step file's bytes, as write_parquet writes a table of fewer than _COMPACT_MIN_ROWS rows:
    for a file that goes into a commit's pack (storage.pack) without a file of its own first."""
    return b"".join(_step_file(_required_where_no_nulls(table), keys))


def _required_where_no_nulls(table: pa.Table) -> pa.Table:
    fields = [f.with_nullable(table.column(i).null_count > 0) if f.nullable else f
              for i, f in enumerate(table.schema)]
    if fields != list(table.schema):
        table = pa.Table.from_arrays(table.columns, schema=pa.schema(fields, table.schema.metadata))
    return table


def _strings(table: pa.Table) -> list[str]:
    return [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_binary(f.type) or pa.types.is_dictionary(f.type)]


def _step_file(table: pa.Table, keys) -> list:
    """A small file's bytes, in pieces: by plain_parquet where it handles every column, else by
    pyarrow (see write_parquet)."""
    if TUNING.plain_parquet_writer:
        chunks = plain_parquet.encode(table, [k for k in keys if k in table.schema.names])
        if chunks is not None:
            return chunks
    # a step file's `_epoch` holds one value (a merge's, a few): as a dictionary it takes no space
    # the first sort key, in order, delta-encodes to a few bits a row (~1.5 ms of fsync less at 50M rows)
    first = keys[0] if keys and keys[0] in table.schema.names else None
    enc = {first: "DELTA_BINARY_PACKED"} if first and pa.types.is_integer(table.schema.field(first).type) else None
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none", use_dictionary=_strings(table) + [
                       c for c in (EPOCH,) if c in table.schema.names] + _few_values(table, first),
                   column_encoding=enc,
                   write_statistics=[k for k in keys if k in table.schema.names], write_batch_size=1 << 16)
    return [sink.getvalue()]


_COMPACT_MIN_ROWS = 1 << 20


def _few_values(table: pa.Table, skip: str | None) -> list[str]:
    """The 64-bit integer columns of a step file whose values span at most 256 (a change log's
    weights, a count table's count changes: mostly -1 and +1), but `skip`. Dictionary-encoded,
    such a column takes a bit or two a row instead of eight bytes, at no cost in encoding time:
    a 50M-row benchmark epoch writes and syncs ~1.6 MB less (of ~5.4 MB)."""
    out = []
    for f in table.schema:
        if f.name != skip and f.name != EPOCH and pa.types.is_int64(f.type) and table.num_rows > 1:
            lo, hi = pc.min_max(table.column(f.name)).values()
            if lo.is_valid and hi.as_py() - lo.as_py() <= 256:
                out.append(f.name)
    return out


