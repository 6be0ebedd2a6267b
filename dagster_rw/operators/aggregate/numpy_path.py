"""The aggregate's step with numpy where group and value are integers: per-group sums and MIN/MAX
value counts by weighted counts over group slots (np.bincount) or by sorted key codes, each
answering as the SQL of the general path does, or None to leave it to that SQL."""
from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...sql.plan import cname
from ...storage import sst_cache
from ...storage.state_table import in_key_order
from ..base import DELETED, W


class NumpyPath:
    """AggregateOp's numpy paths."""

    def _group_slots(self, column):
        """_group_slots of a group column, computed once per step: the sums and the extremes by
        counting both take the slots of the delta's group column (~0.5 ms for 100k rows)."""
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        if len(chunks) != 1:
            return _group_slots(column)
        buffers = chunks[0].buffers()
        key = (buffers[1].address if buffers[1] is not None else None, chunks[0].offset, len(chunks[0]))
        memo = getattr(self, "_slots_memo", None)
        # the memo holds the column it was computed for: while it lives, no other column has its buffer
        if memo is not None and memo[0] == key:
            return memo[2]
        slots = _group_slots(column)
        self._slots_memo = (key, column, slots)
        return slots

    def group_deltas_by_counting(self, d: pa.Table, linear: list) -> pa.Table | None:
        """group_deltas_in_arrow's answer by weighted counts per group value (np.bincount), for one
        integer group column without NULLs whose values span a range not much wider than the
        delta; exact while every sum stays below 2**53 (so there are at most 2**22 rows of weight
        1, each value a 32-bit integer). Groups come out in order. None when that does not hold."""
        (g,) = self.groups if len(self.groups) == 1 else (None,)
        slots = self._group_slots(d.column(g)) if g is not None else None
        w = d.column(W).to_numpy()
        if slots is None or int(np.abs(w).max()) * len(w) >= 1 << 22:
            return None
        lo, span, slot, present = slots

        def summed(weights) -> np.ndarray:
            return np.bincount(slot, weights=weights, minlength=span)[present].astype(np.int64)

        columns = {g: pa.array(present + lo).cast(d.schema.field(g).type), "dcnt": pa.array(summed(w))}
        for i, a in linear:
            x = d.column(cname(a.arg))
            valid = np.asarray(x.is_valid()) if x.null_count else None
            if a.func in ("sum", "avg"):
                values = x.fill_null(0).to_numpy().astype(np.int64) if valid is not None else x.to_numpy()
                sums = summed(values * w)
                # a group whose values were all NULL sums to NULL, as SQL's sum does
                nonnull = summed(valid) > 0 if valid is not None else None
                columns[f"ds{i}"] = pa.array(sums, mask=None if nonnull is None else ~nonnull)
            columns[f"dn{i}"] = pa.array(summed(np.where(valid, w, 0) if valid is not None else w))
        return pa.table(columns)

    def counts_in_numpy(self, d, a, counts, old, i: int):
        """The count changes of a MIN/MAX, staged, and groups_losing_extreme's answer, without SQL,
        when the value is an integer and the group one integer column, or two small-integer
        columns (coded into one sortable number): (dm, per_group), or None to take the SQL path."""
        x = cname(a.arg)
        if not isinstance(d, pa.Table) or not isinstance(old, pa.Table) or a.distinct or len(self.groups) > 2 \
                or not pa.types.is_integer(d.schema.field(x).type):
            return None
        keys = self.groups + ["v"]
        sub = d.select(self.groups + [x, W]).rename_columns(keys + [W])
        if sub.column("v").null_count:
            sub = sub.filter(pc.is_valid(sub.column("v")))
        if sub.num_rows:
            counted = self.extremes_by_counting(sub, a, counts, old, i)
            if counted is not None:
                return counted
        gcodes_old = sst_cache.key_codes(old, self.groups) if self.groups else np.zeros(old.num_rows, np.int8)
        if len(self.groups) == 2:  # two group columns and the value: sorted by the groups' code, then the value
            pair = sst_cache.key_codes(sub, self.groups)
            if pair is None or gcodes_old is None:
                return None
            dm = _count_changes_by_group(sub, keys, pair)
        else:
            codes = sst_cache.key_codes(sub, keys)
            if codes is None or gcodes_old is None:
                return None
            dm = _count_changes(sub, keys, codes)
        if dm is None:
            return None  # nothing changes the counts (SQL's answer covers a global aggregate's one row)
        dc = dm.column("dc").to_numpy()
        counts.stage(dm.rename_columns(keys + ["cnt"]).append_column(DELETED, pa.array(np.zeros(len(dc), bool))))
        # per group: the best value added (a row with dc > 0; rows are in value order per group)
        gcodes = sst_cache.key_codes(dm, self.groups) if self.groups else np.zeros(len(dc), np.int8)
        gstarts = np.flatnonzero(np.concatenate(([True], gcodes[1:] != gcodes[:-1])))
        rows = np.arange(len(dc))
        added = dc > 0
        if a.func == "max":
            best = np.maximum.reduceat(np.where(added, rows, -1), gstarts)
            has_best = best >= 0
        else:
            best = np.minimum.reduceat(np.where(added, rows, len(rows)), gstarts)
            has_best = best < len(rows)
        ins_best = dm.column("v").take(pa.array(np.where(has_best, best, 0), mask=~has_best))
        # the old extreme of each touched group
        old_best = np.zeros(len(gstarts), np.int64)
        old_valid = np.zeros(len(gstarts), bool)
        m_old = old.column(f"m{i}")
        if old.num_rows:
            pos = np.minimum(np.searchsorted(gcodes[gstarts], gcodes_old), len(gstarts) - 1)
            hit = (gcodes[gstarts][pos] == gcodes_old) & np.asarray(m_old.is_valid())
            old_best[pos[hit]] = m_old.filter(pa.array(hit)).cast(pa.int64()).to_numpy()
            old_valid[pos[hit]] = True
        value = dm.column("v").cast(pa.int64()).to_numpy()
        group_of = np.repeat(np.arange(len(gstarts)), np.diff(np.append(gstarts, len(rows))))
        # the old extreme lost copies: did it lose its last one? (its old count, from the state)
        at_old = np.flatnonzero((dc < 0) & old_valid[group_of] & (value == old_best[group_of]))
        lost = np.zeros(len(gstarts), bool)
        if len(at_old):
            probe = dm.select(keys).take(pa.array(at_old))
            found = counts.lookup(probe, keys)
            old_c = np.zeros(len(at_old), np.int64)
            if found.num_rows:
                old_c[_positions(probe, found, keys)] = found.column("cnt").to_numpy()
            lost[group_of[at_old[old_c + dc[at_old] <= 0]]] = True
        per_group = pa.table({**{g: dm.column(g).take(pa.array(gstarts)) for g in self.groups},
                              "ins_best": ins_best, "lost": pa.array(lost),
                              "g_touched": pa.array(np.ones(len(gstarts), bool))})
        return dm, per_group

    def extremes_by_counting(self, sub: pa.Table, a, counts, old: pa.Table, i: int):
        """counts_in_numpy's answer without sorting the delta, for one integer group column without
        NULLs over a narrow range of values and a value of at most 32 bits: per group, the best
        added value is the extreme of the values added (weight > 0) if its count grows, and the
        old extreme is lost if its count drops to zero; both are weighted counts per group
        (np.bincount). Groups whose candidate's count does not grow (a value added and removed
        again) are settled exactly from their own rows. The count changes per (group, value),
        sorted, are computed on the writer thread that writes them. None when that does not hold."""
        (g,) = self.groups if len(self.groups) == 1 else (None,)
        if g is None or not all(sst_cache.is_small_int(sub.schema.field(c).type) for c in (g, "v")) \
                or old.column(g).null_count:
            return None
        slots = self._group_slots(sub.column(g))
        if slots is None:
            return None
        lo, span, slot, touched = slots
        gtype, vtype = sub.schema.field(g).type, sub.schema.field("v").type
        keys = self.groups + ["v"]
        sign = 1 if a.func == "max" else -1  # work on values whose maximum is the extreme
        value = sub.column("v").to_numpy().astype(np.int64) * sign
        w = sub.column(W).to_numpy()

        def per_group(mask, weights) -> np.ndarray:
            return np.bincount(slot[mask], weights=weights[mask], minlength=span).astype(np.int64)

        floor = np.iinfo(np.int64).min
        best = np.full(span, floor, np.int64)
        added = w > 0
        np.maximum.at(best, slot[added], value[added])
        has_best = best > floor
        grows = per_group(value == best[slot], w) > 0
        unsure = np.flatnonzero(has_best & ~grows)
        if len(unsure):  # settle those groups from their rows: each value's net change
            flagged = np.zeros(span, bool)
            flagged[unsure] = True
            mine = flagged[slot]
            best[unsure] = _best_growing(slot[mine], value[mine], w[mine], span)[unsure]
            has_best = best > floor
        # the old extreme of each group and the net change of its count
        old_slot = old.column(g).to_numpy() - lo
        inside = (old_slot >= 0) & (old_slot < span)
        m_old = old.column(f"m{i}")
        valid = inside & np.asarray(m_old.is_valid())
        old_best = np.zeros(span, np.int64)
        has_old = np.zeros(span, bool)
        old_best[old_slot[valid]] = m_old.filter(pa.array(valid)).cast(pa.int64()).to_numpy() * sign
        has_old[old_slot[valid]] = True
        at_old = has_old[slot] & (value == old_best[slot])
        change = per_group(at_old, w)
        lost = np.zeros(span, bool)
        probe_slots = np.flatnonzero(has_old & (change < 0))
        if len(probe_slots):  # its last copies may be gone: its old count, from the state
            probe = pa.table({g: pa.array(probe_slots + lo).cast(gtype),
                              "v": pa.array(old_best[probe_slots] * sign).cast(vtype)})
            found = counts.lookup(probe, keys)
            old_count = np.zeros(len(probe_slots), np.int64)
            if found.num_rows:
                at = np.searchsorted(sst_cache.key_codes(probe, keys), sst_cache.key_codes(found, keys))
                old_count[at] = found.column("cnt").to_numpy()
            lost[probe_slots[old_count + change[probe_slots] <= 0]] = True
        counts.stage(partial(_count_change_writes, sub, keys))  # sorted and written on a writer thread
        ins_best = pa.array(best[touched] * sign, mask=~has_best[touched]).cast(vtype)
        per_group_table = pa.table({g: pa.array(touched + lo).cast(gtype), "ins_best": ins_best,
                                    "lost": pa.array(lost[touched]),
                                    "g_touched": pa.array(np.ones(len(touched), bool))})
        # the rows of the groups that lost their extreme: minput_step recomputes it from them
        gone = sub.filter(pa.array(lost[slot])).select(keys + [W]).rename_columns(keys + ["dc"])
        return gone, per_group_table


