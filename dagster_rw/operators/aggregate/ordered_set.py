"""Ordered-set aggregates (PERCENTILE_CONT, PERCENTILE_DISC, MODE, APPROX_PERCENTILE) by
materialized input: per group the count of each distinct non-NULL ORDER BY value (`ocount<i>`,
written by Ordered.ordered_step), a touched group's result read from its values in order with
their counts, as PostgreSQL computes it:

- percentile_disc(f): the first value whose row number (1-based, in order) reaches ceil(f * n);
- percentile_cont(f): rows floor(f * (n - 1)) and ceil(f * (n - 1)) (0-based), interpolated as
  double precision: lo + (f * (n - 1) - floor(f * (n - 1))) * (hi - lo);
- mode(): the most frequent value, the first in order among equally frequent ones;
- approx_percentile(f, e): exact, percentile_disc(f)'s value as double precision (its error is 0,
  within any relative error e).

Values sort as PostgreSQL sorts them: NaN above every other number."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import types as sqltypes


def ordered_set_value(func: str, direct: tuple[float, ...], values: list, counts: np.ndarray):
    """The aggregate over one group's distinct values in the aggregate's order, each with its count."""
    if func == "mode":
        return values[int(np.argmax(counts))]  # argmax: the first of equal counts
    cum = np.cumsum(counts)
    n = int(cum[-1])
    fraction = direct[0]

    def at(row: int):  # the value at a 0-based row number
        return values[int(np.searchsorted(cum, row + 1, side="left"))]

    if func in ("percentile_disc", "approx_percentile"):
        value = at(max(math.ceil(fraction * n), 1) - 1)
        return float(value) if func == "approx_percentile" else value
    position = fraction * (n - 1)
    first, second = math.floor(position), math.ceil(position)
    lo = float(at(first))
    if first == second:
        return lo
    return lo + (position - first) * (float(at(second)) - lo)


class OrderedSet:
    """AggregateOp's ordered-set aggregates."""

    def ordered_set_results(self, i: int, rows: pa.Table, touched: pa.Table) -> pa.Table:
        """Per touched group, aggregate i over its rows (group, `v`, `cnt`): NULL for a group with none."""
        a = self.node.aggs[i]
        desc = bool(a.order and a.order[0][1])
        # ascending, NaN last (as PostgreSQL orders numbers); DESC reads each group backwards
        rows = rows.take(pc.sort_indices(rows, sort_keys=[(g, "ascending") for g in self.groups] + [("v", "ascending")]))
        groups = [rows.column(g).to_pylist() for g in self.groups]
        values = rows.column("v").to_pylist()
        counts = rows.column("cnt").to_numpy()
        per_group: dict[tuple, object] = {}
        start = 0
        for r in range(1, rows.num_rows + 1):
            if r < rows.num_rows and all(g[r] == g[start] for g in groups):
                continue
            vals, cnts = values[start:r], counts[start:r]
            if desc:
                vals, cnts = vals[::-1], cnts[::-1]
            per_group[tuple(g[start] for g in groups)] = ordered_set_value(a.func, a.direct, vals, cnts)
            start = r
        keys = zip(*[touched.column(g).to_pylist() for g in self.groups]) if self.groups else [()] * touched.num_rows
        results = [per_group.get(key) for key in keys]
        out_type = sqltypes.arrow_type(self.node.columns[self.ng + i].type)
        return pa.table({**{g: touched.column(g) for g in self.groups},
                         "res": pa.array(results, out_type),
                         "g_touched": pa.array(np.ones(len(results), bool))})
