"""Aggregation per time window with EMIT ON WINDOW CLOSE: each window's groups are emitted once.

State strategies:
- `buffer`: the input rows of windows still open, with their multiplicity (keyed by the window
  column, then the whole row), so a window's result is computed once, over all its rows;
- `windows`: the open windows themselves (a handful), so finding the windows that close never
  scans the buffer.

A step adds the input delta to the buffer (rows of windows that closed before this step are late
and ignored), then closes every window whose end the watermark (of the source, as of the step's
target epoch) has passed: computes its groups from its buffered rows, emits them as inserts and
deletes its rows and its entry. Nothing is ever retracted.
"""
from __future__ import annotations

import pyarrow as pa

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from .base import DELETED, Operator, W, col_list, micros, null_safe_eq

CNT = "rw_cnt"


class WindowCloseAggregateOp(Operator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        child = node.child
        self.w = cname(node.window)
        self.cols = [cname(i) for i in range(len(child.columns))]
        self.pk = [self.w] + [c for c in self.cols if c != self.w]

    def state_tables(self):
        child = self.node.child
        fields = [pa.field(cname(i), sqltypes.arrow_type(c.type)) for i, c in enumerate(child.columns)]
        wfield = fields[self.node.window]
        return {
            "buffer": (self.pk, pa.schema(fields + [pa.field(CNT, pa.int64())])),
            "windows": ([self.w], pa.schema([wfield])),
        }

    def end_micros(self, column: str) -> str:
        """The window's end as microseconds since 1970 (the unit of watermarks)."""
        us = micros(column)
        return f"({us} + {self.node.size_us})" if self.node.window_is_start else f"({us})"

    def apply(self, inputs):
        (d,) = inputs
        node, ctx = self.node, self.ctx
        wm_before = None if ctx.backfill else ctx.watermark(node.source, ctx.manifest.epoch)
        wm_now = ctx.watermark(node.source, ctx.target)
        cols = col_list(self.cols)
        late = f" WHERE {quote(self.w)} IS NOT NULL"  # a row without event time is in no window
        if wm_before is not None:  # rows of windows that closed before this step are late
            late += f" AND {self.end_micros(quote(self.w))} > {wm_before}"
        dc = self.sql(f"SELECT {cols}, CAST(sum({W}) AS BIGINT) AS dcnt FROM d{late} GROUP BY {cols} "
                      f"HAVING sum({W}) <> 0", shared=True, d=d)
        buffer, windows = self.state("buffer"), self.state("windows")
        old = buffer.lookup(self.sql(f"SELECT {col_list(self.pk)} FROM dc", dc=dc), self.pk)
        merged = self.sql(
            f"SELECT {col_list(self.cols, 'dc.')}, CAST(coalesce(o.{CNT}, 0) + dc.dcnt AS BIGINT) AS {CNT} "
            f"FROM dc LEFT JOIN o ON {null_safe_eq(self.pk, self.pk, 'dc', 'o')}", shared=True, dc=dc, o=old)
        w = quote(self.w)
        (open_before,) = self.shared(windows.read_all())
        closes = f"{self.end_micros(w)} <= {wm_now}" if wm_now is not None else "FALSE"
        touched = self.sql(f"SELECT DISTINCT {w} FROM ob UNION SELECT DISTINCT {w} FROM m", ob=open_before, m=merged)
        closed = self.sql(f"SELECT {w} FROM t WHERE {closes}", shared=True, t=touched)
        is_closed = f"{w} IN (SELECT {w} FROM closed)"
        fields = pa.schema([pa.field(cname(i), sqltypes.arrow_type(c.type)) for i, c in enumerate(node.child.columns)]
                           + [pa.field(CNT, pa.int64())])
        if self.engine.num_rows(closed):
            # rows of the closing windows: the buffered ones, with this step's changes applied
            (stored,) = self.shared(buffer.lookup(closed, [self.w]))
            rows = self.sql(
                f"SELECT {cols}, {CNT} FROM s WHERE NOT EXISTS (SELECT 1 FROM m WHERE "
                f"{null_safe_eq(self.pk, self.pk, 's', 'm')}) UNION ALL "
                f"SELECT {cols}, {CNT} FROM m WHERE {CNT} > 0 AND {is_closed}", s=stored, m=merged, closed=closed)
            out = self.sql(self.aggregate_sql("r"), r=rows)
            buffer.stage(self.sql(
                f"SELECT {cols}, {CNT}, ({CNT} <= 0 OR {is_closed}) AS {DELETED} FROM m UNION ALL "
                f"SELECT {cols}, {CNT}, true AS {DELETED} FROM s WHERE NOT EXISTS (SELECT 1 FROM m WHERE "
                f"{null_safe_eq(self.pk, self.pk, 's', 'm')})", m=merged, s=stored, closed=closed))
        else:
            out = None
            buffer.stage(self.sql(f"SELECT {cols}, {CNT}, {CNT} <= 0 AS {DELETED} FROM m", m=merged))
        windows.stage(self.sql(
            f"SELECT {w}, true AS {DELETED} FROM ob WHERE {is_closed} UNION ALL "
            f"SELECT DISTINCT {w}, false AS {DELETED} FROM m WHERE {CNT} > 0 AND NOT ({is_closed}) "
            f"AND {w} NOT IN (SELECT {w} FROM ob)", ob=open_before, m=merged, closed=closed))
        if out is None:
            return self.sql(self.aggregate_sql("r") + " LIMIT 0", r=fields.empty_table())
        return out

    def aggregate_sql(self, source: str) -> str:
        """The groups of the rows in `source` (columns c0.. and their multiplicity), as inserts."""
        node = self.node
        ng = len(node.group)
        select = [f"{quote(cname(g))} AS {quote(cname(i))}" for i, g in enumerate(node.group)]
        for i, a in enumerate(node.aggs):
            t = sqltypes.duckdb_type(node.columns[ng + i].type)
            x = quote(cname(a.arg)) if a.arg is not None else None
            if a.func == "count_star":
                e = f"sum({CNT})"
            elif a.distinct:
                e = f"count(DISTINCT {x})"
            elif a.func == "count":
                e = f"coalesce(sum(CASE WHEN {x} IS NOT NULL THEN {CNT} ELSE 0 END), 0)"
            elif a.func == "sum":
                e = f"sum({x} * {CNT})"
            elif a.func == "avg":
                e = f"CAST(sum({x} * {CNT}) AS DOUBLE) / sum(CASE WHEN {x} IS NOT NULL THEN {CNT} END)"
            else:
                e = f"{a.func}({x})"
            select.append(f"CAST({e} AS {t}) AS {quote(cname(ng + i))}")
        group = ", ".join(quote(cname(g)) for g in node.group)
        return f"SELECT {', '.join(select)}, CAST(1 AS BIGINT) AS {W} FROM {source} GROUP BY {group}"
