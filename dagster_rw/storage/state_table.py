"""An LSM state table: immutable Parquet files sorted by primary key, newest version of a key wins.

Each row carries `_epoch` (the step that wrote it) and `_del` (a tombstone). Reads merge the
files; lookups filter by key first, so with sorted files DuckDB prunes row groups by key range.
"""
from __future__ import annotations

import os
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..engine.base import Engine, ParquetScan
from ..engine.duck import DuckEngine, quote, write_query
from . import sst_cache
from . import manifest as manifests
from .manifest import SstFile
from .object_store import ObjectStore
from .parquet_io import EPOCH, parquet_bytes, write_parquet
from .tuning import TUNING

DELETED = "_del"
KEY_ORDER = b"dagster_rw.key_order"  # schema metadata: rows staged already sorted by the key


def in_key_order(table: pa.Table, pk: list[str]) -> pa.Table:
    """`table`, marked as sorted by the key `pk` (distinct keys), so that its state file is
    written as it is, without the sort check (StateTable.prepare)."""
    return table.replace_schema_metadata({KEY_ORDER: ",".join(pk).encode()})


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
    @property
    def file_schema(self) -> pa.Schema:
        """The columns of this table's files: the live ones, the step's epoch and the tombstone flag."""
        return self.schema.append(pa.field(EPOCH, pa.int64())).append(pa.field(DELETED, pa.bool_()))

    def _scan(self, files: list[SstFile] | None = None) -> ParquetScan:
        files = self.files if files is None else files
        return ParquetScan(tuple(f.key for f in files), self.file_schema, self.store, rows=sum(f.rows for f in files))

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.schema]

    def _merged(self, where: str) -> str:
        cols = ", ".join(quote(c) for c in self.columns)
        if len(manifests.runs(self.files)) <= 1:  # one file, or one run of files with disjoint keys
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
        if not self.files:  # nothing stored yet (a first load, a backfill): no query, no Spark job
            return self.schema.empty_table()
        if not on:
            return self.read_all()
        cols = sst_cache.usable_prefix(self.schema, on) if isinstance(keys, pa.Table) and self.files else []
        if cols:
            found = self._lookup_by_search(keys, on, cols)
            if found is not None:
                return found
        cond = " AND ".join(f"rw_keys.{quote(c)} IS NOT DISTINCT FROM rw_state.{quote(c)}" for c in on)
        where = f"EXISTS (SELECT 1 FROM rw_keys WHERE {cond})"
        files = self.files
        if isinstance(keys, pa.Table) and on[0] == self.pk[0] and any(f.key_min is not None for f in files):
            wanted, want_null = sst_cache.encode_keys(keys, on[:1], self.schema)  # (keys the driver holds)
            files = self._holding(files, on[:1], wanted, want_null)
            if not files:
                return self.schema.empty_table()
        return self.engine.sql(self._merged(where), broadcast=("rw_keys",), rw_state=self._scan(files), rw_keys=keys)

    def _lookup_by_search(self, keys: pa.Table, on: list[str], cols: list[str]):
        """Binary-search each sorted file for the wanted keys, then merge versions and apply the
        exact condition to those few rows only."""
        wanted, want_null = sst_cache.encode_keys(keys, cols, self.schema)
        full = self._scan().schema
        unique = list(cols) == list(self.pk)
        exact = len(on) == len(cols)
        if unique and exact:
            return self._lookup_unique(wanted, want_null, full)
        parts = []
        for f in self._holding(self.files, cols, wanted, want_null):
            rows = sst_cache.rows_matching(self.store.path_for_cache(f.key), cols, wanted, want_null, unique=unique)
            if rows is None:
                return None
            parts.append(rows.select(full.names).cast(full))
        if not parts:
            return self.schema.empty_table()
        candidates = pa.concat_tables(parts)
        if exact and len(self.files) == 1:
            return candidates.filter(pc.invert(candidates.column(DELETED))).select(self.columns)
        cond = " AND ".join(f"rw_keys.{quote(c)} IS NOT DISTINCT FROM rw_state.{quote(c)}" for c in on)
        where = "" if exact else f"EXISTS (SELECT 1 FROM rw_keys WHERE {cond})"
        return self.engine.sql(self._merged(where), rw_state=candidates, rw_keys=keys)

    def _holding(self, files: list[SstFile], cols: list[str], wanted: np.ndarray, want_null: bool) -> list[SstFile]:
        """The files that may hold some wanted key (codes of `cols`, sorted): a file of a run
        written on Spark records its key range, and one whose range holds none of them is left
        out (for a first key column of integers; other files are always kept)."""
        if not any(f.key_min is not None for f in files):
            return files
        if len(cols) != 1 or cols[0] != self.pk[0] or wanted.dtype.kind not in "iu" \
                or not pa.types.is_integer(self.schema.field(cols[0]).type):
            return files
        kept = []
        for f in files:  # rows sorted by the key: its first column lies within the first and last rows'
            lo = f.key_min[0] if f.key_min else None
            hi = f.key_max[0] if f.key_max else None
            if lo is None or hi is None or np.searchsorted(wanted, lo, "left") < np.searchsorted(wanted, hi, "right"):
                kept.append(f)
        return kept

    def range(self, lo, hi):
        """Live rows whose first key column lies in [lo, hi] (Python values of its type; None:
        unbounded on that side; a NULL key never): a binary search of each sorted file in-process,
        else a filtered read (row groups outside the range are skipped by their statistics)."""
        col = self.pk[0]
        if not self.files:
            return self.schema.empty_table()
        if isinstance(self.engine, DuckEngine):
            full = self._scan().schema
            parts = []
            for f in self.files:
                rows = sst_cache.rows_in_range(self.store.path_for_cache(f.key), col, lo, hi)
                if rows is None:
                    break
                parts.append(rows.select(full.names).cast(full))
            else:
                candidates = pa.concat_tables(parts)
                return self.engine.sql(self._merged(""), rw_state=candidates)
        return self.range_by_query(lo, hi)

    def rows_from(self, value, count: int, descending: bool = False):
        """Live rows whose first key column is at least `value` (or, `descending`, at most), read
        from each file's sorted position up to `count` rows (NULLs never), and the frontier: the
        value up to which (exclusive) those are all such rows; None when every file ran out that
        way. Returns None when the files cannot be searched in-process (then read otherwise)."""
        col = self.pk[0]
        if not isinstance(self.engine, DuckEngine):
            return None
        full = self._scan().schema
        parts, frontier = [], None
        for f in self.files:
            got = sst_cache.rows_from(self.store.path_for_cache(f.key), col, value, count, descending)
            if got is None:
                return None
            rows, exhausted = got
            parts.append(rows.select(full.names).cast(full))
            if not exhausted:
                edge = rows.column(col)[0 if descending else -1].as_py()
                if frontier is None or (edge > frontier if descending else edge < frontier):
                    frontier = edge
        if not parts:
            return self.schema.empty_table(), None
        return self.engine.sql(self._merged(""), rw_state=pa.concat_tables(parts)), frontier

    def range_by_query(self, lo, hi):
        """range() as one query over the files (for types a binary search cannot use, and on Spark)."""
        col = self.pk[0]
        field = self.schema.field(col)
        bounds = pa.table({"lo": pa.array([lo], field.type), "hi": pa.array([hi], field.type)})
        q = quote(col)
        where = (f"{q} IS NOT NULL AND ((SELECT lo FROM rw_bounds) IS NULL OR {q} >= (SELECT lo FROM rw_bounds)) "
                 f"AND ((SELECT hi FROM rw_bounds) IS NULL OR {q} <= (SELECT hi FROM rw_bounds))")
        return self.engine.sql(self._merged(where), rw_state=self._scan(), rw_bounds=bounds)

    def _lookup_unique(self, wanted, want_null: bool, full: pa.Schema):
        """Lookup by the whole primary key: search the files newest first; a key found (live or a
        tombstone) is not searched for in older files, so no merge of versions is needed. Where
        there are several newer files, one filter over all of them first sets aside the keys none
        of them holds: those are looked for in the oldest file only."""
        paths = [self.store.path_for_cache(f.key) for f in self.files]
        holders = None if want_null or not TUNING.newest_holders else sst_cache.newest_holders(paths, self.pk, wanted)
        if holders is not None:  # each key is searched in the one file holding its newest version
            return self._lookup_in_holders(paths, holders, wanted)
        files = self._holding(self.files, self.pk, wanted, want_null)
        if not files:
            return self.schema.empty_table()
        paths = [self.store.path_for_cache(f.key) for f in files]
        maybe = sst_cache.union_admits(paths[1:], self.pk, wanted) if len(paths) > 2 else None
        left = np.ones(len(wanted), bool)  # not found yet
        parts = []
        for i in range(len(paths) - 1, -1, -1):
            pick = left if maybe is None or i == 0 else left & maybe
            sub = wanted[pick]
            if not len(sub) and not want_null:
                if i == 0 or maybe is None:
                    break
                continue
            found = np.zeros(len(sub), bool)
            rows = sst_cache.rows_matching(paths[i], self.pk, sub, want_null,
                                           unique=True, found=found, columns=self.columns + [DELETED])
            if rows is None:
                return None
            if rows.num_rows:
                parts.append(sst_cache.conform(rows, pa.schema([full.field(n) for n in rows.column_names])))
                want_null = want_null and rows.column(self.pk[0]).null_count == 0
            left[np.flatnonzero(pick)[found]] = False
        if not parts:
            return self.schema.empty_table()
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        return rows.filter(pc.invert(rows.column(DELETED))).select(self.columns)

    def _lookup_in_holders(self, paths: list[str], holders: np.ndarray, wanted: np.ndarray) -> pa.Table:
        """The live rows of the wanted keys (codes of the one integer key column), each read from the
        file holding its newest version. (Splitting a file's keys over two threads gained nothing
        measurable inside a FLUSH, whose writers keep the second core busy.)"""
        return self._rows_in_holders(paths, holders, wanted, in_order=True)[1]

    def _rows_in_holders(self, paths: list[str], holders: np.ndarray, wanted: np.ndarray, in_order: bool):
        """_lookup_in_holders' rows and, before them, the index in `wanted` of each."""
        found, parts = [], []
        for i in np.flatnonzero(np.bincount(holders + 1, minlength=len(paths) + 1)[1:]).tolist():
            sub = np.flatnonzero(holders == i)
            rows, live = self._read_keys(paths[i], wanted[sub], in_order)
            if rows.num_rows:
                found.append(sub[live])
                parts.append(rows)
        if not parts:
            return np.zeros(0, np.int64), self.schema.empty_table()
        if len(parts) == 1:
            return found[0], parts[0]
        return np.concatenate(found), pa.concat_tables(parts)

    def _read_keys(self, path: str, sub: np.ndarray, in_order: bool = True):
        """The live rows of one file for the keys `sub` (codes of the one integer key column;
        `in_order`: sorted), and the index in `sub` of each: the key column comes from the codes
        themselves, and the file's tombstone column is read only where it has tombstones."""
        (key,) = self.pk
        got = sst_cache.positions(path, self.pk, sub, in_order=in_order)
        if got is None:
            raise AssertionError("a file the holders map indexed cannot be searched")
        table, pos, hit = got
        dead = sst_cache.has_tombstones(path, DELETED)
        values = [c for c in self.columns if c != key]
        live = np.flatnonzero(hit)
        found = table.select(values + ([DELETED] if dead else [])).take(pa.array(pos[live]))
        found = found.add_column(0, key, pa.array(sub[live]).cast(self.schema.field(key).type))
        if dead:
            alive = ~np.asarray(found.column(DELETED))
            found, live = found.filter(pa.array(alive)), live[alive]
        return found.select(self.columns).cast(self.schema), live

    def find(self, keys: pa.Table, cols: list[str], columns: list[str] | None = None):
        """For each row of `keys`, the live row whose primary key equals that row's `cols`:
        (positions of the matched rows of `keys`, the state rows in the same order, of `columns`
        only if given). None when the key is not made of integer columns."""
        if len(cols) != len(self.pk) or not all(pa.types.is_integer(self.schema.field(c).type) for c in self.pk):
            return None
        try:
            probe = keys.select(cols).rename_columns(self.pk).cast(
                pa.schema([self.schema.field(c) for c in self.pk]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        codes = sst_cache.key_codes(probe, self.pk)
        if codes is None:
            return None
        return self.find_codes(codes, columns=columns)

    def find_codes(self, codes: np.ndarray, in_order: bool = False, columns: list[str] | None = None):
        """find() by the keys' codes (sst_cache.key_codes of the whole key; `in_order`: sorted):
        each key read from the file holding its newest version where the holders map knows it,
        else the files searched newest first."""
        paths = [self.store.path_for_cache(f.key) for f in self.files]
        if TUNING.newest_holders and len(self.pk) == 1 and codes.dtype.kind == "i":
            holders = sst_cache.newest_holders(paths, self.pk, codes)
            if holders is not None:
                found, rows = self._rows_in_holders(paths, holders, codes, in_order)
                return found, rows if columns is None else rows.select(columns)
        columns = self.columns if columns is None else columns
        schema = pa.schema([self.schema.field(c) for c in columns])
        pending = np.arange(len(codes))
        matched, rows = [], []
        for path in reversed(paths):
            if not len(pending):
                break
            got = sst_cache.positions(path, self.pk, codes[pending], in_order=in_order)
            if got is None:
                return None
            table, pos, hit = got
            if not sst_cache.has_tombstones(path, DELETED):
                matched.append(pending[hit])
                rows.append(table.select(columns).take(pa.array(pos[hit])).cast(schema))
                pending = pending[~hit]
                continue
            found = table.select(columns + [DELETED]).take(pa.array(pos[hit]))
            live = np.asarray(pc.invert(found.column(DELETED)))
            matched.append(pending[hit][live])
            rows.append(found.filter(pa.array(live)).select(columns).cast(schema))
            pending = pending[~hit]
        if not rows:
            return np.zeros(0, np.int64), schema.empty_table()
        return np.concatenate(matched), pa.concat_tables(rows)

    def index_ahead(self, new: SstFile | None) -> None:
        """Build the lookup structures of `new` (this step's file: prepared and cached, perhaps not
        yet written) now, on a thread of its own, so that the next step's lookups do not pay for
        them: the key indexes the table's lookups built for its newest other file (none when its
        files are not looked up by key); for a dense integer key, the map of which file holds each
        key (the new file's keys entered: one scattered write per key into a map of the key range)."""
        if new is None:
            return
        path = self.store.cache_path(new.key)
        others = [self.store.cache_path(f.key) for f in list(self.files) if f.key != new.key]
        if not others or sst_cache.cached(path) is None:
            return
        cols = sst_cache.usable_prefix(self.schema, self.pk) if self.pk else []
        if cols:
            sst_cache.build_indexes(path, cols, like=others[-1])
        if TUNING.newest_holders and len(self.pk) == 1 and all(sst_cache.cached(p) is not None for p in others):
            sst_cache.newest_holders(others + [path], self.pk, np.zeros(0, np.int64))

    # -- writing -------------------------------------------------------------------------------
    def stage(self, rows) -> None:
        """Rows to write at the end of the step: the live columns plus `_del`; or a function that
        computes them, called when the file is prepared (in-process, on a writer thread while the
        operators above compute)."""
        self._staged.append(rows)

    def flush(self, epoch_from: int, epoch_to: int) -> SstFile | list[SstFile] | None:
        """Write everything staged in this step as one sorted file stamped with the epoch range
        (on Spark, a run of files, one per key range, written by the executors)."""
        if hasattr(self.engine, "write_files"):
            self._staged = [r() if callable(r) else r for r in self._staged]
        if hasattr(self.engine, "write_files") and not all(isinstance(r, pa.Table) for r in self._staged):
            staged, self._staged = self._staged, []
            return self.engine.write_files(self._staged_rows(staged, epoch_to), self.store, self.key_dir, self.pk,
                                           self._scan().schema, epoch_from, epoch_to) or None
        prepared = self.prepare(epoch_from, epoch_to)
        return prepared.finish() if prepared is not None else None

    def _staged_rows(self, staged: list, epoch_to: int):
        """The staged rows stamped with the step's epoch, as one relation of the engine."""
        cols = ", ".join(quote(c) for c in self.columns)
        rels = {f"r{i}": r for i, r in enumerate(staged)}
        union = " UNION ALL ".join(f"SELECT {cols}, {DELETED} FROM r{i}" for i in range(len(rels)))
        return self.engine.sql(f"SELECT {cols}, CAST({epoch_to} AS BIGINT) AS {EPOCH}, {DELETED} FROM ({union}) u",
                               **rels)

    def prepare(self, epoch_from: int, epoch_to: int) -> PreparedSst | None:
        """flush's first half: the staged rows as one file-to-be, sorted, named and (in-process)
        readable from the cache; `finish()` writes it."""
        if not self._staged:
            return None
        staged, self._staged = [r() if callable(r) else r for r in self._staged], []
        if all(isinstance(r, pa.Table) for r in staged):
            full = self._scan().schema
            filled = [r for r in staged if r.num_rows]
            if not filled:
                return None
            parts = [r.select(self.columns + [DELETED]) for r in filled]
            # one part its maker sorted by this table's key (in_key_order)
            ordered = len(filled) == 1 and (filled[0].schema.metadata or {}).get(KEY_ORDER) == ",".join(self.pk).encode()
            rel = pa.concat_tables([sst_cache.conform(p, pa.schema([full.field(n) for n in p.column_names]))
                                    for p in parts])
            rel = rel.append_column(EPOCH, pa.array(np.full(rel.num_rows, epoch_to, np.int64)))
            return prepare_sst(self.store, self.engine, rel.select(full.names).replace_schema_metadata(None),
                               self.key_dir, self.pk, epoch_from, epoch_to, ordered=ordered)
        rel = self._staged_rows(staged, epoch_to)
        if self.engine.num_rows(rel) == 0:
            return None
        return prepare_sst(self.store, self.engine, rel, self.key_dir, self.pk, epoch_from, epoch_to)

    def _write(self, rel, epoch_from: int, epoch_to: int) -> list[SstFile]:
        if hasattr(self.engine, "write_files"):
            return self.engine.write_files(rel, self.store, self.key_dir, self.pk, self._scan().schema,
                                           epoch_from, epoch_to)
        return [write_sst(self.store, self.engine, rel, self.key_dir, self.pk, epoch_from, epoch_to)]

    # -- compaction ----------------------------------------------------------------------------
    def compact_all(self) -> tuple[list[SstFile], list[str]]:
        """Merge every file into one, dropping tombstones (maintenance, not part of a step)."""
        dropped: list[str] = []
        while len(self.files) > 1:
            before = len(self.files)
            _, gone = self.compact(1)
            dropped.extend(gone)
            if len(self.files) >= before:
                break
        return self.files, dropped

    def compact(self, max_files: int) -> tuple[list[SstFile], list[str]]:
        """Merge the newest small files when there are more than `max_files` (size-tiered).

        Returns the new file list and the keys of the files it replaced. Tombstones are dropped only
        when the merge includes the oldest file (nothing older can be shadowed then).
        """
        start = self.compaction_start(max_files)
        if start is None:
            return self.files, []
        merged = self.merge_files(start)
        group = self.files[start:]
        self.files = self.files[:start] + [f for f in merged if f.rows]
        return self.files, [f.key for f in group]

    def compaction_start(self, max_files: int) -> int | None:
        """Where the files to merge begin when there are more than `max_files` runs (the newest
        ones, each older run joining while it has at most twice the rows of those after it: rows,
        not bytes, as small files are written less compactly than large ones), else None. A run
        of several files (a large step's, written by Spark) is taken or left whole, and is merged
        only on Spark: in-process merges take only the single files after the newest such run."""
        groups = manifests.runs(self.files)
        if len(groups) <= max_files:
            return None
        in_process = isinstance(self.engine, DuckEngine)
        sizes = [sum(f.rows for f in g) for g in groups]
        start = len(groups) - 1
        total = sizes[-1]
        if in_process and len(groups[start]) > 1:
            return None
        while start > 0:
            if in_process and len(groups[start - 1]) > 1:
                break
            if len(groups) - start < 2 or sizes[start - 1] <= 2 * total or max_files <= 1:
                start -= 1
                total += sizes[start]
            else:
                break
        if start == len(groups) - 1:  # nothing to merge it with
            return None
        return sum(len(g) for g in groups[:start])

    def merge_files(self, start: int, hold: bool = False) -> list:
        """Write files[start:] merged (each key's newest version; tombstones too unless the merge
        includes the oldest file): one file in-process, a run of files on Spark, written by its
        executors. The file list itself is left as it is. `hold`: an in-process merge small enough
        to decode leaves its file in scratch space, a HeldFile for the step that adopts it to store
        (the others are SstFiles, stored)."""
        group = self.files[start:]
        full_merge = start == 0
        if not isinstance(self.engine, DuckEngine):
            source = StateTable(self.store, self.engine, self.key_dir, self.pk, self.schema, group)._scan()
            rel = self.engine.sql(self._merge_query(full_merge), rw_state=source)
            return self._write(rel, group[0].epoch_from, group[-1].epoch_to)
        if sst_cache.too_large([self.store.path_for_cache(f.key) for f in group]):
            return [self._merge_streaming(group, full_merge)]
        # in-process: merge the decoded files the cache already holds
        full = self._scan().schema
        source = pa.concat_tables([sst_cache.read(self.store.path_for_cache(f.key)).select(full.names).cast(full)
                                   for f in group])
        rel = self._merge_in_arrow(source, full_merge)
        if rel is None:
            rel = self.engine.sql(self._merge_query(full_merge), rw_state=source)
        if hold:
            held = prepare_sst(self.store, self.engine, rel, self.key_dir, self.pk, group[0].epoch_from,
                               group[-1].epoch_to).hold()
            merged = held.file
        else:
            (merged,) = self._write(rel, group[0].epoch_from, group[-1].epoch_to)
        path = self.store.cache_path(merged.key)
        if not full_merge:  # lookups' map of the file holding each key follows the merge
            sst_cache.note_merge(path, [self.store.path_for_cache(f.key) for f in group])
        cols = sst_cache.usable_prefix(self.schema, self.pk) if self.pk and merged.rows else []
        if cols and sst_cache.cached(path) is not None:
            sst_cache.build_indexes(path, cols)  # here (off the step's path when merging in the background)
        return [held if hold else merged]

    def _merge_streaming(self, group: list[SstFile], full_merge: bool) -> SstFile:
        """merge_files() for files too large to decode: DuckDB reads them and writes the merged
        file, spilling to disk what does not fit in memory."""
        tmp = os.path.join(self.store.scratch_dir(), f"{uuid.uuid4().hex}.parquet")
        rows = write_query(self._merge_query(full_merge), tmp, self.pk, rw_state=self._scan(group))
        name = f"{group[0].epoch_from:020d}-{group[-1].epoch_to:020d}-{uuid.uuid4().hex[:12]}.parquet"
        size = os.path.getsize(tmp)
        self.store.upload_file(tmp, f"{self.key_dir}/{name}")
        return SstFile(key=f"{self.key_dir}/{name}", epoch_from=group[0].epoch_from, epoch_to=group[-1].epoch_to,
                       rows=rows, bytes=size)

    def _merge_query(self, full_merge: bool) -> str:
        """Files' rows merged into one file's: each key's newest version; tombstones too unless
        nothing older can be shadowed (`full_merge`)."""
        cols = ", ".join(quote(c) for c in self.columns)
        part = ", ".join(quote(c) for c in self.pk) if self.pk else "1"
        return (
            f"SELECT {cols}, {EPOCH}, {DELETED} FROM (SELECT *, row_number() OVER (PARTITION BY {part} "
            f"ORDER BY {EPOCH} DESC) AS _rn FROM rw_state) rw_m WHERE _rn = 1"
            + (f" AND NOT {DELETED}" if full_merge else "")
        )

    def _merge_in_arrow(self, source: pa.Table, full_merge: bool) -> pa.Table | None:
        """_merge_query's answer computed in Arrow, or None to run the query: `source` is the
        group's files concatenated oldest first, each holding a key at most once, so a stable sort
        by key puts each key's newest version last among its rows. Integer-like keys only."""
        if not self.pk or source.num_rows == 0:
            return None
        codes = sst_cache.order_codes(source, self.pk)
        if codes is None:
            return None
        order, ordered = sst_cache.sorted_order(codes, runs=True)
        newest = order[np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))]
        merged = source.take(pa.array(newest))
        return merged.filter(pc.invert(merged.column(DELETED))) if full_merge else merged


