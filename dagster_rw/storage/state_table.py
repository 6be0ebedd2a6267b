"""An LSM state table: immutable Parquet files sorted by primary key, newest version of a key wins.

Each row carries `_epoch` (the step that wrote it) and `_del` (a tombstone). Reads merge the
files; lookups filter by key first, so with sorted files DuckDB prunes row groups by key range.
"""
from __future__ import annotations

import os
import uuid

import pyarrow as pa

from ..engine.base import Engine, ParquetScan
from ..engine.duck import quote
from .manifest import SstFile
from .object_store import ObjectStore

EPOCH = "_epoch"
DELETED = "_del"


class StateTable:
    def __init__(self, store: ObjectStore, engine: Engine, key_dir: str, pk: list[str],
                 schema: pa.Schema, files: list[SstFile]):
        self.store = store
        self.engine = engine
        self.key_dir = key_dir
        self.pk = pk
        self.schema = schema  # live columns: pk + values
        self.files = list(files)
        self._staged: list = []

    # -- reading -------------------------------------------------------------------------------
    def _scan(self) -> ParquetScan:
        full = self.schema.append(pa.field(EPOCH, pa.int64())).append(pa.field(DELETED, pa.bool_()))
        return ParquetScan(tuple(self.store.local_path(f.key) for f in self.files), full)

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.schema]

    def _merged(self, where: str) -> str:
        cols = ", ".join(quote(c) for c in self.columns)
        if len(self.files) <= 1:
            return f"SELECT {cols} FROM rw_state WHERE NOT {DELETED}{' AND ' + where if where else ''}"
        part = ", ".join(quote(c) for c in self.pk) if self.pk else "1"
        return (
            f"SELECT {cols} FROM (SELECT *, row_number() OVER (PARTITION BY {part} ORDER BY {EPOCH} DESC) "
            f"AS _rn FROM rw_state{' WHERE ' + where if where else ''}) rw_m WHERE _rn = 1 AND NOT {DELETED}"
        )

    def read_all(self):
        """Every live row (a full read: for snapshots and batch queries, never per epoch)."""
        return self.engine.sql(self._merged(""), rw_state=self._scan())

    def lookup(self, keys, on: list[str]):
        """Live rows whose columns `on` (a prefix of the key) equal those of some row of `keys`."""
        if not on:
            return self.read_all()
        cond = " AND ".join(f"rw_keys.{quote(c)} IS NOT DISTINCT FROM rw_state.{quote(c)}" for c in on)
        where = f"EXISTS (SELECT 1 FROM rw_keys WHERE {cond})"
        return self.engine.sql(self._merged(where), rw_state=self._scan(), rw_keys=keys)

    # -- writing -------------------------------------------------------------------------------
    def stage(self, rows) -> None:
        """Rows to write at the end of the step: the live columns plus `_del`."""
        self._staged.append(rows)

    def flush(self, epoch_from: int, epoch_to: int) -> SstFile | None:
        """Write everything staged in this step as one sorted file stamped with the epoch range."""
        if not self._staged:
            return None
        cols = ", ".join(quote(c) for c in self.columns)
        rels = {f"r{i}": r for i, r in enumerate(self._staged)}
        union = " UNION ALL ".join(f"SELECT {cols}, {DELETED} FROM r{i}" for i in range(len(rels)))
        rel = self.engine.sql(f"SELECT {cols}, CAST({epoch_to} AS BIGINT) AS {EPOCH}, {DELETED} FROM ({union}) u",
                              **rels)
        self._staged = []
        if self.engine.num_rows(rel) == 0:
            return None
        return self._write(rel, epoch_from, epoch_to)

    def _write(self, rel, epoch_from: int, epoch_to: int) -> SstFile:
        name = f"{epoch_from:020d}-{epoch_to:020d}-{uuid.uuid4().hex[:12]}.parquet"
        key = f"{self.key_dir}/{name}"
        tmp = os.path.join(self.store.scratch_dir(), f"{uuid.uuid4().hex}.parquet")
        rows = self.engine.write_parquet(rel, tmp, self.pk)
        size = os.path.getsize(tmp)
        self.store.upload_file(tmp, key)
        return SstFile(key=key, epoch_from=epoch_from, epoch_to=epoch_to, rows=rows, bytes=size)

    # -- compaction ----------------------------------------------------------------------------
    def compact(self, max_files: int) -> tuple[list[SstFile], list[str]]:
        """Merge the newest small files when there are more than `max_files` (size-tiered).

        Returns the new file list and the keys of the files it replaced. Tombstones are dropped only
        when the merge includes the oldest file (nothing older can be shadowed then).
        """
        if len(self.files) <= max_files:
            return self.files, []
        group = [self.files[-1]]
        total = group[0].bytes
        for f in reversed(self.files[:-1]):
            if len(group) < 2 or f.bytes <= 2 * total:
                group.insert(0, f)
                total += f.bytes
            else:
                break
        start = len(self.files) - len(group)
        full = start == 0
        cols = ", ".join(quote(c) for c in self.columns)
        part = ", ".join(quote(c) for c in self.pk) if self.pk else "1"
        sub = StateTable(self.store, self.engine, self.key_dir, self.pk, self.schema, group)
        query = (
            f"SELECT {cols}, {EPOCH}, {DELETED} FROM (SELECT *, row_number() OVER (PARTITION BY {part} "
            f"ORDER BY {EPOCH} DESC) AS _rn FROM rw_state) rw_m WHERE _rn = 1"
            + (f" AND NOT {DELETED}" if full else "")
        )
        rel = self.engine.sql(query, rw_state=sub._scan())
        merged = self._write(rel, group[0].epoch_from, group[-1].epoch_to)
        new_files = self.files[:start] + ([merged] if merged.rows else [])
        dropped = [f.key for f in group]
        self.files = new_files
        return new_files, dropped
