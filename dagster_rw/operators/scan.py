"""Scan: the input delta of a table or view, as the runtime read it from the upstream change log."""
from __future__ import annotations

import pyarrow as pa

from .base import Operator, W, col_list, names


class ScanOp(Operator):
    def apply(self, inputs):
        raw = self.ctx.input_delta(self.node.source)
        # the change log stores columns under their object names; rename to positions
        src = [c.name for c in self.node.columns]
        if isinstance(raw, pa.Table):
            return raw.select(src + [W]).rename_columns(names(self.node) + [W])
        select = ", ".join(f'd."{s}" AS "{c}"' for s, c in zip(src, names(self.node)))
        return self.sql(f"SELECT {select}, {W} FROM d" if select else f"SELECT {W} FROM d", d=raw)


__all__ = ["ScanOp", "col_list"]
