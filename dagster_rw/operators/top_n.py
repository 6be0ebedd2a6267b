"""Top-N (ORDER BY ... LIMIT n OFFSET m), with ties broken by the stream key; or, for FETCH FIRST n
ROWS WITH TIES, the first n rows and every row tied with the n-th on the order keys.

State: `input`, the child's rows sorted by the order key, and `top`, the first n+m rows. A step first
tries to settle the new first n+m rows from the old ones plus the delta: that is exact whenever at
least n+m of those candidates rank no lower than the old last row, since every row outside the old
window ranks below it. (With ties the old window held every row tied with its last one, so rows
outside it rank strictly below its order keys: the same test holds with rank() on the order keys
alone.) Only when deletions leave the window short does it read the input state.
"""
from __future__ import annotations

from ..engine.duck import quote
from ..sql.plan import cname
from .base import (
    DELETED,
    Operator,
    W,
    col_list,
    consolidate_sql,
    null_safe_eq,
    row_schema,
    state_upsert_sql,
)


class TopNOp(Operator):
    def cols(self):
        return [cname(i) for i in range(len(self.node.columns))]

    def key(self):
        return [cname(k) for k in self.node.stream_key]

    def order_by(self, prefix: str = "", ties: bool = False) -> str:
        """The ORDER BY list: the order keys, then (unless `ties`) the stream key to break ties."""
        parts = []
        for o in self.node.order:
            parts.append(f"{prefix}{quote(cname(o.column))} {'DESC' if o.desc else 'ASC'} "
                         f"NULLS {'FIRST' if o.nulls_first else 'LAST'}")
        if not ties:
            parts += [f"{prefix}{quote(k)} ASC NULLS FIRST" for k in self.key()]
        return ", ".join(parts)

    def first(self, rel: str, window: int) -> str:
        """SQL for the first `window` rows of relation `rel` in order; with ties, also every row
        tied (on the order keys) with the last of them."""
        cols = col_list(self.cols())
        if not self.node.with_ties:
            return f"SELECT {cols} FROM {rel} ORDER BY {self.order_by()} LIMIT {window}"
        return (f"SELECT {cols} FROM (SELECT {cols}, rank() OVER (ORDER BY {self.order_by(ties=True)}) AS rw_rank "
                f"FROM {rel}) rw_r WHERE rw_rank <= {window}")

    def state_tables(self):
        schema = row_schema(self.node)
        sort_pk = [cname(o.column) for o in self.node.order]
        pk = sort_pk + [k for k in self.key() if k not in sort_pk]
        return {"input": (pk, schema), "top": (self.key(), schema)}

    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        window = node.limit + node.offset
        cols = self.cols()
        inp, top = self.state("input"), self.state("top")
        old_top = top.read_all()
        inp.stage(self.sql(state_upsert_sql(cols, self.state_tables()["input"][0]), d=d))
        cand = self.sql(consolidate_sql(cols, "u"), u=self.sql(
            f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM o UNION ALL SELECT {col_list(cols)}, {W} FROM d",
            o=old_top, d=d))
        cand = self.sql(f"SELECT {col_list(cols)} FROM c WHERE {W} > 0", c=cand)
        old_n = self.engine.num_rows(old_top)
        new_window = None
        if old_n < window:
            # the old window held the whole input: the candidates are the whole new input
            new_window = self.sql(self.first("c", window), c=cand)
        else:
            # how many candidates rank at or above the old window's last row? (with ties: at or
            # above its order keys, as the old window held every row tied with it)
            ranked = self.sql(
                f"SELECT f, row_number() OVER (ORDER BY {self.order_by(ties=node.with_ties)}, f) AS rn FROM ("
                f"SELECT {col_list(cols)}, 0 AS f FROM c UNION ALL "
                f"SELECT {col_list(cols)}, 1 AS f FROM (SELECT *, row_number() OVER (ORDER BY {self.order_by()}) "
                f"AS last_rn FROM o) b WHERE last_rn = {window}) u",
                c=cand, o=old_top)
            counted = self.engine.to_arrow(
                self.sql("SELECT (SELECT rn FROM r WHERE f = 1) - 1 AS above FROM r LIMIT 1", r=ranked))
            above = counted.column(0)[0].as_py() if counted.num_rows else 0
            if above is not None and above >= window:
                new_window = self.sql(self.first("c", window), c=cand)
        if new_window is None:
            merged = self.sql(
                f"SELECT {col_list(cols)} FROM i x WHERE NOT EXISTS (SELECT 1 FROM d y WHERE "
                f"{null_safe_eq(self.key() or cols, self.key() or cols, 'x', 'y')}) UNION ALL SELECT {col_list(cols)} FROM d WHERE {W} > 0",
                i=inp.read_all(), d=d)
            new_window = self.sql(self.first("m", window), m=merged)
        top.stage(self.sql(
            f"SELECT {col_list(cols)}, true AS {DELETED} FROM o x WHERE NOT EXISTS (SELECT 1 FROM n y WHERE "
            f"{null_safe_eq(self.key() or cols, self.key() or cols, 'x', 'y')}) "
            f"UNION ALL SELECT {col_list(cols)}, false FROM n",
            o=old_top, n=new_window))
        lo = node.offset
        out = self.sql(
            f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM "
            f"(SELECT *, row_number() OVER (ORDER BY {self.order_by()}) AS rn FROM n) x WHERE rn > {lo} "
            f"UNION ALL SELECT {col_list(cols)}, CAST(-1 AS BIGINT) AS {W} FROM "
            f"(SELECT *, row_number() OVER (ORDER BY {self.order_by()}) AS rn FROM o) x WHERE rn > {lo}",
            n=new_window, o=old_top)
        return self.sql(consolidate_sql(cols, "o"), o=out)

