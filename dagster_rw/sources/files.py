"""The files a file source reads (under a folder, or in an S3 bucket): listing them, cutting them
into pieces, and reading a piece.

A piece of a text file (JSON lines, CSV) is a byte range [start, end): it holds the records (lines)
whose first byte lies in it, so a line that crosses `end` belongs whole to the piece it starts in
and pieces cut anywhere read every record exactly once. A piece of a Parquet file is a range of its
row groups. A gzip-compressed file (`.gz`, `.gzip`) is one piece, decompressed whole.

Reading a piece is a pure function of (file, start, end) of a file that does not change, so a piece
read again after a crash, or by a Spark task instead of this process, gives the same records. This
module imports nothing of dagster_rw: Spark ships its functions by value to the workers (local or
behind Spark Connect), which need only pyarrow (and boto3 for S3).

`loc` is a plain dict: {"kind": "posix", "root": folder} or {"kind": "s3", "bucket", "endpoint",
"region", "access", "secret"} (empty values: boto3 finds them the usual way).
"""
from __future__ import annotations

import gzip
import io
import os
import re
from functools import lru_cache

import pyarrow as pa

PIECE_SCHEMA = pa.schema([("file", pa.int64()), ("start", pa.int64()), ("data", pa.binary())])
_CHUNK = 1 << 16  # read ahead this much at a time to finish a line that crosses a piece's end


def is_compressed(path: str) -> bool:
    return path.endswith((".gz", ".gzip"))


