"""EMIT ON WINDOW CLOSE over rows: each row is emitted once the watermark has passed its event time.

State: `buffer`, the rows whose event time the watermark has not passed yet, sorted by event time.
A step emits the new rows already behind the watermark (as of its target epoch), buffers the
others, then emits and drops the buffered rows the watermark has now passed: one range read of
the buffer, from its start up to the watermark. Rows arriving behind the watermark of the step
before are late and dropped; rows without an event time are never emitted. Nothing is retracted.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..engine.duck import quote
from ..sql.plan import cname
from .base import DELETED, Operator, W, col_list, micros, row_schema


class WindowCloseFilterOp(Operator):
    def cols(self) -> list[str]:
        return [cname(i) for i in range(len(self.node.child.columns))]

    def state_tables(self):
        node = self.node
        pk = [cname(node.column)] + [cname(k) for k in node.child.stream_key if k != node.column]
        return {"buffer": (pk, row_schema(node.child))}

    def apply(self, inputs):
        (d,) = inputs
        node, ctx = self.node, self.ctx
        cols = self.cols()
        ts = micros(quote(cname(node.column)))
        wm_before = None if ctx.backfill else ctx.watermark(node.source, ctx.manifest.epoch)
        wm_now = ctx.watermark(node.source, ctx.target)
        buffer = self.state("buffer")
        keep = f"{W} > 0 AND {quote(cname(node.column))} IS NOT NULL"  # the input only inserts
        if wm_before is not None:
            keep += f" AND {ts} >= {wm_before}"  # behind the last step's watermark: late
        passed = f"{ts} < {wm_now}" if wm_now is not None else "false"
        fresh = self.sql(f"SELECT {col_list(cols)} FROM d WHERE {keep}", shared=True, d=d)
        buffer.stage(self.sql(f"SELECT {col_list(cols)}, false AS {DELETED} FROM f WHERE NOT ({passed})", f=fresh))
        out = [self.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM f WHERE {passed}", f=fresh)]
        if wm_now is not None and wm_now != wm_before:
            field = row_schema(node.child).field(cname(node.column))
            bound = pa.array(np.array([wm_now], np.int64)).cast(pa.timestamp("us", tz=field.type.tz))
            closed = self.sql(f"SELECT {col_list(cols)} FROM b WHERE {passed}", shared=True,
                              b=buffer.range(None, bound.cast(field.type)[0].as_py()))
            buffer.stage(self.sql(f"SELECT {col_list(cols)}, true AS {DELETED} FROM c", c=closed))
            out.append(self.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM c", c=closed))
        return out[0] if len(out) == 1 else self.sql("SELECT * FROM a UNION ALL SELECT * FROM b", a=out[0], b=out[1])
