"""Large SST files as memory-mapped columns, for state larger than the decoded-file cache.

A file too large for the cache is decoded once, a row group at a time, into one raw file per Arrow
buffer (validity bitmap, values, string offsets and bytes) in a local folder, then mapped: the
result is an ordinary `pa.Table`, one chunk per column, whose buffers are the mappings, so every
lookup in storage.sst_cache works on it unchanged. A binary search touches the pages holding the
keys it probes and a `take` the pages holding the rows it takes; the operating system keeps the
pages in use in memory and drops the others under pressure, so a small epoch over a large state
costs what its lookups touch, not the size of the state.

The folder of a file is named by its path, size and modification time (SST files are immutable)
and lives under a folder of this process, removed at exit; folders left by processes that died
are removed by the next process to map a file.

Mapped: integers, floats, booleans, dates, times, timestamps, decimals, durations, month_day_nano
intervals, fixed-size binary and strings or binary up to 2 GB a column. A file with any other
column (nested types, INTERVAL stored as 12 raw bytes) is not mapped: it is read whole.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_BATCH_ROWS = 1 << 20  # rows decoded at a time while a file is converted


def estimated_bytes(path: str) -> int:
    """A Parquet file's size once decoded (the uncompressed size its footer records)."""
    meta = pq.ParquetFile(path).metadata
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "bits"
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return "var"
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 12:
        return None  # an INTERVAL as Parquet stores it: converted by the reader row by row
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t)
            or pa.types.is_fixed_size_binary(t) or t == pa.month_day_nano_interval()):
        return "fixed"
    return None


def mappable(schema: pa.Schema) -> bool:
    return all(_kind(f.type) is not None for f in schema)


class _Bits:
    """Appends bit-packed booleans (Arrow's little-endian bit order) to a file, carrying the bits
    of an unfinished byte to the next append."""

    def __init__(self, path: str):
        self.f = open(path, "wb")
        self.carry = np.zeros(0, bool)
        self.zeros = 0  # False values written (a validity bitmap's nulls)

    def add(self, bools: np.ndarray) -> None:
        self.zeros += int(len(bools) - np.count_nonzero(bools))
        bools = np.concatenate((self.carry, bools)) if len(self.carry) else bools
        whole = len(bools) // 8 * 8
        self.f.write(np.packbits(bools[:whole], bitorder="little").tobytes())
        self.carry = bools[whole:].copy()

    def close(self) -> None:
        if len(self.carry):
            self.f.write(np.packbits(self.carry, bitorder="little").tobytes())
        self.f.close()


def _bools(arr: pa.Array, buffer: int) -> np.ndarray:
    """The bits of one of `arr`'s bitmaps as booleans (all True for a validity without nulls)."""
    buf = arr.buffers()[buffer]
    if buf is None:
        return np.ones(len(arr), bool)
    bits = np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + len(arr)].astype(bool)


class _ColumnWriter:
    def __init__(self, folder: str, i: int, t: pa.DataType):
        self.t, self.kind, self.rows = t, _kind(t), 0
        self.valid = _Bits(os.path.join(folder, f"{i}.valid"))
        if self.kind == "bits":
            self.values = _Bits(os.path.join(folder, f"{i}.values"))
        else:
            self.values = open(os.path.join(folder, f"{i}.values"), "wb")
        if self.kind == "var":
            self.offsets = open(os.path.join(folder, f"{i}.offsets"), "wb")
            self.offsets.write(np.zeros(1, np.int32).tobytes())
            self.data_bytes = 0

    def add(self, arr: pa.Array) -> None:
        n, off = len(arr), arr.offset
        self.valid.add(_bools(arr, 0))
        if self.kind == "bits":
            self.values.add(_bools(arr, 1))
        elif self.kind == "fixed":
            width = self.t.byte_width
            self.values.write(memoryview(arr.buffers()[1])[off * width:(off + n) * width])
        else:
            offsets = np.frombuffer(arr.buffers()[1], np.int32)[off:off + n + 1].astype(np.int64)
            start, end = int(offsets[0]), int(offsets[-1])
            if self.data_bytes + end - start >= 1 << 31:
                raise OverflowError("a string column of more than 2 GB")
            self.offsets.write((offsets[1:] - start + self.data_bytes).astype(np.int32).tobytes())
            if arr.buffers()[2] is not None:
                self.values.write(memoryview(arr.buffers()[2])[start:end])
            self.data_bytes += end - start
        self.rows += n

    def close(self) -> int:
        """Finish the files; returns the column's null count."""
        self.valid.close()
        self.values.close()
        if self.kind == "var":
            self.offsets.close()
        return self.valid.zeros


def _buffer(path: str) -> pa.Buffer:
    if not os.path.getsize(path):
        return pa.py_buffer(b"")
    return pa.py_buffer(np.memmap(path, np.uint8, mode="r"))


