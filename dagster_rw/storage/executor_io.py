"""What Spark tasks run to read and write warehouse files themselves (inside `mapInArrow`).

A Spark step never routes state or change files through the driver: the driver hands Spark the
files' keys, tasks read them from the warehouse (`read_files`), and each task writes the sorted
rows of its key range as a file of its own (`write_files`), sending back only the file's name,
key range and row count for the driver's commit. This module needs nothing but pyarrow and numpy
on the executors; the session ships dagster_rw to them (engine.spark).
"""
from __future__ import annotations

import datetime
import decimal
import json
import os
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .sorting import nulls_first_order, sorted_for_file
from .parquet_io import write_parquet
from .warehouse_files import WarehouseFiles

# what a writing task sends back per file
WRITTEN = pa.schema([("part", pa.int64()), ("key", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                     ("key_min", pa.string()), ("key_max", pa.string())])


def read_files(files: WarehouseFiles, schema_ipc: bytes, tag: str | None, keys: list[str], batches,
               packed: dict | None = None):
    """The rows of the files `keys[i]` for the places `i` in `batches` (spark.range's `id`), in
    `schema`, one row group at a time; with `tag`, a column of that name holds the file's place.
    `packed`: files inside a pack, by key: [pack key, offset, length] (their range is read)."""
    from .sst_cache import restore_types

    schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
    wanted = pa.schema([f for f in schema if f.name != tag]) if tag else schema
    for batch in batches:
        for i in batch.column(0).to_pylist():
            key = keys[i]
            where = (packed or {}).get(key)
            reader = pq.ParquetFile(files.open_range(*where) if where else files.open_input(key))
            present = [n for n in wanted.names if n in reader.schema_arrow.names]
            for g in range(reader.num_row_groups):
                part = restore_types(reader.read_row_group(g, columns=present))
                for f in wanted:  # a column the file lacks (an older batch's): NULLs
                    if f.name not in present:
                        part = part.append_column(f.name, pa.nulls(part.num_rows, f.type))
                part = part.select(wanted.names).cast(wanted)
                if tag:
                    part = part.append_column(tag, pa.array([i] * part.num_rows, schema.field(tag).type))
                yield from part.select(schema.names).to_batches()


def write_files(files: WarehouseFiles, schema_ipc: bytes, key_dir: str, sort_keys: list[str],
                range_keys: list[str], epoch_from: int, epoch_to: int, batches, sort: bool = False):
    """Write this task's rows (one key range of a range partitioning; sorted by `sort_keys`, or,
    with `sort`, sorted here) as one file under `key_dir`; yield what the commit needs to know of
    it (nothing for no rows)."""
    schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
    parts = list(batches)
    rows = sum(b.num_rows for b in parts)
    if not rows:
        return
    table = pa.Table.from_batches(parts).select(schema.names).cast(schema)
    if sort:  # numpy's and Arrow's sorts, several times faster than Spark's sort of the same rows
        table = sorted_for_file(table, sort_keys)
    yield from _write_one(files, table, key_dir, sort_keys, range_keys, epoch_from, epoch_to)


def _write_one(files: WarehouseFiles, table: pa.Table, key_dir: str, sort_keys: list[str], range_keys: list[str],
               epoch_from: int, epoch_to: int):
    """Write `table` (sorted by `sort_keys`) as one file under `key_dir`; yield what the commit
    needs to know of it."""
    from pyspark import TaskContext

    rows = table.num_rows
    key = f"{key_dir}/{epoch_from:020d}-{epoch_to:020d}-{uuid.uuid4().hex[:12]}.parquet"
    local = files.scratch_file()
    write_parquet(table, local, sort_keys)
    size = os.path.getsize(local)
    files.put_file(local, key)
    first, last = table.slice(0, 1), table.slice(rows - 1, 1)
    context = TaskContext.get()
    yield pa.RecordBatch.from_pylist([{
        "part": context.partitionId() if context else 0, "key": key, "rows": rows, "bytes": size,
        "key_min": json.dumps([_json_value(first.column(k)[0].as_py()) for k in range_keys]),
        "key_max": json.dumps([_json_value(last.column(k)[0].as_py()) for k in range_keys]),
    }], schema=WRITTEN)


def _json_value(v):
    """A key value as JSON holds it, for the manifest's key ranges: numbers, strings and booleans
    as they are, dates and times as ISO text, decimals as text, bytes as hex."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (datetime.date, datetime.datetime, datetime.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def write_first_load(files: WarehouseFiles, outputs: list, pk: list[str], epoch_from: int, epoch_to: int,
                     batches):
    """A table's first load, for this task's key range of staged DML rows (with `_op`, `_batch`
    and `_seq`): per key the last operation wins, a deletion leaves nothing; the rows left, sorted
    by key, are written once per output (schema, folder, values of the columns the rows lack):
    the table's state file and its change-log file. Yields the files for the commit."""
    parts = list(batches)
    if not sum(b.num_rows for b in parts):
        return
    rows = pa.Table.from_batches(parts)
    rows = rows.take(nulls_first_order(rows, pk + ["_batch", "_seq"]))
    n = rows.num_rows
    last = np.ones(n, bool)  # a row is its key's last operation when the next row has another key
    if n > 1:
        same = np.ones(n - 1, bool)
        for k in pk:
            col = rows.column(k)
            a, b = col.slice(0, n - 1), col.slice(1)
            eq = pc.fill_null(pc.equal(a, b), False)
            both_null = pc.and_(pc.is_null(a), pc.is_null(b))
            same &= np.asarray(pc.or_(eq, both_null))
        last[:-1] = ~same
    kept = rows.filter(pa.array(last & (rows.column("_op").to_numpy(zero_copy_only=False) == 1)))
    if not kept.num_rows:
        return
    for schema_ipc, key_dir, extra in outputs:
        schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        columns = [pa.array(np.full(kept.num_rows, extra[f.name]), f.type) if f.name in extra
                   else kept.column(f.name) for f in schema]
        yield from _write_one(files, pa.Table.from_arrays(columns, schema=schema), key_dir, pk, pk,
                              epoch_from, epoch_to)
