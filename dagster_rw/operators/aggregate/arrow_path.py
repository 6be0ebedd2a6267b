"""The aggregate's step with Arrow's kernels where the types allow: the per-group deltas, the join
of new and old accumulators (MIN/MAX included) and the output rows, each answering as the SQL of
the general path does, or None to leave it to that SQL."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import types as sqltypes
from ...sql.plan import ORDERED_AGGS, cname
from ..base import W, consolidate
from .value_state import MINPUT

def _left_join_small(left: pa.Table, right: pa.Table, keys: list[str]) -> pa.Table | None:
    """`left` with the columns of `right`'s row of the same key (NULLs where none; keys unique in
    `right`), by a dict of the keys: for the few groups of a small epoch, where a hash join's
    setup costs more than the join. None for many rows, or key types a dict would not compare as
    SQL does (floating point: NaN)."""
    if left.num_rows > 2000 or right.num_rows > 2000 or not all(
            pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t)
            for t in (left.schema.field(k).type for k in keys)):
        return None
    at = {k: i for i, k in enumerate(zip(*[right.column(k).to_pylist() for k in keys]))}
    rows = pa.array([at.get(k) for k in zip(*[left.column(k).to_pylist() for k in keys])], pa.int64())
    taken = right.drop_columns(keys).take(rows)
    for name in taken.column_names:
        left = left.append_column(name, taken.column(name))
    return left


def _left_join_arrow(left: pa.Table, right: pa.Table, keys: list[str]) -> pa.Table:
    """`left` with the columns of `right`'s row of the same key (keys unique in `right`)."""
    j = _left_join_small(left, right, keys)
    if j is None:
        j = left.join(right, keys=keys, join_type="left outer", use_threads=False)
    return j


def _orders_as_sql(t: pa.DataType) -> bool:
    """Whether Arrow's min/max_element_wise order values of type `t` as SQL's least/greatest do:
    integers, strings (bytewise), dates and timestamps; floating point too, but with NaN (SQL:
    above every number; Arrow: skipped) checked on the values (_extreme_in_arrow)."""
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_date(t) or pa.types.is_timestamp(t))


def _extreme_in_arrow(func: str, j: pa.Table, i: int, out_type: pa.DataType):
    """MIN/MAX i's new extreme per joined group, as the CASE of `apply`'s query: an untouched group
    keeps its extreme; a group that lost it takes the recomputed one; else the better of the old
    extreme and the best added value. None where a value is NaN (the query then decides)."""
    was = j.column(f"o_m{i}").cast(out_type)
    ins = j.column(f"p{i}_ins_best").cast(out_type)
    rb = j.column(f"rc{i}_rb").cast(out_type) if f"rc{i}_rb" in j.column_names else pa.nulls(j.num_rows, out_type)
    if pa.types.is_floating(out_type) and any(pc.any(pc.is_nan(c)).as_py() for c in (was, ins)):
        return None
    both = (pc.min_element_wise if func == "min" else pc.max_element_wise)(was, ins)
    m = pc.if_else(pc.is_null(was), ins, pc.if_else(pc.is_null(ins), was, both))
    m = pc.if_else(pc.fill_null(j.column(f"p{i}_lost"), False), rb, m)
    return pc.if_else(pc.is_valid(j.column(f"p{i}_g_touched")), m, was)


def _outputs_equal(joined: pa.Table, outputs: list[str], rows: np.ndarray) -> np.ndarray | None:
    """Per row of `joined`, among `rows`, whether every output's new value `n_<c>` equals its old
    one `o_<c>` as SQL's GROUP BY compares them (NULL equals NULL, NaN equals NaN); None where
    Arrow cannot compare a column's type."""
    same = rows.copy()
    for c in outputs:
        x, y = joined.column("n_" + c), joined.column("o_" + c)
        try:
            eq = pc.equal(x, y)
            if eq.null_count:
                eq = pc.fill_null(pc.or_kleene(eq, pc.and_(pc.is_null(x), pc.is_null(y))), False)
            if pa.types.is_floating(x.type):
                eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(x), pc.is_nan(y)), False))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        same &= np.asarray(eq)
    return same