def _convert(path: str, folder: str) -> None:
    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    writers = [_ColumnWriter(folder, i, f.type) for i, f in enumerate(schema)]
    for batch in pf.iter_batches(batch_size=_BATCH_ROWS, use_threads=True):
        for w, column in zip(writers, batch.columns):
            w.add(column)
    nulls = [w.close() for w in writers]
    with open(os.path.join(folder, "nulls"), "w") as f:
        f.write(" ".join(map(str, [pf.metadata.num_rows] + nulls)))
    pq.write_metadata(schema, os.path.join(folder, "schema"))  # the Arrow schema, as pyarrow keeps it


def _open(folder: str) -> pa.Table:
    schema = pq.read_schema(os.path.join(folder, "schema"))
    with open(os.path.join(folder, "nulls")) as f:
        rows, *nulls = map(int, f.read().split())
    columns = []
    for i, (field, null_count) in enumerate(zip(schema, nulls)):
        valid = _buffer(os.path.join(folder, f"{i}.valid")) if null_count else None
        values = _buffer(os.path.join(folder, f"{i}.values"))
        buffers = [valid, _buffer(os.path.join(folder, f"{i}.offsets")), values] if _kind(field.type) == "var" \
            else [valid, values]
        columns.append(pa.Array.from_buffers(field.type, rows, buffers, null_count))
    fields = [f.with_nullable(True) for f in schema]  # as read_parquet gives them
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, schema.metadata))


def map_file(path: str) -> pa.Table | None:
    """`path`'s rows as a table over mapped column files (converted on first use), or None when
    its columns cannot be mapped."""
    if not mappable(pq.read_schema(path)):
        return None
    st = os.stat(path)
    name = hashlib.sha1(f"{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:24]
    folder = os.path.join(_root(), name)
    with _locks_lock:
        lock = _locks.setdefault(folder, threading.Lock())
    with lock:
        if not os.path.exists(os.path.join(folder, "schema")):
            _sweep()
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            try:
                _convert(path, folder)
            except OverflowError:
                shutil.rmtree(folder, ignore_errors=True)
                return None
        with _locks_lock:
            _folders[path] = folder
        return _open(folder)


def mapped_files() -> list[str]:
    """The files this process has mapped (and not removed since)."""
    with _locks_lock:
        return list(_folders)


def spill(path: str, name: str, chunks) -> np.ndarray:
    """Arrays derived from the mapped file `path` (an index too large to keep in memory), written
    chunk by chunk beside its columns and mapped back as one array."""
    with _locks_lock:
        folder = _folders[path]
    target = os.path.join(folder, f"{name}.npy")
    if not os.path.exists(target):
        tmp, dtype, rows = f"{target}.tmp", None, 0
        with open(tmp, "wb") as out:
            for chunk in chunks:
                dtype = chunk.dtype
                rows += len(chunk)
                out.write(np.ascontiguousarray(chunk).tobytes())
        with open(f"{target}.dtype", "w") as out:
            out.write(np.dtype(dtype if dtype is not None else np.int64).str)
        os.replace(tmp, target)
    with open(f"{target}.dtype") as f:
        dtype = np.dtype(f.read())
    if not os.path.getsize(target):
        return np.zeros(0, dtype)
    return np.memmap(target, dtype, mode="r")


def unmap(path: str) -> None:
    """Remove the column files of `path` (a table over them stays readable while referenced: a
    mapping outlives its file's name)."""
    with _locks_lock:
        folder = _folders.pop(path, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep() -> None:
    """Remove the column files of mapped files that no longer exist (merged away and deleted)."""
    with _locks_lock:
        gone = [p for p in _folders if not os.path.exists(p)]
    for p in gone:
        unmap(p)


_root_folder: str | None = None
_locks: dict[str, threading.Lock] = {}
_folders: dict[str, str] = {}  # path of a mapped file -> its folder
_locks_lock = threading.Lock()
_PREFIX = "dagster_rw_mapped_"


def _root() -> str:
    """This process's folder of mapped files (DAGSTER_RW_MAP_DIR or the temporary folder), made on
    first use, after removing the folders of processes that no longer run."""
    global _root_folder
    with _locks_lock:
        if _root_folder is None or not os.path.isdir(_root_folder):
            parent = os.environ.get("DAGSTER_RW_MAP_DIR") or tempfile.gettempdir()
            os.makedirs(parent, exist_ok=True)
            for name in os.listdir(parent):
                if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit() \
                        and not _alive(int(name[len(_PREFIX):])):
                    shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            _root_folder = os.path.join(parent, f"{_PREFIX}{os.getpid()}")
            os.makedirs(_root_folder, exist_ok=True)
            atexit.register(_remove_at_exit, _root_folder, os.getpid())
        return _root_folder


def _remove_at_exit(folder: str, pid: int) -> None:
    """Remove this process's folder at exit (not a forked child's exit: the folder is its parent's)."""
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