def _group_slots(column) -> tuple[int, int, np.ndarray, np.ndarray] | None:
    """For an integer group column without NULLs whose values span a range not much wider than
    its rows: (lowest value, span, each row's slot (value - lowest), the slots that occur, in
    order); None otherwise (the callers then sort or hash)."""
    if not pa.types.is_integer(column.type) or column.null_count or not len(column):
        return None
    values = column.to_numpy()
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 4 * len(values) + (1 << 16):
        return None
    slot = (values - lo).astype(np.intp)
    return lo, hi - lo + 1, slot, np.flatnonzero(np.bincount(slot, minlength=hi - lo + 1))


def _count_changes(sub: pa.Table, keys: list[str], codes: np.ndarray) -> pa.Table | None:
    """Per (group, value) the change in its count (`dc`, nonzero), sorted by group, then value, from
    rows of `keys` and weights whose key codes are `codes`; None when every change is zero."""
    order, ordered = sst_cache.sorted_order(codes)
    if not len(codes):
        return None
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    dc = np.add.reduceat(sub.column(W).to_numpy()[order], starts)
    keep = dc != 0
    if not keep.all():
        dc, starts = dc[keep], starts[keep]
    if not len(dc):
        return None
    # the keys from their codes (no gather from the rows), where the coding can be undone
    columns = sst_cache.decode_codes(ordered[starts], [sub.schema.field(k).type for k in keys])
    if columns is None:
        return sub.select(keys).take(pa.array(order[starts])).append_column("dc", pa.array(dc))
    return pa.Table.from_arrays(columns + [pa.array(dc)], names=keys + ["dc"])


