"""The file connector: one Parquet or JSON-lines file per delivered batch, named by its epoch range,
on local disk or S3 through the project's object store, written whole or not at all (a temporary
file renamed into place on disk, a single PUT on S3).

Append-only sinks write the rows; upsert sinks add a column `_op` ('upsert' or 'delete'). A batch
delivered again after a crash rewrites the file of the same name when it covers the same epochs.
"""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import BotoCoreError, ClientError

from ..errors import OperationalError
from ..storage.object_store import open_store
from . import json_rows
from .key_conversion import OP, UPSERT_OP
from .target import Changes, Target, TargetError


class FileTarget(Target):
    def __init__(self, spec, columns):
        self.spec = spec
        self.path = spec.options["path"].rstrip("/")
        self.encode = spec.encode or "parquet"
        self.description = f"files under {self.path}"
        self.store = None

    def _store(self):
        if self.store is None:
            try:
                self.store = open_store(self.path, self.spec.options.get("s3.endpoint"))
            except (OSError, ValueError, BotoCoreError, ClientError) as e:  # the target is unusable
                raise TargetError(f"cannot open {self.path}: {e}") from None
        return self.store

    def file_name(self, changes: Changes) -> str:
        ext = "parquet" if self.encode == "parquet" else "jsonl"
        return f"{self.spec.name}-{changes.epoch_from:020d}-{changes.epoch_to:020d}.{ext}"

    def write(self, changes: Changes) -> None:
        table = changes.table.select(changes.columns)
        if changes.upsert:
            ops = pa.array(["upsert" if o == UPSERT_OP else "delete" for o in changes.table.column(OP).to_pylist()])
            table = table.append_column("_op", ops)
        if self.encode == "parquet":
            buf = io.BytesIO()
            pq.write_table(table, buf)
            data = buf.getvalue()
        else:
            data = b"".join(json_rows.encode(r) + b"\n" for r in table.to_pylist())
        try:
            self._store().write_bytes(self.file_name(changes), data)
        except (OSError, BotoCoreError, ClientError, OperationalError) as e:
            self.store = None
            raise TargetError(f"cannot write {self.file_name(changes)}: {str(e).splitlines()[0]}") from None
