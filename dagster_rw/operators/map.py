"""Map (filter, then project): linear, so its delta is the rule applied to the input delta."""
from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from .arrow_eval import evaluate
from .base import Operator, W, render

ARROW_ROWS = 100_000  # deltas up to this many rows are mapped by Arrow's kernels where they can be


class MapOp(Operator):
    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        if isinstance(d, pa.Table) and node.where is None and all(
                isinstance(e, exp.Column) and not e.table for e in node.exprs):
            # a pure projection: select and rename the columns, no SQL needed
            return d.select([e.name for e in node.exprs] + [W]).rename_columns(
                [cname(i) for i in range(len(node.exprs))] + [W])
        if isinstance(d, pa.Table) and d.num_rows <= ARROW_ROWS:
            types = [sqltypes.arrow_type(c.type) for c in node.columns]
            done = evaluate(d, node.exprs, node.where, types)
            if done is not None:
                columns, mask = done
                w = d.column(W) if mask is None else d.column(W).filter(mask)
                return pa.table(columns + [w], names=[cname(i) for i in range(len(columns))] + [W])
        select = ", ".join(f"{render(e)} AS {quote(cname(i))}" for i, e in enumerate(node.exprs))
        where = f" WHERE {render(node.where)}" if node.where is not None else ""
        return self.sql(f"SELECT {select + ', ' if select else ''}{W} FROM d{where}", d=d)