PACKED_ROWS = 100_000  # a step file of fewer rows goes into its commit's pack (if small enough in bytes)


class PreparedSst:
    """A step file whose name and rows are fixed (Arrow rows sorted, and cached for this process's
    readers) but which is not written yet: `finish()` writes and uploads it (or, with `pack`
    set, hands it to the commit's pack: storage.pack)."""

    pack = None

    def __init__(self, store: ObjectStore, engine: Engine, key: str, rel, table: pa.Table | None,
                 sort_keys: list[str], epoch_from: int, epoch_to: int, order=None):
        self.store, self.engine, self.key, self.rel, self.table = store, engine, key, rel, table
        self.sort_keys, self.epoch_from, self.epoch_to, self.order = sort_keys, epoch_from, epoch_to, order

    def provisional(self) -> SstFile:
        """Its entry before it is written (size unknown): for this process's downstream steps."""
        return SstFile(key=self.key, epoch_from=self.epoch_from, epoch_to=self.epoch_to,
                       rows=self.table.num_rows if self.table is not None else 0, bytes=0)

    def finish(self) -> SstFile:
        self._sort()
        if self.table is not None and self.pack is not None and self.table.num_rows < PACKED_ROWS:
            # a small file of a commit that packs its files: encoded in memory, into the pack as is
            data = parquet_bytes(self.table, self.sort_keys)
            if self.pack.add(self.key, data):
                sst_cache.written(self.store.cache_path(self.key))
                return SstFile(key=self.key, epoch_from=self.epoch_from, epoch_to=self.epoch_to,
                               rows=self.table.num_rows, bytes=len(data))
            return self.hold(data).put(self.pack)  # too large for the pack after all: a file of its own
        return self.hold().put(self.pack)

    def hold(self, data: bytes | None = None) -> HeldFile:
        """Write the file to scratch space (`data`: its Parquet bytes, already encoded), not yet
        stored: HeldFile.put() puts it into a commit's pack or uploads it alone."""
        self._sort()
        tmp = os.path.join(self.store.scratch_dir(), f"{uuid.uuid4().hex}.parquet")
        if data is not None:
            with open(tmp, "wb") as f:
                f.write(data)
            rows = self.table.num_rows
        elif self.table is not None:
            write_parquet(self.table, tmp, self.sort_keys)
            rows = self.table.num_rows
        else:
            rows = self.engine.write_parquet(self.rel, tmp, self.sort_keys)
        file = SstFile(key=self.key, epoch_from=self.epoch_from, epoch_to=self.epoch_to, rows=rows,
                       bytes=os.path.getsize(tmp))
        return HeldFile(self.store, file, tmp, self.table is not None)

    def _sort(self) -> None:
        if self.order is not None:  # sorted here, on the writer thread; the cache gets the sorted rows
            self.table, self.order = self.table.take(pa.array(self.order())), None
            sst_cache.replace(self.store.cache_path(self.key), self.table)


