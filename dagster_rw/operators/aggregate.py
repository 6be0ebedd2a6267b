"""Hash aggregation (GROUP BY, global aggregates, DISTINCT), correct under inserts, updates and deletes.

State strategies, chosen per aggregate:
- value state (`acc`): per group the row count and, per SUM/AVG/COUNT, a running sum and non-null
  count; a step adds the delta's partial sums to the touched groups only.
- materialized input (`vcount<i>`): for MIN, MAX and COUNT(DISTINCT), per group the count of each
  distinct value, kept as count changes (a CountTable: a step writes changes without reading old
  counts). An insert can only improve the extreme; when a delete removes the last copy of the
  current extreme, that group's values are read back (the group's slice of the sorted state).
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import types as sqltypes
from ..engine.duck import quote
from ..errors import OperationalError
from ..sql.plan import ORDERED_AGGS, cname
from ..storage import sst_cache
from ..storage.count_table import CountTable
from ..storage.state_table import in_key_order
from .base import DELETED, Operator, W, col_list, consolidate, consolidate_sql, null_safe_eq

MINPUT = ("min", "max")


def _acc_type(func: str, arg_type: str, out_type: str) -> str:
    if func == "avg":
        if arg_type.startswith("numeric"):
            scale = arg_type[arg_type.index(",") + 1:-1]
            return f"numeric(38,{scale})"
        if arg_type in ("smallint", "integer", "bigint"):
            return "bigint"
        return "double precision"
    return out_type


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


class AggregateOp(Operator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.groups = [cname(g) for g in node.group]
        self.ng = len(node.group)

    # -- state layout --------------------------------------------------------------------------
    def acc_columns(self) -> list[tuple[str, str]]:
        node = self.node
        cols = [("cnt", "bigint")]
        for i, a in enumerate(node.aggs):
            out_type = node.columns[self.ng + i].type
            arg_type = node.child.columns[a.arg].type if a.arg is not None else "bigint"
            if a.func in ("sum", "avg"):
                cols += [(f"s{i}", _acc_type(a.func, arg_type, out_type)), (f"n{i}", "bigint")]
            elif a.func == "count":
                cols.append((f"n{i}", "bigint"))
            elif a.func in MINPUT:
                cols.append((f"m{i}", out_type))
            elif a.func in ORDERED_AGGS:
                cols.append((f"r{i}", out_type))
        return cols

    def state_tables(self):
        node = self.node
        gfields = [pa.field(cname(g), sqltypes.arrow_type(node.child.columns[g].type)) for g in node.group]
        tables = {"acc": (self.groups, pa.schema(
            gfields + [pa.field(n, sqltypes.arrow_type(t)) for n, t in self.acc_columns()]))}
        for i, a in enumerate(node.aggs):
            if a.func in ORDERED_AGGS:
                fields = [pa.field(n, sqltypes.arrow_type(node.child.columns[c].type))
                          for n, c in self.ordered_inputs(a)]
                tables[f"ocount{i}"] = (self.groups + [f.name for f in fields], pa.schema(
                    gfields + fields + [pa.field("cnt", pa.int64())]), CountTable)
            elif a.func in MINPUT or a.distinct:
                vtype = sqltypes.arrow_type(node.child.columns[a.arg].type)
                tables[f"vcount{i}"] = (self.groups + ["v"], pa.schema(
                    gfields + [pa.field("v", vtype), pa.field("cnt", pa.int64())]), CountTable)
        return tables

    # -- the step ------------------------------------------------------------------------------
    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        fused = self.fused_value_counts(d)
        if fused is None and any(a.distinct or a.func in MINPUT or a.func in ORDERED_AGGS for a in node.aggs):
            (d,) = self.shared(d)  # read by the sums and by the value counts' step
        g = col_list(self.groups)
        gsel = g + ", " if self.groups else ""
        group_by = f" GROUP BY {g}" if self.groups else ""
        parts = [f"CAST(coalesce(sum({W}), 0) AS BIGINT) AS dcnt"]
        for i, a in enumerate(node.aggs):
            if a.distinct or a.func in MINPUT or a.func in ORDERED_AGGS or a.func == "count_star":
                continue
            x = quote(cname(a.arg))
            if a.func in ("sum", "avg"):
                acc_t = dict(self.acc_columns())[f"s{i}"]
                parts.append(f"CAST(sum(CASE WHEN {x} IS NOT NULL THEN {x} * {W} END) AS "
                             f"{sqltypes.duckdb_type(acc_t)}) AS ds{i}")
            parts.append(f"CAST(coalesce(sum(CASE WHEN {x} IS NOT NULL THEN {W} ELSE 0 END), 0) AS BIGINT) AS dn{i}")
        acc = self.state("acc")
        dg = fused[0] if fused is not None else self.group_deltas_in_arrow(d)
        if dg is None:  # read by the lookup of the groups' accumulators too, where there are any
            dg = self.sql(f"SELECT {gsel}{', '.join(parts)} FROM d{group_by}", shared=bool(self.groups and acc.files),
                          d=d)
        old = acc.lookup(dg, self.groups) if self.groups else acc.read_all()
        if any(a.func in MINPUT and not a.distinct for a in node.aggs):
            (old,) = self.shared(old)  # read by MIN/MAX's step too
        rels = {"dg": dg, "o": old}
        joins = [f"LEFT JOIN o ON {null_safe_eq(self.groups, self.groups, 'dg', 'o')}"]
        for i, a in enumerate(node.aggs):
            if a.func in ORDERED_AGGS:
                rels[f"q{i}"] = self.ordered_step(i, d)
                joins.append(f"LEFT JOIN q{i} ON {null_safe_eq(self.groups, self.groups, 'dg', f'q{i}')}")
            elif a.distinct:
                rels[f"m{i}"] = self.minput_step(i, d, old)
                joins.append(f"LEFT JOIN m{i} ON {null_safe_eq(self.groups, self.groups, 'dg', f'm{i}')}")
            elif a.func in MINPUT:
                rels[f"p{i}"], recomputed = self.minput_step(i, d, old, fused[1] if fused is not None else None)
                joins.append(f"LEFT JOIN p{i} ON {null_safe_eq(self.groups, self.groups, 'dg', f'p{i}')}")
                if recomputed is not None:
                    rels[f"rc{i}"] = recomputed
                    joins.append(f"LEFT JOIN rc{i} ON {null_safe_eq(self.groups, self.groups, 'dg', f'rc{i}')}")
        new_cols = ["CAST(coalesce(o.cnt, 0) + dg.dcnt AS BIGINT) AS cnt"]
        for i, a in enumerate(node.aggs):
            if a.func in ("sum", "avg"):
                new_cols.append(f"CASE WHEN dg.ds{i} IS NULL THEN o.s{i} WHEN o.s{i} IS NULL THEN dg.ds{i} "
                                f"ELSE o.s{i} + dg.ds{i} END AS s{i}")
                new_cols.append(f"CAST(coalesce(o.n{i}, 0) + dg.dn{i} AS BIGINT) AS n{i}")
            elif a.func in ORDERED_AGGS:  # a touched group's result is recomputed from its rows
                new_cols.append(f"CASE WHEN q{i}.g_touched IS NULL THEN o.r{i} ELSE q{i}.res END AS r{i}")
            elif a.func == "count" and not a.distinct:
                new_cols.append(f"CAST(coalesce(o.n{i}, 0) + dg.dn{i} AS BIGINT) AS n{i}")
            elif a.distinct:
                new_cols.append(f"CAST(coalesce(o.n{i}, 0) + coalesce(m{i}.dn, 0) AS BIGINT) AS n{i}")
            elif a.func in MINPUT:
                # untouched values keep the extreme; a lost extreme is the recomputed one; else an
                # added value may beat it
                rb = f"rc{i}.rb" if f"rc{i}" in rels else f"CAST(NULL AS {self.value_type(a)})"
                new_cols.append(
                    f"CASE WHEN p{i}.g_touched IS NULL THEN o.m{i} WHEN p{i}.lost THEN {rb} "
                    f"WHEN o.m{i} IS NULL THEN p{i}.ins_best WHEN p{i}.ins_best IS NULL THEN o.m{i} "
                    f"ELSE {'least' if a.func == 'min' else 'greatest'}(o.m{i}, p{i}.ins_best) END AS m{i}")
        old_cols = ["o.cnt AS o_cnt"] + [f"o.{quote(n)} AS {quote('o_' + n)}" for n, _ in self.acc_columns()[1:]]
        # one query: the groups' new accumulators, their old ones, and the output rows of both
        outputs = self.output_exprs("", "n_") + self.output_exprs("o_", "o_")
        joined = self.joined_in_arrow(dg, old, rels)
        if joined is None:
            joined = self.sql(
                f"SELECT *, {', '.join(outputs)} FROM (SELECT {col_list(self.groups, 'dg.')}"
                f"{', ' if self.groups else ''}{', '.join(new_cols)}, {', '.join(old_cols)} "
                f"FROM dg {' '.join(joins)}) j", shared=True, **rels)

        is_global = "TRUE" if node.is_global else "FALSE"
        if isinstance(joined, pa.Table):
            gone = pc.less_equal(joined.column("cnt"), 0) if not node.is_global else \
                pa.array(np.zeros(joined.num_rows, bool))
            acc.stage(joined.select(self.groups + [n for n, _ in self.acc_columns()]).append_column(DELETED, gone))
        else:
            acc.stage(self.sql(
                f"SELECT {gsel}{', '.join(quote(n) for n, _ in self.acc_columns())}, "
                f"(NOT {is_global} AND cnt <= 0) AS {DELETED} FROM j", j=joined))
        out_cols = [cname(i) for i in range(len(node.columns))]
        if isinstance(joined, pa.Table):
            return self.output_in_arrow(joined, out_cols)
        new_out = ", ".join(self.groups_sel() + self.output_exprs(""))
        old_out = ", ".join(self.groups_sel() + self.output_exprs("o_"))
        union = (
            f"SELECT {new_out + ', ' if new_out else ''}CAST(1 AS BIGINT) AS {W} FROM j WHERE {is_global} OR cnt > 0 "
            f"UNION ALL SELECT {old_out + ', ' if old_out else ''}CAST(-1 AS BIGINT) AS {W} FROM j "
            f"WHERE o_cnt IS NOT NULL AND ({is_global} OR o_cnt > 0)")
        return self.sql(consolidate_sql(out_cols, f"({union}) rw_o"), j=joined)

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

    def groups_sel(self) -> list[str]:
        return [quote(g) for g in self.groups]

    def output_exprs(self, p: str, alias: str = "") -> list[str]:
        """The output columns' values from accumulators prefixed `p`, named `alias` + column name."""
        out = []
        for i, a in enumerate(self.node.aggs):
            c = quote(alias + cname(self.ng + i))
            t = sqltypes.duckdb_type(self.node.columns[self.ng + i].type)
            if a.func == "count_star":
                e = f"{p}cnt"
            elif a.func in ORDERED_AGGS:
                e = f"{p}r{i}"
            elif a.func == "count" or a.distinct:
                e = f"coalesce({p}n{i}, 0)"
            elif a.func == "sum":
                e = f"CASE WHEN {p}n{i} > 0 THEN {p}s{i} END"
            elif a.func == "avg":
                e = f"CASE WHEN {p}n{i} > 0 THEN CAST({p}s{i} AS DOUBLE) / {p}n{i} END"
            else:
                e = f"{p}m{i}"
            out.append(f"CAST({e} AS {t}) AS {c}")
        return out

    def fused_value_counts(self, d):
        """For a delta that SQL aggregates (a large step; on Spark) and MIN/MAX over one column
        `v`, beside COUNT, SUM and AVG: the delta grouped once, by the groups and `v`, with the
        weights' and the partial sums' totals, computed once; from it, the groups' changes of the
        accumulators (a small second grouping) and the value counts' changes. Returns (dg, dm) as
        `apply` and `minput_step` compute them on their own, or None where that does not apply.

        A backfill otherwise groups its input twice, once by the groups for the sums and once by
        groups and value for the value counts (on Spark, two passes over the join feeding it)."""
        node = self.node
        if isinstance(d, pa.Table) or any(a.distinct or a.func in ORDERED_AGGS for a in node.aggs):
            return None
        args = {a.arg for a in node.aggs if a.func in MINPUT}
        if len(args) != 1 or any(k.startswith(f"op{node.id}.minput") for k in self.ctx.manifest.state):
            return None
        gsel = col_list(self.groups) + ", " if self.groups else ""
        inner = [f"CAST(sum({W}) AS BIGINT) AS dc"]
        outer = ["CAST(coalesce(sum(dc), 0) AS BIGINT) AS dcnt"]
        for i, a in enumerate(node.aggs):
            if a.func in MINPUT or a.func == "count_star":
                continue
            x = quote(cname(a.arg))
            if a.func in ("sum", "avg"):
                acc_t = sqltypes.duckdb_type(dict(self.acc_columns())[f"s{i}"])
                inner.append(f"sum(CASE WHEN {x} IS NOT NULL THEN {x} * {W} END) AS ds{i}")
                outer.append(f"CAST(sum(ds{i}) AS {acc_t}) AS ds{i}")
            inner.append(f"sum(CASE WHEN {x} IS NOT NULL THEN {W} ELSE 0 END) AS dn{i}")
            outer.append(f"CAST(coalesce(sum(dn{i}), 0) AS BIGINT) AS dn{i}")
        v = quote(cname(args.pop()))
        fine = self.sql(f"SELECT {gsel}{v} AS v, {', '.join(inner)} FROM d GROUP BY {gsel}{v}", shared=True, d=d)
        group_by = f" GROUP BY {col_list(self.groups)}" if self.groups else ""
        dg = self.sql(f"SELECT {gsel}{', '.join(outer)} FROM fine{group_by}",
                      shared=bool(self.groups and self.state("acc").files), fine=fine)
        dm = self.sql(f"SELECT {gsel}v, dc FROM fine WHERE v IS NOT NULL AND dc <> 0", fine=fine)
        return dg, dm

    def minput_step(self, i: int, d, old, dm=None):
        """Write the changes of aggregate i's value counts. Returns, for COUNT DISTINCT, per touched
        group the change in the number of distinct values; for MIN/MAX, per touched group the best
        added value and whether the old extreme was lost (`ins_best`, `lost`), and the recomputed
        extreme (`rb`) of the groups that lost theirs (None when none did). `dm`: the count
        changes, where fused_value_counts computed them.

        The counts live in a CountTable, so a step writes count changes without reading the old
        counts. MIN/MAX read a count only where the old extreme lost copies (did it lose its last
        one?), and a group's values only when it did; COUNT DISTINCT reads the touched counts."""
        a = self.node.aggs[i]
        g = col_list(self.groups)
        gsel = g + ", " if self.groups else ""
        x = quote(cname(a.arg))
        if f"op{self.node.id}.minput{i}" in self.ctx.manifest.state:  # absolute counts, newest file wins
            raise OperationalError(
                f"materialized view {self.ctx.obj.name!r} keeps MIN/MAX/COUNT DISTINCT state in the format of an "
                "earlier dagster-rw, which this version cannot read: DROP it and CREATE it again")
        counts = self.state(f"vcount{i}")
        keys = self.groups + ["v"]
        counted = self.counts_in_numpy(d, a, counts, old, i) if dm is None else None
        if counted is not None:
            self.ctx.write_now(f"op{self.node.id}.vcount{i}")  # staged: written while the step goes on
            dm, per_group = counted
        else:
            if dm is None:
                dm = self.sql(
                    f"SELECT {gsel}{x} AS v, CAST(sum({W}) AS BIGINT) AS dc FROM d WHERE {x} IS NOT NULL "
                    f"GROUP BY {gsel}{x} HAVING sum({W}) <> 0", shared=True, d=d)
            if isinstance(dm, pa.Table):
                counts.stage(dm.rename_columns(keys + ["cnt"]).append_column(
                    DELETED, pa.array(np.zeros(dm.num_rows, bool))))
            else:
                counts.stage(self.sql(f"SELECT {gsel}v, dc AS cnt, false AS {DELETED} FROM dm", dm=dm))
            self.ctx.write_now(f"op{self.node.id}.vcount{i}")
            if a.distinct:
                on = null_safe_eq(keys, keys, "dm", "om")
                return self.sql(
                    f"SELECT {col_list(self.groups, 'dm.') + ', ' if self.groups else ''}"
                    f"CAST(sum(CASE WHEN coalesce(om.cnt, 0) <= 0 AND coalesce(om.cnt, 0) + dm.dc > 0 THEN 1 "
                    f"WHEN coalesce(om.cnt, 0) > 0 AND coalesce(om.cnt, 0) + dm.dc <= 0 THEN -1 ELSE 0 END) "
                    f"AS BIGINT) AS dn FROM dm LEFT JOIN om ON {on}"
                    + (f" GROUP BY {col_list(self.groups, 'dm.')}" if self.groups else ""),
                    dm=dm, om=counts.lookup(dm, keys))
            per_group = self.groups_losing_extreme(i, dm, counts, old)
        best = "min" if a.func == "min" else "max"
        if isinstance(per_group, pa.Table):
            lost = per_group.filter(pc.fill_null(per_group.column("lost"), False)).select(self.groups)
        else:
            lost = self.sql(f"SELECT {g if g else '1 AS one'} FROM p WHERE lost", p=per_group)
        recomputed = None
        if self.engine.num_rows(lost):
            # the groups whose extreme went: their remaining values (old counts plus this step's changes)
            rest = counts.lookup(lost, self.groups) if self.groups else counts.read_all()
            mine = f" WHERE EXISTS (SELECT 1 FROM l WHERE {null_safe_eq(self.groups, self.groups, 'l', 'dm')})" \
                if self.groups else ""
            recomputed = self.sql(
                f"SELECT {gsel}{best}(v) AS rb FROM (SELECT {gsel}v FROM (SELECT {gsel}v, cnt FROM r "
                f"UNION ALL SELECT {gsel}v, dc AS cnt FROM dm{mine}) u GROUP BY {gsel}v HAVING sum(cnt) > 0) x"
                + (f" GROUP BY {g}" if self.groups else ""), r=rest, dm=dm, **({"l": lost} if self.groups else {}))
        return per_group, recomputed

    def groups_losing_extreme(self, i: int, dm, counts, old):
        """Per touched group: the best value this step added (`ins_best`; only an added value can
        beat the old extreme) and whether the old extreme lost its last copy (`lost`), reading the
        old count of the extreme of the groups where it lost copies, nothing else."""
        a = self.node.aggs[i]
        best = "min" if a.func == "min" else "max"
        keys = self.groups + ["v"]
        gsel = col_list(self.groups) + ", " if self.groups else ""
        on = null_safe_eq(self.groups, self.groups, "dm", "o")
        if isinstance(old, pa.Table) and not old.num_rows:  # no old extremes (a backfill): none lost
            at_old = None
        else:  # read by a count, the lookup of its counts and the groups losing their extreme
            at_old = self.sql(
                f"SELECT {col_list(self.groups, 'dm.') + ', ' if self.groups else ''}dm.v, dm.dc FROM dm "
                f"JOIN o ON {on} WHERE dm.v = o.m{i} AND dm.dc < 0", shared=True, dm=dm, o=old)
        if at_old is not None and self.engine.num_rows(at_old):
            lost = self.sql(
                f"SELECT {col_list(self.groups, 'a.') + ', ' if self.groups else ''}true AS lost FROM a "
                f"LEFT JOIN oc ON {null_safe_eq(keys, keys, 'a', 'oc')} WHERE coalesce(oc.cnt, 0) + a.dc <= 0",
                a=at_old, oc=counts.lookup(at_old, keys))
        else:
            lost = self.sql(f"SELECT {gsel}true AS lost FROM dm WHERE false", dm=dm)
        groups = f" GROUP BY {col_list(self.groups)}" if self.groups else ""
        return self.sql(
            f"SELECT {col_list(self.groups, 'p.') + ', ' if self.groups else ''}p.ins_best, "
            f"coalesce(l.lost, false) AS lost, true AS g_touched FROM (SELECT {gsel}"
            f"{best}(CASE WHEN dc > 0 THEN v END) AS ins_best FROM dm{groups}) p "
            f"LEFT JOIN l ON {null_safe_eq(self.groups, self.groups, 'p', 'l')}", shared=True, dm=dm, l=lost)

    def counts_in_numpy(self, d, a, counts, old, i: int):
        """The count changes of a MIN/MAX, staged, and groups_losing_extreme's answer, without SQL,
        when the group column and the value are integers that code into one sortable number:
        (dm, per_group), or None to take the SQL path."""
        x = cname(a.arg)
        if not isinstance(d, pa.Table) or not isinstance(old, pa.Table) or a.distinct or len(self.groups) > 1 \
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
        codes = sst_cache.key_codes(sub, keys)
        gcodes_old = sst_cache.key_codes(old, self.groups) if self.groups else np.zeros(old.num_rows, np.int8)
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
                old_c[np.searchsorted(sst_cache.key_codes(probe, keys), sst_cache.key_codes(found, keys))] = found.column("cnt").to_numpy()
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

    # -- STRING_AGG, FIRST_VALUE, LAST_VALUE -------------------------------------------------------
    @staticmethod
    def ordered_inputs(a) -> list[tuple[str, int]]:
        """An ordered aggregate's state columns and the child columns they hold: the ORDER BY keys
        (o0, o1, ...), the argument (v) and STRING_AGG's delimiter (sep)."""
        return ([(f"o{j}", c) for j, (c, _, _) in enumerate(a.order)] + [("v", a.arg)]
                + [(f"x{j}", c) for j, c in enumerate(a.extra)])

    def ordered_step(self, i: int, d):
        """Write the changes of aggregate i's row counts per (group, order keys, arguments) and
        return, per touched group, its result recomputed from the group's rows (`res`, and
        `g_touched`). A group's rows are its slice of the sorted state plus this step's changes."""
        a = self.node.aggs[i]
        counts = self.state(f"ocount{i}")
        inputs = self.ordered_inputs(a)
        names = self.groups + [n for n, _ in inputs]
        sources = [quote(g) for g in self.groups] + [quote(cname(c)) for _, c in inputs]
        where = f" WHERE {quote(cname(a.arg))} IS NOT NULL" if a.func == "string_agg" else ""  # NULLs are skipped
        dm = self.sql(
            f"SELECT {', '.join(f'{s} AS {quote(n)}' for s, n in zip(sources, names))}, "
            f"CAST(sum({W}) AS BIGINT) AS cnt FROM d{where} GROUP BY {', '.join(sources)} HAVING sum({W}) <> 0",
            shared=True, d=d)
        if self.groups:
            touched = self.engine.to_arrow(self.sql(f"SELECT DISTINCT {col_list(self.groups)} FROM dm", dm=dm))
            old = counts.lookup(touched, self.groups) if touched.num_rows else counts.schema.empty_table()
        else:
            touched = pa.table({"one": pa.array([1] if self.engine.num_rows(dm) else [], pa.int8())})  # the one group, if touched
            old = counts.read_all()
        if isinstance(dm, pa.Table):
            counts.stage(dm.append_column(DELETED, pa.array(np.zeros(dm.num_rows, bool))))
        else:
            counts.stage(self.sql(f"SELECT *, false AS {DELETED} FROM dm", dm=dm))
        keys = col_list(names)
        rows = self.engine.to_arrow(self.sql(
            f"SELECT {keys}, CAST(sum(cnt) AS BIGINT) AS cnt FROM (SELECT {keys}, cnt FROM o UNION ALL "
            f"SELECT {keys}, cnt FROM dm) u GROUP BY {keys} HAVING sum(cnt) > 0", o=old, dm=dm))
        return self.ordered_results(i, rows, touched)

    def ordered_results(self, i: int, rows: pa.Table, touched: pa.Table) -> pa.Table:
        """Per touched group, the ordered aggregate over its rows (each repeated by its count)."""
        a = self.node.aggs[i]
        order = [(g, "ascending") for g in self.groups]
        for j, (_, desc, nulls_first) in enumerate(a.order):
            rows = rows.append_column(f"_null{j}", pc.is_null(rows.column(f"o{j}")))
            order += [(f"_null{j}", "descending" if nulls_first else "ascending"),
                      (f"o{j}", "descending" if desc else "ascending")]
        order += [(n, "ascending") for n in ["v"] + [f"x{j}" for j in range(len(a.extra))]]  # ties: any fixed order
        rows = rows.take(pc.sort_indices(rows, sort_keys=order))
        per_group: dict[tuple, list] = {}
        groups = [rows.column(g).to_pylist() for g in self.groups]
        values, counts = rows.column("v").to_pylist(), rows.column("cnt").to_pylist()
        seps = rows.column("x0").to_pylist() if a.extra else [None] * rows.num_rows
        for r in range(rows.num_rows):
            key = tuple(g[r] for g in groups)
            repeat = 1 if a.distinct else counts[r]
            per_group.setdefault(key, []).extend([(values[r], seps[r])] * repeat)
        results = []
        for key in zip(*[touched.column(g).to_pylist() for g in self.groups]) if self.groups else \
                [()] * touched.num_rows:
            items = per_group.get(key)
            if not items:
                results.append(None)
            elif a.func == "first_value":
                results.append(items[0][0])
            elif a.func == "last_value":
                results.append(items[-1][0])
            elif a.func == "array_agg":  # every value in order, NULLs too
                results.append([v for v, _ in items])
            else:  # each value after the first is preceded by its own row's delimiter (none when NULL)
                results.append(items[0][0] + "".join((sep or "") + v for v, sep in items[1:]))
        out_type = sqltypes.arrow_type(self.node.columns[self.ng + i].type)
        return pa.table({**{g: touched.column(g) for g in self.groups},
                         "res": pa.array(results, out_type),
                         "g_touched": pa.array(np.ones(len(results), bool))})

    def value_type(self, a) -> str:
        return sqltypes.duckdb_type(self.node.child.columns[a.arg].type)


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
