"""Accepting rows for the next barrier, and the barriers themselves: INSERT/UPDATE/DELETE stage
batches durably, a barrier seals what was staged (and the sources' positions) into an epoch, and
a table's rows as the next barrier will make them are its committed rows plus what is staged.

Part of runtime.warehouse.Warehouse (a mixin): its state is the warehouse's `store`, `engine` and
the staged batches it keeps decoded (`_staged_kept`, `_staged_kept_bytes`).
"""
from __future__ import annotations

import os
import uuid

import pyarrow as pa

from ..errors import IntegrityError, ProgrammingError
from ..storage import sst_cache
from ..storage.catalog import TABLE
from ..storage.state_table import write_sorted
from . import epochs, ingest, row_ids, step

ROW_ID = "_row_id"
OP = "_op"
SEQ = "_seq"

_STAGED_KEPT_BYTES = 256 << 20


class Staging:
    def stage(self, table: str, rows: pa.Table, ops: list[int] | None = None, null_keys: bool = False) -> int:
        """Durably accept rows (upserts, or deletes where ops says -1) for the next barrier. A
        NULL in a primary key column is refused, as PostgreSQL refuses it, unless `null_keys`
        (a sink INTO the table writes what its query gives: RisingWave's keys admit NULL)."""
        obj = self.get(table)
        if obj.kind != TABLE:
            raise ProgrammingError(f'cannot modify {table!r}: it is a materialized view')
        if ingest.is_connector(obj):
            raise ProgrammingError(f"cannot modify {table!r}: its rows come from its connector "
                                   "(DML on a table with a connector is not supported)")
        if obj.options.get("as_query"):
            raise ProgrammingError(f"cannot modify {table!r}: its rows come from its AS SELECT query "
                                   "(DML on a table created AS SELECT is not supported)")
        n = rows.num_rows
        if n == 0:
            return 0
        if not obj.pk and ROW_ID not in rows.column_names:
            base = row_ids.allocate(self.store, n)
            rows = rows.append_column(ROW_ID, pa.array(range(base, base + n), pa.int64()))
        op = pa.array(ops if ops is not None else [1] * n, pa.int8())
        rows = rows.append_column(OP, op).append_column(SEQ, pa.array(range(n), pa.int64()))
        if obj.pk and not null_keys:
            nulls = [c for c in obj.pk if rows.column(c).null_count]
            if nulls:
                raise IntegrityError(f'null value in column "{nulls[0]}" of {table!r} violates its primary key')
        key = epochs.staging_key(obj.key_folder)
        tmp = os.path.join(self.store.scratch_dir(), f"{uuid.uuid4().hex}.parquet")
        by_arrow = write_sorted(rows, tmp, []) is not None
        if not by_arrow:  # a type pyarrow cannot write: DuckDB writes it
            self.engine.write_parquet(rows, tmp, [])
        self.store.upload_file(tmp, key)
        epochs.accept(self.store, obj, key)
        if by_arrow:
            self._keep_staged(self.store.cache_path(key), rows)
        return n

    def _keep_staged(self, path: str, rows: pa.Table) -> None:
        """Keep a staged batch decoded for this process's table step (it reads it back from the
        cache, not the file), within _STAGED_KEPT_BYTES: a process that only stages (a producer
        whose batches another process applies) keeps no more than that."""
        sst_cache.put(path, rows)
        self._staged_kept.append((path, rows.nbytes))
        self._staged_kept_bytes += rows.nbytes
        while self._staged_kept_bytes > _STAGED_KEPT_BYTES and self._staged_kept:
            gone, n = self._staged_kept.popleft()
            sst_cache.discard(gone)  # (nothing if its table step already took it)
            self._staged_kept_bytes -= n

    def dml_engine(self, table: str):
        """The engine that finds the rows an UPDATE or DELETE touches: Spark for large tables (or
        as forced), so the table is read by the cluster and only the touched rows reach here."""
        return self.step_engine(self.manifest(table).state_rows())

    def pending_rows(self, table: str, engine=None):
        """The table as the next barrier will make it: committed rows plus DML accepted since (an
        Arrow table in-process; on Spark, a relation the executors compute)."""
        try:
            return self._pending_rows(table, engine)
        except FileNotFoundError:
            # a staged batch this process took for unapplied was applied by another process's FLUSH
            # and collected meanwhile: its rows are committed now; read the log again, once
            self.sync()
            return self._pending_rows(table, engine)

    def _pending_rows(self, table: str, engine=None):
        engine = engine or self.engine
        obj = self.get(table)
        m = self.manifest(table)
        committed = m.epoch if m.exists else obj.created_epoch
        keys = epochs.batches_for(self.store, table, committed, epochs.newest_epoch(self.store))
        keys += epochs.unsealed_batches(self.store, table)
        current = step.output_table(self, obj, m, engine).read_all()
        delta = step.apply_batches(self, obj, m, keys, engine)
        finish = self.engine.to_arrow if engine is self.engine else (lambda rel: rel)
        if delta is None:
            return finish(current)
        cols = ", ".join(f'"{c.name}"' for c in obj.columns)
        return finish(engine.sql(
            f"SELECT {cols} FROM rw_cur rw_a WHERE NOT EXISTS (SELECT 1 FROM rw_delta rw_b WHERE rw_b._w < 0 AND "
            + " AND ".join(f'rw_a."{k}" IS NOT DISTINCT FROM rw_b."{k}"' for k in obj.stream_key)
            + f") UNION ALL SELECT {cols} FROM rw_delta WHERE _w > 0", rw_cur=current, rw_delta=delta))

    def barrier(self) -> int:
        return epochs.barrier(self.store, extra=self.barrier_extra())

    def barrier_extra(self):
        """What this warehouse's barriers record besides their batches (epochs.barrier's `extra`):
        the sources' positions, and the time from the `clock` option when one is given."""
        positions = ingest.barrier_offsets(self)
        clock = self.options["clock"]
        if clock is None:
            return positions

        def extra(newest: int) -> dict:
            more = positions(newest) if callable(positions) else positions
            return {**(more or {}), "time": float(clock())}

        return extra

    def pending_inputs(self) -> dict[str, int]:
        """Inputs with something a barrier would seal, and how much: staged DML batches per table.

        The barrier sensor cuts a barrier only when this is non-empty. Every kind of input (tables'
        staged DML; sources' unread records) reports here, by object name.
        """
        out = epochs.unsealed_counts(self.store)
        out.update(ingest.pending(self))  # sources: records in Kafka beyond the newest barrier's offsets
        return out

    def sealed_unapplied(self, upto: int | None = None) -> dict[str, int]:
        """Inputs holding data sealed in epochs up to `upto` (default: the newest) that they have not
        applied yet, and how much: staged DML batches per table, Kafka records or files per source."""
        upto = epochs.newest_epoch(self.store) if upto is None else upto
        out = {}
        for obj in self.catalog().topological():
            m = self.manifest(obj.name)
            if ingest.is_connector(obj):
                n = ingest.sealed_unapplied(self, obj, m, upto)
            elif obj.kind == TABLE and not obj.options.get("as_query"):
                committed = m.epoch if m.exists else obj.created_epoch
                n = len(epochs.batches_for(self.store, obj.name, committed, upto)) if committed < upto else 0
            else:
                continue
            if n:
                out[obj.name] = n
        return out