class HeldFile:
    """A finished file in scratch space that no store holds yet. A background merge writes its
    file so, and the step that adopts the merge stores it with its own files: in the commit's pack
    when small (no request of its own), else uploaded alone."""

    def __init__(self, store: ObjectStore, file: SstFile, path: str, cached: bool):
        self.store, self.file, self.path, self._cached = store, file, path, cached

    def put(self, pack=None) -> SstFile:
        if pack is None or not pack.take(self.path, self.file.key):
            self.store.upload_file(self.path, self.file.key)
        if self._cached:  # readers of a file too large for the cache map it from now on
            sst_cache.written(self.store.cache_path(self.file.key))
        return self.file

    def discard(self) -> None:
        """Not adopted: the scratch file and the rows kept decoded for it go."""
        sst_cache.discard(self.store.cache_path(self.file.key))
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def prepare_sst(store: ObjectStore, engine: Engine, rel, key_dir: str, sort_keys: list[str],
                epoch_from: int, epoch_to: int, ordered: bool = False, order=None) -> PreparedSst:
    """A step file to be (`ordered`: Arrow rows already sorted by `sort_keys`, as are rows marked
    so by in_key_order; `order`: a function giving the row order that sorts them, called when the
    file is written, this process's readers meanwhile reading the rows as they are, unchunked
    only then)."""
    name = f"{epoch_from:020d}-{epoch_to:020d}-{uuid.uuid4().hex[:12]}.parquet"
    key = f"{key_dir}/{name}"
    if isinstance(rel, pa.Table) and rel.schema.metadata and KEY_ORDER in rel.schema.metadata:
        ordered = ordered or rel.schema.metadata[KEY_ORDER] == ",".join(sort_keys).encode()
        rel = rel.replace_schema_metadata(None)
    intervals = isinstance(rel, pa.Table) and any(pa.types.is_interval(f.type) for f in rel.schema)
    if order is not None and isinstance(rel, pa.Table) and not intervals:
        sst_cache.put(store.cache_path(key), rel, combine=False)
        return PreparedSst(store, engine, key, rel, rel, sort_keys, epoch_from, epoch_to, order=order)
    table = (rel if ordered and not intervals else sort_for_sst(rel, sort_keys)) if isinstance(rel, pa.Table) else None
    if table is not None:
        sst_cache.put(store.cache_path(key), table)
    return PreparedSst(store, engine, key, rel, table, sort_keys, epoch_from, epoch_to)


def write_sst(store: ObjectStore, engine: Engine, rel, key_dir: str, sort_keys: list[str],
              epoch_from: int, epoch_to: int) -> SstFile:
    """Write one immutable file sorted by `sort_keys`, named by its epoch range, under `key_dir`.
    Arrow input is sorted and written here and kept decoded in the cache for its first readers."""
    return prepare_sst(store, engine, rel, key_dir, sort_keys, epoch_from, epoch_to).finish()


def sort_for_sst(table: pa.Table, keys: list[str]) -> pa.Table | None:
    """An Arrow table sorted by `keys` (NULLs first, as DuckDB writes them), or None when Parquet
    cannot hold a column type (intervals: DuckDB writes those)."""
    if any(pa.types.is_interval(f.type) for f in table.schema):
        return None
    return sst_cache.sorted_for_file(table, keys)


def write_sorted(table: pa.Table, path: str, keys: list[str]) -> pa.Table | None:
    """Sort an Arrow table by `keys` and write it as Parquet. Returns the sorted table, or None
    when Parquet cannot hold a column type (intervals)."""
    table = sort_for_sst(table, keys)
    if table is not None:
        write_parquet(table, path, keys)
    return table