class ArrowPath:
    """AggregateOp's Arrow paths."""

    def joined_in_arrow(self, dg, old, rels: dict) -> pa.Table | None:
        """What the query in `apply` joins (each touched group's new accumulators, its old ones, and
        the output values of both, `n_<c>` and `o_<c>`) with Arrow's kernels, for grouped COUNT,
        SUM and AVG over BIGINT accumulators and MIN/MAX over values that Arrow orders as SQL does
        (see _extreme_in_arrow), groups without NULLs and outputs of BIGINT or DOUBLE (or MIN/MAX's
        value type); None otherwise, or when a sum overflows (the query then decides). `rels`: the
        query's relations, of which MIN/MAX's `p<i>` and `rc<i>` (minput_step) are joined here too."""
        node = self.node
        if not (isinstance(dg, pa.Table) and isinstance(old, pa.Table) and self.groups) or any(
                a.distinct or a.func in ORDERED_AGGS for a in node.aggs):
            return None
        acc = self.acc_columns()
        names = [n for n, _ in acc]
        extremes = [i for i, a in enumerate(node.aggs) if a.func in MINPUT]
        if not all(isinstance(rels.get(r), pa.Table) for i in extremes for r in (f"p{i}", f"rc{i}") if r in rels):
            return None
        outs = [sqltypes.arrow_type(node.columns[self.ng + i].type) for i in range(len(node.aggs))]
        if any(t != "bigint" for n, t in acc if not (n[0] == "m" and int(n[1:]) in extremes)) or any(
                t not in (pa.int64(), pa.float64()) for i, t in enumerate(outs) if i not in extremes) or any(
                not _orders_as_sql(outs[i]) for i in extremes) or any(dg.column(g).null_count for g in self.groups):
            return None
        try:
            o = old.select(self.groups + names).rename_columns(self.groups + ["o_" + n for n in names])
            j = _left_join_arrow(dg, o, self.groups)
            for i in extremes:  # each touched group's best added value and lost extreme, and its recomputed one
                p = rels[f"p{i}"].select(self.groups + ["ins_best", "lost", "g_touched"])
                j = _left_join_arrow(j, p.rename_columns(self.groups + [f"p{i}_ins_best", f"p{i}_lost", f"p{i}_g_touched"]),
                                     self.groups)
                if f"rc{i}" in rels:
                    rc = rels[f"rc{i}"].select(self.groups + ["rb"])
                    j = _left_join_arrow(j, rc.rename_columns(self.groups + [f"rc{i}_rb"]), self.groups)
            zero = pa.scalar(0, pa.int64())
            cols = {g: j.column(g) for g in self.groups}
            cols["cnt"] = pc.add_checked(pc.fill_null(j.column("o_cnt"), zero), j.column("dcnt"))
            for i, a in enumerate(node.aggs):
                if a.func in ("sum", "avg"):
                    ds, was = j.column(f"ds{i}"), j.column(f"o_s{i}")
                    cols[f"s{i}"] = pc.if_else(pc.is_null(ds), was,
                                               pc.if_else(pc.is_null(was), ds, pc.add_checked(was, ds)))
                elif a.func in MINPUT:
                    m = _extreme_in_arrow(a.func, j, i, outs[i])
                    if m is None:
                        return None
                    cols[f"m{i}"] = m
                if f"n{i}" in names:
                    cols[f"n{i}"] = pc.add_checked(pc.fill_null(j.column(f"o_n{i}"), zero), j.column(f"dn{i}"))
            for n in names:
                cols["o_" + n] = j.column("o_" + n)
            for p, alias in (("", "n_"), ("o_", "o_")):
                for i, a in enumerate(node.aggs):
                    if a.func == "count_star":
                        v = cols[f"{p}cnt"]
                    elif a.func == "count":
                        v = pc.fill_null(cols[f"{p}n{i}"], zero)
                    elif a.func in MINPUT:
                        v = cols[f"{p}m{i}"]
                    else:
                        some = pc.greater(cols[f"{p}n{i}"], 0)
                        total = cols[f"{p}s{i}"]
                        if a.func == "avg":
                            total = pc.divide(total.cast(pa.float64()), cols[f"{p}n{i}"].cast(pa.float64()))
                        v = pc.if_else(some, total, pa.scalar(None, total.type))
                    cols[alias + cname(self.ng + i)] = v.cast(outs[i])
            return pa.table(cols)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError):
            return None

    def group_deltas_in_arrow(self, d) -> pa.Table | None:
        """The per-group changes of the accumulators (dcnt, ds<i>, dn<i>, as the SQL in `apply`
        computes them) with Arrow's hash aggregation, when there are groups and every SUM/AVG/COUNT
        argument is an integer of at most 32 bits (so no sum of weighted values can overflow a
        BIGINT); None otherwise."""
        if not isinstance(d, pa.Table) or not self.groups:
            return None  # a global aggregate has its one row even over no input: SQL's GROUP BY ()
        acc_types = dict(self.acc_columns())
        linear = [(i, a) for i, a in enumerate(self.node.aggs)
                  if not (a.distinct or a.func in MINPUT or a.func in ORDERED_AGGS or a.func == "count_star")]
        for i, a in linear:
            t = d.schema.field(cname(a.arg)).type
            if not (pa.types.is_integer(t) and t.bit_width <= 32) or acc_types.get(f"s{i}", "bigint") != "bigint":
                return None
        counted = self.group_deltas_by_counting(d, linear)
        if counted is not None:
            return counted
        w = d.column(W)
        columns = {g: d.column(g) for g in self.groups}
        columns["dcnt"] = w
        for i, a in linear:
            x = d.column(cname(a.arg))
            if a.func in ("sum", "avg"):
                columns[f"ds{i}"] = pc.multiply(x.cast(pa.int64()), w)  # NULL where x is
            columns[f"dn{i}"] = pc.if_else(pc.is_valid(x), w, pa.scalar(0, pa.int64()))
        sums = [n for n in columns if n not in self.groups]
        out = pa.table(columns).group_by(self.groups, use_threads=False).aggregate([(n, "sum") for n in sums])
        return out.select(self.groups + [f"{n}_sum" for n in sums]).rename_columns(self.groups + sums)

    def output_in_arrow(self, joined: pa.Table, out_cols: list[str]) -> pa.Table:
        """The output delta from the joined groups: +1 for each group's new row, -1 for its old row
        (a group that did not exist, or no longer does, has none). Each group is one row of
        `joined`, so a row can cancel only its own group's other row: where a group's new and old
        outputs are equal, neither is emitted (consolidated; by SQL where Arrow cannot compare)."""
        n = len(self.node.aggs)
        everywhere = pa.array(np.ones(joined.num_rows, bool))
        new_rows = everywhere if self.node.is_global else pc.greater(joined.column("cnt"), 0)
        old_rows = pc.is_valid(joined.column("o_cnt"))
        if not self.node.is_global:
            old_rows = pc.and_(old_rows, pc.fill_null(pc.greater(joined.column("o_cnt"), 0), False))
        both = np.asarray(pc.and_(new_rows, old_rows))
        unchanged = _outputs_equal(joined, [cname(self.ng + i) for i in range(n)], both)
        if unchanged is not None and unchanged.any():
            keep = pa.array(~unchanged)
            new_rows, old_rows = pc.and_(new_rows, keep), pc.and_(old_rows, keep)
        parts = []
        for mask, prefix, weight in ((new_rows, "n_", 1), (old_rows, "o_", -1)):
            rows = joined.filter(mask).select(self.groups + [f"{prefix}{cname(self.ng + i)}" for i in range(n)])
            parts.append(rows.rename_columns(out_cols).append_column(W, pa.array(np.full(rows.num_rows, weight))))
        delta = pa.concat_tables(parts)
        return delta if unchanged is not None else consolidate(self.engine, delta, out_cols)
