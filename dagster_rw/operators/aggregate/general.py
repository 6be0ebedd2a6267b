"""The aggregate operator and its general path: one SQL query per step joins the touched groups' old
accumulators with the delta's partial aggregates and emits both output rows of each changed group.
The faster paths (arrow_path, numpy_path) answer the same parts where the types allow."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import types as sqltypes
from ...engine.duck import quote
from ...sql.plan import ORDERED_AGGS, cname
from ..base import DELETED, Operator, W, col_list, consolidate_sql, null_safe_eq
from .arrow_path import ArrowPath
from .extremes import Extremes
from .numpy_path import NumpyPath
from .ordered import Ordered
from .ordered_set import OrderedSet
from .value_state import MINPUT, ValueState, weighted_sum


class AggregateOp(ValueState, Extremes, Ordered, OrderedSet, ArrowPath, NumpyPath, Operator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.groups = [cname(g) for g in node.group]
        self.ng = len(node.group)

    # -- the step ------------------------------------------------------------------------------
    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        self.defer_counts_at_backfill()
        unbuilt = self.unbuilt_counts()
        fused = self.fused_value_counts(d)
        if fused is None and any(a.distinct or (a.func in MINPUT and i not in unbuilt) or a.func in ORDERED_AGGS
                                 for i, a in enumerate(node.aggs)) or (unbuilt and not self.ctx.backfill):
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
                parts.append(f"{weighted_sum(x, W, acc_t)} AS ds{i}")
            parts.append(f"CAST(coalesce(sum(CASE WHEN {x} IS NOT NULL THEN {W} ELSE 0 END), 0) AS BIGINT) AS dn{i}")
        if not isinstance(d, pa.Table):  # on Spark, unbuilt counts' best added values: in the same pass
            parts += [self.best_added(i) for i in unbuilt]
        acc = self.state("acc")
        dg = fused[0] if fused is not None else self.group_deltas_in_arrow(d)
        if dg is None:
            # read by the lookup of the groups' accumulators and the unbuilt counts' best values too
            dg = self.sql(f"SELECT {gsel}{', '.join(parts)} FROM d{group_by}",
                          shared=bool(self.groups and (acc.files or unbuilt)), d=d)
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
                if i in unbuilt:
                    rels[f"p{i}"], recomputed = self.unbuilt_minput_step(i, d, dg)
                else:
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