def _count_changes_by_group(sub: pa.Table, keys: list[str], group_codes: np.ndarray) -> pa.Table | None:
    """_count_changes for two group columns and the value (three key columns, more than one code
    holds): the rows sorted by the groups' code (key_codes of the two, order-preserving), then by
    the value."""
    if not sub.num_rows:
        return None
    value = sub.column("v").combine_chunks().to_numpy(zero_copy_only=False)
    order = np.lexsort((value, group_codes))
    g, v = group_codes[order], value[order]
    starts = np.flatnonzero(np.concatenate(([True], (g[1:] != g[:-1]) | (v[1:] != v[:-1]))))
    dc = np.add.reduceat(sub.column(W).to_numpy()[order], starts)
    keep = dc != 0
    if not keep.any():
        return None
    rows = order[starts[keep]]
    return sub.select(keys).take(pa.array(rows)).append_column("dc", pa.array(dc[keep]))


def _positions(probe: pa.Table, found: pa.Table, keys: list[str]) -> np.ndarray:
    """For each row of `found` (rows of the state table, keyed by `keys`), the position of the row
    of `probe` (sorted by `keys`, unique) with its key."""
    codes = sst_cache.key_codes(probe, keys)
    if codes is not None:
        return np.searchsorted(codes, sst_cache.key_codes(found, keys))
    at = {k: n for n, k in enumerate(zip(*(probe.column(c).to_pylist() for c in keys)))}
    return np.array([at[k] for k in zip(*(found.column(c).to_pylist() for c in keys))], np.int64)


def _count_change_writes(sub: pa.Table, keys: list[str]) -> pa.Table:
    """The value-count state's writes for a step's rows (AggregateOp.extremes_by_counting)."""
    dm = _count_changes(sub, keys, sst_cache.key_codes(sub, keys))
    if dm is None:
        dm = sub.select(keys).slice(0, 0).append_column("dc", pa.array([], pa.int64()))
    return in_key_order(dm.rename_columns(keys + ["cnt"]).append_column(
        DELETED, pa.array(np.zeros(dm.num_rows, bool))), keys)


def _best_growing(slot: np.ndarray, value: np.ndarray, w: np.ndarray, span: int) -> np.ndarray:
    """Per group slot, the greatest value whose net count change (sum of weights) is positive
    (int64 minimum where none is)."""
    order = np.lexsort((value, slot))
    slot, value, w = slot[order], value[order], w[order]
    starts = np.flatnonzero(np.concatenate(([True], (slot[1:] != slot[:-1]) | (value[1:] != value[:-1]))))
    net = np.add.reduceat(w, starts)
    best = np.full(span, np.iinfo(np.int64).min, np.int64)
    grow = starts[net > 0]
    np.maximum.at(best, slot[grow], value[grow])
    return best
