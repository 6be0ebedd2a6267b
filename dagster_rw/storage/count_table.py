"""A counting state table: each file holds changes of counts per key, and a key's count is their sum.

Where a state table's values are counts (how many copies of each value a group holds, for MIN, MAX
and COUNT DISTINCT), a step need not read a key's old count to write its new one: it writes the
change, and readers add up the changes of every file (the merge operator of an LSM tree such as
RocksDB's). Writes are blind, so a step reads counts only where it must decide something from them.
A key whose changes sum to zero is absent; merging files drops such keys at any level, since a zero
adds nothing to what older files hold.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..engine.duck import DuckEngine, quote
from . import sst_cache
from .state_table import DELETED, EPOCH, StateTable


class CountTable(StateTable):
    """Rows are the primary key plus count columns; `stage` takes count changes (with `_del` false)."""

    @property
    def counts(self) -> list[str]:
        return [c for c in self.columns if c not in self.pk]

    def _summed(self, where: str = "", extra: str = "") -> str:
        """rw_state's rows (those meeting `where`) added up per key, without the keys summing to zero."""
        pk = ", ".join(quote(c) for c in self.pk)
        sums = ", ".join(f"CAST(sum({quote(c)}) AS BIGINT) AS {quote(c)}" for c in self.counts)
        nonzero = " OR ".join(f"sum({quote(c)}) <> 0" for c in self.counts)
        return (f"SELECT {pk}, {sums}{extra} FROM rw_state{' WHERE ' + where if where else ''} "
                f"GROUP BY {pk} HAVING {nonzero}")

    def _merged(self, where: str) -> str:
        return self._summed(where)

    def _lookup_by_search(self, keys: pa.Table, on: list[str], cols: list[str]):
        """Every file's changes for the wanted keys, added up per key (no file shadows another)."""
        wanted, want_null = sst_cache.encode_keys(keys, cols, self.schema)
        full = self._scan().schema
        unique = list(cols) == list(self.pk)
        parts = []
        for f in self.files:
            rows = sst_cache.rows_matching(self.store.path_for_cache(f.key), cols, wanted, want_null, unique=unique,
                                           columns=self.columns)
            if rows is None:
                return None
            if rows.num_rows:
                parts.append(rows.cast(pa.schema([full.field(n) for n in self.columns])))
        candidates = pa.concat_tables(parts) if parts else self.schema.empty_table()
        one_file = len(parts) <= 1
        if len(on) > len(cols):  # the search narrowed by a prefix of `on`: the rest decides here
            cond = " AND ".join(f"rw_keys.{quote(c)} IS NOT DISTINCT FROM rw_state.{quote(c)}" for c in on)
            return self.engine.sql(self._merged(f"EXISTS (SELECT 1 FROM rw_keys WHERE {cond})"),
                                   rw_state=candidates, rw_keys=keys)
        return self.sum_per_key(candidates, one_file)

    def sum_per_key(self, rows: pa.Table, one_file: bool = False) -> pa.Table:
        """Rows of count changes added up per primary key, without the keys that sum to zero
        (`one_file`: the rows come from one file, which holds each key once)."""
        if not rows.num_rows:
            return self.schema.empty_table()
        if one_file:
            single = rows
        else:
            codes = sst_cache.key_codes(rows, self.pk)
            if codes is not None:
                order, ordered = sst_cache.sorted_order(codes, runs=True)  # files' rows, each file in key order
                starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
                single = rows.select(self.pk).take(pa.array(order[starts]))
                for c in self.counts:
                    summed = np.add.reduceat(rows.column(c).to_numpy()[order], starts)
                    single = single.append_column(c, pa.array(summed, self.schema.field(c).type))
            else:  # keys that do not code as integers (NULLs, strings): the engine adds them up
                single = self.engine.to_arrow(self.engine.sql(self._merged(""), rw_state=rows))
                return single.select(self.columns).cast(self.schema)
        nonzero = None
        for c in self.counts:
            m = pc.not_equal(single.column(c), 0)
            nonzero = m if nonzero is None else pc.or_(nonzero, m)
        return single.filter(nonzero).select(self.columns).cast(self.schema)

    def find(self, keys: pa.Table, cols: list[str]):
        return None  # a key's row is a sum over files, not one file's row

    def _merge_query(self, full_merge: bool) -> str:
        return self._summed(extra=f", CAST(max({EPOCH}) AS BIGINT) AS {EPOCH}, false AS {DELETED}")

    def _merge_in_arrow(self, source: pa.Table, full_merge: bool) -> pa.Table | None:
        if not isinstance(self.engine, DuckEngine):
            return None
        summed = self.sum_per_key(source.select(self.columns))
        epoch = pc.max(source.column(EPOCH)).as_py() if source.num_rows else 0
        return summed.append_column(EPOCH, pa.array(np.full(summed.num_rows, epoch, np.int64))).append_column(
            DELETED, pa.array(np.zeros(summed.num_rows, bool)))


__all__ = ["CountTable"]