@lru_cache(maxsize=64)
def _glob(pattern: str) -> re.Pattern:
    """A Unix glob as a regular expression over a whole path: `*` and `?` stop at '/', `**`
    crosses folders, `[...]` is a class (`[!...]` its complement)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = i + 1 + (pattern[i + 1:i + 2] == "!")
            j += pattern[j:j + 1] == "]"  # a ']' first is part of the class
            end = pattern.find("]", j)
            if end < 0:
                out.append(re.escape(ch))
                i += 1
                continue
            body = pattern[i + 1:end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def matches(path: str, pattern: str | None) -> bool:
    return not pattern or _glob(pattern).match(path) is not None


def _hidden(path: str) -> bool:
    """Files whose name starts with '.' or '_' are being written (or are metadata): never listed."""
    return os.path.basename(path).startswith((".", "_"))


def _s3(loc: dict):
    import boto3
    from botocore.config import Config

    key = (loc.get("endpoint"), loc.get("region"), loc.get("access"), loc.get("secret"), os.getpid())
    # one client per process and location, kept in the module's globals as looked up when called
    # (a module-level cache would be pickled with the functions Spark ships)
    clients = globals().setdefault("_S3_CLIENTS", {})
    client = clients.get(key)
    if client is None:
        client = boto3.client(
            "s3", endpoint_url=loc.get("endpoint") or None, region_name=loc.get("region") or None,
            aws_access_key_id=loc.get("access") or None, aws_secret_access_key=loc.get("secret") or None,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60))
        client = clients.setdefault(key, client)
    return client


def describe(loc: dict) -> str:
    return f"s3://{loc['bucket']}" if loc["kind"] == "s3" else loc["root"]


def list_files(loc: dict, pattern: str | None) -> list[tuple[str, int]]:
    """(path, size) of every file matching the glob `pattern` (against the path relative to the
    root, or the object key; no pattern: every file), sorted by path. Hidden files ('.' or '_'
    first) are left out."""
    out = []
    if loc["kind"] == "s3":
        prefix = pattern or ""
        for i, ch in enumerate(prefix):
            if ch in "*?[":
                prefix = prefix[:i]
                break
        pages = _s3(loc).get_paginator("list_objects_v2").paginate(Bucket=loc["bucket"], Prefix=prefix)
        for page in pages:
            for o in page.get("Contents", []):
                key = o["Key"]
                if key.endswith("/") or _hidden(key) or not matches(key, pattern):
                    continue
                out.append((key, int(o["Size"])))
    else:
        root = loc["root"]
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            for name in names:
                rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                if _hidden(rel) or not matches(rel, pattern):
                    continue
                out.append((rel, os.path.getsize(os.path.join(folder, name))))
    return sorted(out)


def read_range(loc: dict, path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file."""
    if end <= start:
        return b""
    if loc["kind"] == "s3":
        body = _s3(loc).get_object(Bucket=loc["bucket"], Key=path, Range=f"bytes={start}-{end - 1}")["Body"]
        return body.read()
    with open(os.path.join(loc["root"], path), "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _whole_text(loc: dict, path: str, size: int) -> bytes:
    data = read_range(loc, path, 0, size)
    return gzip.decompress(data) if is_compressed(path) else data


def first_line(loc: dict, path: str, size: int) -> bytes:
    """The file's first line (a CSV header), without its line end."""
    if is_compressed(path):
        data = _whole_text(loc, path, size)
    else:
        data, at = b"", 0
        while at < size and b"\n" not in data:
            more = read_range(loc, path, at, min(size, at + _CHUNK))
            data += more
            at += len(more)
    return data.split(b"\n", 1)[0].rstrip(b"\r")


def _skip_line(data: bytes, at: int) -> int:
    nl = data.find(b"\n", at)
    return len(data) if nl < 0 else nl + 1


def text_piece(loc: dict, path: str, size: int, start: int, end: int, header: bool) -> tuple[int, bytes]:
    """The records (lines) of a text file that start in [start, end): the offset of the first in
    the file (in the decompressed text for a compressed file) and their bytes. `header`: the
    file's first line is a header, not a record."""
    if is_compressed(path):
        data = _whole_text(loc, path, size)
        first = _skip_line(data, 0) if header else 0
        return first, data[first:]
    if end <= start:
        return start, b""
    lo = max(start - 1, 0)  # the byte before `start` tells whether a line starts at `start`
    data = read_range(loc, path, lo, end)
    at = lo + len(data)
    if data and not data.endswith(b"\n"):  # finish the line that crosses `end`
        tail = []
        while at < size:
            more = read_range(loc, path, at, min(size, at + _CHUNK))
            if not more:
                break
            at += len(more)
            nl = more.find(b"\n")
            if nl >= 0:
                tail.append(more[:nl + 1])
                break
            tail.append(more)
        data += b"".join(tail)
    if start == 0:
        first = _skip_line(data, 0) if header else 0
    else:
        first = _skip_line(data, 0)  # data[0] is the byte at start - 1
        if lo + first >= end:
            return start, b""
    return lo + first, data[first:]


class _RangeFile(io.RawIOBase):
    """A file on S3 read by ranges, for pyarrow's Parquet reader (it reads the footer, then the
    column chunks it needs)."""

    def __init__(self, loc: dict, path: str, size: int):
        self.loc, self.path, self.size, self.pos = loc, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        data = read_range(self.loc, self.path, self.pos, min(self.size, self.pos + len(buffer)))
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def parquet_file(loc: dict, path: str, size: int):
    import pyarrow.parquet as pq

    if loc["kind"] == "s3":
        return pq.ParquetFile(io.BufferedReader(_RangeFile(loc, path, size), buffer_size=1 << 20))
    return pq.ParquetFile(os.path.join(loc["root"], path))


def cut(loc: dict, encode: str, path: str, size: int, split_bytes: int) -> list[list[int]]:
    """The pieces of a file: byte ranges of at most `split_bytes` (text), ranges of row groups
    of about that many compressed bytes (Parquet); one piece for a compressed text file."""
    if encode == "parquet":
        meta = parquet_file(loc, path, size).metadata
        pieces, first, held = [], 0, 0
        for g in range(meta.num_row_groups):
            held += meta.row_group(g).total_byte_size
            if held >= split_bytes:
                pieces.append([first, g + 1])
                first, held = g + 1, 0
        if first < meta.num_row_groups:
            pieces.append([first, meta.num_row_groups])
        return pieces
    if size == 0:
        return []
    if is_compressed(path):
        return [[0, size]]
    return [[s, min(size, s + split_bytes)] for s in range(0, size, split_bytes)]


def parquet_piece(loc: dict, path: str, size: int, start: int, end: int | None,
                  columns: list[str]) -> tuple[int, pa.Table]:
    """Row groups [start, end) (None: to the last) of a Parquet file, the declared columns it has:
    the index in the file of the first row, and the rows."""
    f = parquet_file(loc, path, size)
    meta = f.metadata
    end = meta.num_row_groups if end is None else end
    present = [c for c in columns if c in f.schema_arrow.names]
    first = sum(meta.row_group(g).num_rows for g in range(start))
    if end <= start:
        return first, f.schema_arrow.empty_table().select(present)
    return first, f.read_row_groups(list(range(start, end)), columns=present)


def _gone(e: Exception) -> bool:
    """Whether reading failed because the file is no longer there."""
    if isinstance(e, FileNotFoundError):
        return True
    response = getattr(e, "response", None)  # botocore's ClientError
    return isinstance(response, dict) and response.get("Error", {}).get("Code") in ("NoSuchKey", "404")


def piece(loc: dict, encode: str, header: bool, columns: list[str], path: str, size: int, start: int,
          end: int | None):
    """One piece: the position of its first record and its records (bytes of text, or an Arrow
    table for Parquet); (start, None) when the file was removed before it was read."""
    try:
        if encode == "parquet":
            return parquet_piece(loc, path, size, start, end, columns)
        return text_piece(loc, path, size, start, size if end is None else end, header)
    except Exception as e:  # noqa: BLE001 - the file system and boto3 raise many kinds
        if _gone(e):
            return start, None
        raise


def read_piece(loc: dict, encode: str, header: bool, columns: list[str], file_id: int, path: str, size: int,
               start: int, end: int | None) -> pa.RecordBatch:
    """One piece as a row of PIECE_SCHEMA: the file's id, the position of its first record, and
    the records' bytes (text) or the rows as an Arrow IPC stream (Parquet); data NULL when the
    file was removed before it was read."""
    first, data = piece(loc, encode, header, columns, path, size, start, end)
    if isinstance(data, pa.Table):
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, data.schema) as w:
            w.write_table(data)
        data = sink.getvalue()
    return pa.record_batch([pa.array([file_id], pa.int64()), pa.array([first], pa.int64()),
                            pa.array([data], pa.binary())], schema=PIECE_SCHEMA)


def ipc_table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def read_on_spark(spark, loc: dict, encode: str, header: bool, columns: list[str],
                  pieces: list[tuple[int, str, int, int, int | None]]) -> pa.Table:
    """Read the pieces (file id, path, size, start, end) in parallel Spark tasks, one task per
    piece; each task reads the file store itself. Rows of PIECE_SCHEMA, in (file, start) order."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def read_batches(batches):
        for batch in batches:
            for row in batch.to_pylist():
                yield read_piece(loc, encode, header, columns, row["file"], row["path"], row["size"],
                                 row["start"], row["end"])

    df = spark.createDataFrame([tuple(p) for p in pieces], "file long, path string, size long, start long, end long") \
        .repartition(len(pieces))
    out = df.mapInArrow(read_batches, "file long, start long, data binary")
    table = out.toArrow() if hasattr(out, "toArrow") else pa.Table.from_pandas(out.toPandas(), preserve_index=False)
    return table.cast(PIECE_SCHEMA).sort_by([("file", "ascending"), ("start", "ascending")])
