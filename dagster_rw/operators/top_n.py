"""Top-N (ORDER BY ... LIMIT n OFFSET m), with ties broken by the stream key; or, for FETCH FIRST n
ROWS WITH TIES, the first n rows and every row tied with the n-th on the order keys.

State: `input`, the child's rows sorted by the order key, and `top`, the first n+m rows. A step first
tries to settle the new first n+m rows from the old ones plus the delta: that is exact whenever at
least n+m of those candidates rank no lower than the old last row, since every row outside the old
window ranks below it. (With ties the old window held every row tied with its last one, so rows
outside it rank strictly below its order keys: the same test holds with rank() on the order keys
alone.) When deletions leave the window short, it reads the input state from the old last row
on, a few rows per file (more while the new window could reach past them), and only where that
cannot settle it (its first order key NULL there, NULLs sorting last, on Spark) the whole input.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

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

    def refill(self, inp, old_top, d, window: int):
        """The new window when the candidates fell short, from the input rows just past the old
        window's last row (every row outside the old window ranks after it, so its first order
        key is that row's or beyond): read a few rows per file from there, and more while the
        window might reach past what was read. None: read the whole input instead (its last row's
        first order key is NULL, the files cannot be searched, or the window runs into rows that
        were not read, such as NULLs that sort last)."""
        o = self.node.order[0]
        col = cname(o.column)
        last = self.engine.to_arrow(self.sql(
            f"SELECT {quote(col)} FROM o ORDER BY {self.order_by()} LIMIT 1 OFFSET {window - 1}", o=old_top))
        edge = last.column(0)[0].as_py() if last.num_rows else None
        if edge is None:
            return None
        cols = self.cols()
        key = self.key() or cols
        changes = self.engine.num_rows(d)
        count = 2 * window + changes
        while count <= 64 * (window + changes):
            got = inp.rows_from(edge, count, descending=o.desc)
            if got is None:
                return None
            rows, frontier = got
            # the old rows known (the old window, and the rows read past it), then the step's changes
            known = self.sql(consolidate_sql(cols, "u"), u=self.sql(
                f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM o UNION ALL "
                f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM r x "
                f"WHERE NOT EXISTS (SELECT 1 FROM o y WHERE {null_safe_eq(key, key, 'x', 'y')}) "
                f"UNION ALL SELECT {col_list(cols)}, {W} FROM d", o=old_top, r=rows, d=d))
            known = self.sql(f"SELECT {col_list(cols)} FROM k WHERE {W} > 0", k=known)
            new_window = self.engine.to_arrow(self.sql(self.first("k", window), k=known))
            if new_window.num_rows >= window and self._before(new_window.column(col), frontier, o):
                return new_window
            if frontier is None:
                return None  # every file was read to its end that way: the rest are NULLs, sorted last
            count *= 4
        return None

    @staticmethod
    def _before(values, frontier, o) -> bool:
        """Whether every value ranks before `frontier` (None: no bound) in order key `o`; a NULL
        counts only where NULLs sort first (then every NULL row was in the old window)."""
        if values.null_count and not o.nulls_first:
            return False
        if frontier is None:
            return True
        present = pc.drop_null(values)
        bound = pa.scalar(frontier, values.type)
        beyond = pc.greater_equal(present, bound) if not o.desc else pc.less_equal(present, bound)
        return not pc.any(beyond).as_py()

    def state_tables(self):
        schema = row_schema(self.node)
        sort_pk = [cname(o.column) for o in self.node.order]
        pk = sort_pk + [k for k in self.key() if k not in sort_pk]
        return {"input": (pk, schema), "top": (self.key(), schema)}

    def apply(self, inputs):
        node = self.node
        window = node.limit + node.offset
        cols = self.cols()
        inp, top = self.state("input"), self.state("top")
        d, old_top = self.shared(inputs[0], top.read_all())  # each read by several rules below
        inp.stage(self.sql(state_upsert_sql(cols, self.state_tables()["input"][0]), shared=True, d=d))
        cand = self.sql(consolidate_sql(cols, "u"), u=self.sql(
            f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM o UNION ALL SELECT {col_list(cols)}, {W} FROM d",
            o=old_top, d=d))
        cand = self.sql(f"SELECT {col_list(cols)} FROM c WHERE {W} > 0", shared=True, c=cand)
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
            new_window = self.refill(inp, old_top, d, window)
        if new_window is None:
            merged = self.sql(
                f"SELECT {col_list(cols)} FROM i x WHERE NOT EXISTS (SELECT 1 FROM d y WHERE "
                f"{null_safe_eq(self.key() or cols, self.key() or cols, 'x', 'y')}) UNION ALL SELECT {col_list(cols)} FROM d WHERE {W} > 0",
                i=inp.read_all(), d=d)
            new_window = self.sql(self.first("m", window), m=merged)
        (new_window,) = self.shared(new_window)  # read by the state writes and the output
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

