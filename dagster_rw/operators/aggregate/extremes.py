"""MIN, MAX and COUNT(DISTINCT) by materialized input: per group the count of each distinct value
(`vcount<i>`), an extreme recomputed only for the groups that lost their last copy of it."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...engine.duck import quote
from ...errors import OperationalError
from ...sql.plan import ORDERED_AGGS, cname
from ..base import DELETED, W, col_list, null_safe_eq
from .value_state import MINPUT, weighted_sum


class Extremes:
    """AggregateOp's MIN, MAX and COUNT(DISTINCT) steps."""

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
        if len(args) != 1 or any(k.startswith(f"op{node.id}.minput") for k in self.ctx.manifest.state) \
                or self.unbuilt_counts():
            return None
        gsel = col_list(self.groups) + ", " if self.groups else ""
        inner = [f"CAST(sum({W}) AS BIGINT) AS dc"]
        outer = ["CAST(coalesce(sum(dc), 0) AS BIGINT) AS dcnt"]
        for i, a in enumerate(node.aggs):
            if a.func in MINPUT or a.func == "count_star":
                continue
            x = quote(cname(a.arg))
            if a.func in ("sum", "avg"):
                acc_t = dict(self.acc_columns())[f"s{i}"]
                inner.append(f"{weighted_sum(x, W, acc_t, cast=False)} AS ds{i}")
                outer.append(f"{weighted_sum(f'ds{i}', '1', acc_t)} AS ds{i}")
            inner.append(f"sum(CASE WHEN {x} IS NOT NULL THEN {W} ELSE 0 END) AS dn{i}")
            outer.append(f"CAST(coalesce(sum(dn{i}), 0) AS BIGINT) AS dn{i}")
        v = quote(cname(args.pop()))
        fine = self.sql(f"SELECT {gsel}{v} AS v, {', '.join(inner)} FROM d GROUP BY {gsel}{v}", shared=True, d=d)
        group_by = f" GROUP BY {col_list(self.groups)}" if self.groups else ""
        dg = self.sql(f"SELECT {gsel}{', '.join(outer)} FROM fine{group_by}",
                      shared=bool(self.groups and self.state("acc").files), fine=fine)
        dm = self.sql(f"SELECT {gsel}v, dc FROM fine WHERE v IS NOT NULL AND dc <> 0", fine=fine)
        return dg, dm

    # -- value counts a backfill left unbuilt ----------------------------------------------------
    def counts_name(self, i: int) -> str:
        return f"op{self.node.id}.vcount{i}"

    def defer_counts_at_backfill(self) -> None:
        """A backfill on Spark leaves the value counts of a grouped MIN/MAX unbuilt (a count per
        group and value: on Spark, a grouping by both, several times the cost of the view's own
        query) where the aggregate's input can be computed again from its objects' rows."""
        ctx = self.ctx
        if not (self.groups and ctx.may_defer("value_counts") and ctx.batch_computable(self.node.child)):
            return
        for i, a in enumerate(self.node.aggs):
            if a.func in MINPUT and not a.distinct and self.counts_name(i) not in ctx.deferred:
                ctx.deferred.append(self.counts_name(i))

    def unbuilt_counts(self) -> set[int]:
        """The MIN/MAX aggregates whose value counts are not built yet."""
        return {i for i in range(len(self.node.aggs)) if self.counts_name(i) in self.ctx.deferred}

    def best_added(self, i: int, alias: str = "") -> str:
        """The SQL (over the delta `d`, grouped) of aggregate i's best value added, as `alias`
        (default `db<i>`)."""
        a = self.node.aggs[i]
        x = quote(cname(a.arg))
        return f"{'min' if a.func == 'min' else 'max'}(CASE WHEN {W} > 0 THEN {x} END) AS {alias or f'db{i}'}"

    def retracts(self, d) -> bool:
        """Whether the delta takes any row away (on Spark: a job of its own)."""
        if isinstance(d, pa.Table):
            return d.num_rows > 0 and pc.min(d.column(W)).as_py() < 0
        return self.engine.num_rows(self.sql(f"SELECT 1 AS one FROM d WHERE {W} < 0 LIMIT 1", d=d)) > 0

    def unbuilt_minput_step(self, i: int, d, dg):
        """minput_step's answer while aggregate i's value counts are unbuilt. A step that takes no
        row away needs none: only an added value can beat the old extreme, and no group loses its
        extreme. The first step that does take rows away builds the counts from the aggregate's
        whole input as of the step's epoch (its change included) and recomputes its touched
        groups' extremes from them."""
        a = self.node.aggs[i]
        g = col_list(self.groups)
        best = "min" if a.func == "min" else "max"
        if self.ctx.backfill or not self.retracts(d):
            if not isinstance(d, pa.Table):  # `apply` computed the best added values with the sums
                return self.sql(f"SELECT {g}, db{i} AS ins_best, false AS lost, true AS g_touched FROM dg",
                                dg=dg), None
            return self.sql(f"SELECT {g}, {self.best_added(i, 'ins_best')}, "
                            f"false AS lost, true AS g_touched FROM d GROUP BY {g}", d=d), None
        self.ctx.deferred.remove(self.counts_name(i))
        x = quote(cname(a.arg))
        rows = self.ctx.relation_at_target(self.node.child)
        counts = self.sql(f"SELECT {g}, {x} AS v, CAST(sum({W}) AS BIGINT) AS cnt FROM r WHERE {x} IS NOT NULL "
                          f"GROUP BY {g}, {x} HAVING sum({W}) <> 0", shared=True, r=rows)
        self.state(f"vcount{i}").stage(self.sql(f"SELECT {g}, v, cnt, false AS {DELETED} FROM c", c=counts))
        self.ctx.write_now(self.counts_name(i))
        touched = self.sql(f"SELECT DISTINCT {g}, CAST(NULL AS {self.value_type(a)}) AS ins_best, true AS lost, "
                           f"true AS g_touched FROM d", d=d)
        return touched, self.sql(f"SELECT {g}, {best}(v) AS rb FROM c GROUP BY {g}", c=counts)

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
