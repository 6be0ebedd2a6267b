"""File sources (posix_fs, s3): the files each barrier records, and the steps that read exactly those.

A barrier lists the source's files and records, with its epoch record (`source_files`), every file
no earlier epoch took: its path, a number of its own (`id`), its size, and its pieces (byte ranges,
or row-group ranges of a Parquet file). Files are taken whole, each by one epoch. A source's step
reads the pieces of the files recorded for the epochs it advances over and commits, in the same
manifest version as the rows, the files it has read (`files`: path -> [id, size]): a crash before
that commit reads them again, a crash after it never does. Which files earlier epochs took is
decided on the log's newest state (inside the barrier's log entry), so two processes cutting
barriers at once never record one file twice.

Every record's hidden row id is `id << 40 | position`, its position being its byte offset in the
file (its row number in a Parquet file): the same however the file is cut into pieces, on every
retry. Records that do not decode go to the source's error table with the file path as `topic`,
the file's id as `partition` and the position as `offset`.

Files are expected to be written whole (renamed into place, or one S3 PUT) and never changed: a
file's size is fixed by the barrier that takes it. Files whose name starts with '.' or '_' are
never listed.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pyarrow as pa

from .. import types as sqltypes
from ..errors import OperationalError
from ..sources import files
from ..sources.decode import RecordDecoder
from ..sources.spec import FILE_CONNECTORS, FileSourceSpec
from ..storage.catalog import CatalogObject, Column
from ..storage.log import log_of
from ..storage.manifest import Manifest
from . import epochs
from .interfaces import StepWarehouse

SOURCE_FILES = "source_files"  # key of the per-source files taken in an epoch record
ID_SHIFT = 40
ROW_ID = "_row_id"  # the hidden row id (as in runtime.warehouse)
_LISTINGS: dict[tuple, tuple[float, list[tuple[str, int]]]] = {}  # (store, source, created) -> (when, files)


def is_file_source(obj: CatalogObject) -> bool:
    return (obj.options or {}).get("connector") in FILE_CONNECTORS


def spec_of(obj: CatalogObject) -> FileSourceSpec:
    return FileSourceSpec.from_options(obj.options)


def location(wh: StepWarehouse, obj: CatalogObject) -> dict:
    """Where the files are, credentials in clear (for this process and the Spark tasks it starts)."""
    from .secrets import clear_value

    spec = spec_of(obj)
    if spec.kind == "posix":
        return {"kind": "posix", "root": spec.root}
    what = f"source {obj.name!r}"
    return {"kind": "s3", "bucket": spec.bucket, "endpoint": spec.endpoint, "region": spec.region,
            "access": clear_value(wh, spec.access, "s3.credentials.access", what),
            "secret": clear_value(wh, spec.secret, "s3.credentials.secret", what)}


def _list(wh: StepWarehouse, obj: CatalogObject, fresh: bool) -> list[tuple[str, int]]:
    """The source's files; a listing younger than refresh.interval.sec serves unless `fresh`."""
    key = (getattr(wh.store, "url", None), obj.name, obj.created_epoch)
    now = time.monotonic()
    if not fresh and key in _LISTINGS and now - _LISTINGS[key][0] < spec_of(obj).refresh_interval_sec:
        return _LISTINGS[key][1]
    loc = location(wh, obj)
    try:
        listed = files.list_files(loc, spec_of(obj).match_pattern)
    except OperationalError:
        raise
    except Exception as e:  # noqa: BLE001 - boto3 and the file system raise many kinds
        raise OperationalError(f"source {obj.name!r}: cannot list the files of {files.describe(loc)}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    _LISTINGS[key] = (now, listed)
    return listed


def done_files(m: Manifest | dict) -> dict[str, list[int]]:
    """The files a source's committed epoch has read: path -> [id, size]."""
    positions = m.positions if isinstance(m, Manifest) else (m or {}).get("positions", {})
    return positions.get("files", {})


def recorded_files(store, obj: CatalogObject, after: int, upto: int) -> list[dict]:
    """The files the epoch records (after, upto] took for source `obj`, in epoch order (records
    from before its creation belong to an earlier object of the same name)."""
    out = []
    for n in epochs.epoch_numbers(store):
        if max(after, obj.created_epoch) < n <= upto:
            try:
                record = epochs.load_epoch(store, n)
            except FileNotFoundError:
                continue
            out.extend(record.get(SOURCE_FILES, {}).get(obj.name, []))
    return out


def barrier_files(wh: StepWarehouse, sources: list[CatalogObject]):
    """The part of a barrier's `extra` for file sources: given the newest epoch, the files every
    source takes. It runs inside the barrier's log entry, on the log's newest state."""
    listed: dict[str, list | None] = {}  # listed once per barrier, not once per retry
    pieces: dict[tuple, list] = {}
    split = wh.options["source_split_bytes"]

    def extra(newest: int) -> dict:
        state = log_of(wh.store).current()
        out = {}
        for obj in sources:
            committed = state.manifests.get(obj.name, {})
            taken = {path: v[0] for path, v in done_files(committed).items()}
            next_id = committed.get("positions", {}).get("next_file", 0)
            for entry in recorded_files(wh.store, obj, 0, newest):
                taken.setdefault(entry["path"], entry["id"])
            next_id = max([next_id, *(i + 1 for i in taken.values())])
            if obj.name not in listed:
                try:
                    listed[obj.name] = _list(wh, obj, fresh=True)
                except OperationalError:
                    listed[obj.name] = None  # unreachable: this epoch takes nothing from it
            new = []
            spec = spec_of(obj)
            for path, size in listed[obj.name] or []:
                if path in taken:
                    continue
                if (obj.name, path) not in pieces:
                    try:
                        pieces[(obj.name, path)] = files.cut(location(wh, obj), spec.encode, path, size, split)
                    except Exception:  # noqa: BLE001 - not readable yet (a Parquet file without its footer)
                        continue
                new.append({"path": path, "id": next_id, "size": size, "pieces": pieces[(obj.name, path)]})
                next_id += 1
            if new:
                out[obj.name] = new
        return {SOURCE_FILES: out} if out else {}

    return extra


def pending(wh: StepWarehouse, obj: CatalogObject) -> int:
    """How many of the source's files no barrier has taken (by a listing at most
    refresh.interval.sec old)."""
    try:
        listed = _list(wh, obj, fresh=False)
    except OperationalError:
        return 0
    taken = set(done_files(wh.manifest(obj.name)))
    taken.update(e["path"] for e in recorded_files(wh.store, obj, 0, epochs.newest_epoch(wh.store)))
    return sum(1 for path, _ in listed if path not in taken)


def sealed_unapplied(wh: StepWarehouse, obj: CatalogObject, m: Manifest, upto: int) -> int:
    """Files recorded in epochs up to `upto` that the source has not read yet."""
    done = done_files(m)
    return sum(1 for e in recorded_files(wh.store, obj, m.epoch, upto) if e["path"] not in done)


class _PieceDecoder:
    """Decodes the pieces of one source's files with one DuckDB engine (one per thread); `read`:
    the columns to decode (None: all), the others NULL."""

    def __init__(self, obj: CatalogObject, loc: dict, engine, epoch: int, read: set[str] | None = None):
        self.obj, self.loc, self.engine, self.epoch, self.read = obj, loc, engine, epoch, read
        self.spec = spec_of(obj)
        self.declared = [c for c in obj.columns if not c.hidden]
        self.names = [c.name for c in self.declared]
        self.target = pa.schema([pa.field(c.name, sqltypes.arrow_type(c.type)) for c in self.declared])
        self.decoders: dict = {}

    def _decoder(self, path: str, size: int) -> RecordDecoder:
        spec = self.spec
        if not (spec.encode == "csv" and spec.header):
            if None not in self.decoders:
                self.decoders[None] = RecordDecoder(self.declared, spec.encode, spec.delimiter, self.engine, self.read)
            return self.decoders[None]
        line = files.first_line(self.loc, path, size)
        if line not in self.decoders:  # the header names the fields; declared columns are taken by name
            import pyarrow.csv as pacsv

            names = pacsv.read_csv(pa.py_buffer(line + b"\n"),
                                   read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                                   parse_options=pacsv.ParseOptions(delimiter=spec.delimiter)).to_pylist()
            header = [str(v) for v in names[0].values()] if names else []
            types = {c.name: c.type for c in self.declared}
            wanted = None if self.read is None else self.read & set(header)
            self.decoders[line] = RecordDecoder([Column(h, types.get(h, "varchar")) for h in header], "csv",
                                                spec.delimiter, self.engine, wanted)
        return self.decoders[line]

    def decode(self, fid: int, path: str, size: int, first: int, payload):
        """A piece's rows (declared columns, typed), their row ids, and its bad records as tuples
        of the error table's columns; `payload` None: the file was removed before it was read."""
        if payload is None:
            return None, None, [(self.obj.name, path, fid, first, None, "the file was removed before it was read",
                                 self.epoch)]
        if self.spec.encode == "parquet":
            decoded = self._decoder(path, size).decode_table(payload)
            positions = first + np.arange(payload.num_rows, dtype=np.int64)

            def raw(i):
                import json

                return json.dumps(payload.slice(i, 1).to_pylist()[0], default=str)
        else:
            decoded, starts = self._decoder(path, size).decode_lines(payload)
            positions = first + starts

            def raw(i):
                end = payload.find(b"\n", int(starts[i]))
                return payload[int(starts[i]):None if end < 0 else end].decode("utf-8", "replace")
        rows = decoded.rows
        if rows.column_names != self.names:  # a CSV header's order, or columns it lacks
            rows = pa.table([rows.column(n) if n in rows.column_names else
                             pa.nulls(rows.num_rows, self.target.field(n).type) for n in self.names], names=self.names)
        ids = (np.int64(fid) << ID_SHIFT) + positions[np.asarray(decoded.good, np.int64)]
        errors = [(self.obj.name, path, fid, int(positions[i]), raw(i), cause, self.epoch)
                  for i, cause in decoded.errors]
        return rows.cast(self.target), ids, errors


def read_rows(wh: StepWarehouse, obj: CatalogObject, entries: list[dict], epoch: int, read: set[str] | None = None):
    """The decoded rows (declared columns, hidden row id) of the files in `entries` (each one's
    recorded pieces; pieces None: the whole file), and the bad records as tuples of the error
    table's columns; `read`: the columns to decode (None: all), the others NULL. More than a piece's worth of bytes is read and decoded in parallel threads
    (pyarrow and DuckDB work outside the GIL), each with a DuckDB engine of its own; large epochs
    in Spark tasks."""
    spec = spec_of(obj)
    loc = location(wh, obj)
    names = [c.name for c in obj.columns if not c.hidden and (read is None or c.name in read)]
    todo = []  # (file id, path, size, start, end)
    for e in entries:
        for start, end in (e["pieces"] if e.get("pieces") is not None else [[0, None]]):
            todo.append((e["id"], e["path"], e["size"], start, end))
    total = sum(e["size"] for e in entries)
    if todo and _uses_spark(wh, total):
        sizes = {e["id"]: (e["path"], e["size"]) for e in entries}
        table = files.read_on_spark(wh.spark_engine().spark, loc, spec.encode, spec.header, names, todo)
        decoder = _PieceDecoder(obj, loc, wh.engine, epoch, read)
        done = [decoder.decode(fid, *sizes[fid], first,
                               files.ipc_table(data) if spec.encode == "parquet" and data is not None else data)
                for fid, first, data in zip(*(table.column(c).to_pylist() for c in ("file", "start", "data")))]
    elif len(todo) > 1 and total > wh.options["source_split_bytes"]:  # more than a piece's worth
        from concurrent.futures import ThreadPoolExecutor

        from ..engine.duck import DuckEngine

        local = threading.local()

        def read_and_decode(piece):
            fid, path, size, start, end = piece
            if not hasattr(local, "decoder"):
                local.decoder = _PieceDecoder(obj, loc, DuckEngine(threads=1), epoch, read)
            first, payload = files.piece(loc, spec.encode, spec.header, names, path, size, start, end)
            return local.decoder.decode(fid, path, size, first, payload)

        with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
            done = list(pool.map(read_and_decode, todo))
    else:
        decoder = _PieceDecoder(obj, loc, wh.engine, epoch, read)
        done = [decoder.decode(fid, path, size, *files.piece(loc, spec.encode, spec.header, names, path, size,
                                                             start, end))
                for fid, path, size, start, end in todo]
    parts = [rows for rows, _, _ in done if rows is not None]
    ids = [i for _, i, _ in done if i is not None]
    errors = [err for _, _, errs in done for err in errs]
    target = _PieceDecoder(obj, loc, None, epoch).target
    rows = pa.concat_tables(parts) if parts else target.empty_table()
    rows = rows.append_column(ROW_ID, pa.array(np.concatenate(ids) if ids else np.zeros(0, np.int64), pa.int64()))
    return rows, errors


def _uses_spark(wh: StepWarehouse, nbytes: int) -> bool:
    choice = wh.options["engine"]
    if choice == "spark":
        return True
    return choice == "auto" and wh.has_spark and \
        nbytes > wh.options["source_spark_threshold_bytes"]


def read_epoch(wh: StepWarehouse, obj: CatalogObject, m: Manifest, target: int, read: set[str] | None = None):
    """What a step of the source reads: the files recorded for epochs (committed, target] that it
    has not read (`read`: the columns to decode, None: all); returns (rows, bad records as tuples,
    the manifest's positions after the step)."""
    done = dict(done_files(m))
    entries, seen = [], set()
    for e in recorded_files(wh.store, obj, m.epoch, target):
        if e["path"] not in done and e["path"] not in seen:
            seen.add(e["path"])
            entries.append(e)
    rows, errors = read_rows(wh, obj, entries, target, read)
    for e in entries:
        done[e["path"]] = [e["id"], e["size"]]
    next_id = max([m.positions.get("next_file", 0), *(v[0] + 1 for v in done.values())])
    return rows, errors, {**m.positions, "files": done, "next_file": next_id}


def snapshot_rows(wh: StepWarehouse, obj: CatalogObject, m: Manifest):
    """A source's rows as of its committed epoch: every file it has read, read again whole."""
    entries = [{"path": p, "id": v[0], "size": v[1], "pieces": None} for p, v in sorted(done_files(m).items())]
    return read_rows(wh, obj, entries, m.epoch)[0]


def status_fields(wh: StepWarehouse, obj: CatalogObject, m: Manifest) -> dict:
    spec = spec_of(obj)
    out = {"source_location": spec.root if spec.kind == "posix" else f"s3://{spec.bucket}",
           "source_files": len(done_files(m))}
    try:
        listed = _list(wh, obj, fresh=False)
        done = done_files(m)
        out["source_files_pending"] = sum(1 for p, _ in listed if p not in done)
    except OperationalError:
        out["source_files_pending"] = None
    return out
