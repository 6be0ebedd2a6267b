"""Ordered aggregates (STRING_AGG, ARRAY_AGG, FIRST_VALUE, LAST_VALUE, and the ordered-set
aggregates of ordered_set): counts per (group, order keys, arguments), a touched group's result
recomputed from its rows."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import types as sqltypes
from ...engine.duck import quote
from ...sql.plan import ORDERED_SET_AGGS, cname
from ..base import DELETED, W, col_list


class Ordered:
    """AggregateOp's ordered aggregates."""

    # -- STRING_AGG, FIRST_VALUE, LAST_VALUE -------------------------------------------------------
    @staticmethod
    def ordered_inputs(a) -> list[tuple[str, int]]:
        """An ordered aggregate's state columns and the child columns they hold: the ORDER BY keys
        (o0, o1, ...), the argument (v) and STRING_AGG's delimiter (sep). An ordered-set aggregate's
        ORDER BY key is its argument: `v` only."""
        if a.func in ORDERED_SET_AGGS:
            return [("v", a.arg)]
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
        skips_nulls = a.func == "string_agg" or a.func in ORDERED_SET_AGGS
        where = f" WHERE {quote(cname(a.arg))} IS NOT NULL" if skips_nulls else ""  # NULLs are skipped
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
        if a.func in ORDERED_SET_AGGS:
            return self.ordered_set_results(i, rows, touched)
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
