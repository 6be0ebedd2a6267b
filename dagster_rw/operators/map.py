"""Map (filter, then project): linear, so its delta is the rule applied to the input delta."""
from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W, render


class MapOp(Operator):
    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        if isinstance(d, pa.Table) and node.where is None and all(
                isinstance(e, exp.Column) and not e.table for e in node.exprs):
            # a pure projection: select and rename the columns, no SQL needed
            return d.select([e.name for e in node.exprs] + [W]).rename_columns(
                [cname(i) for i in range(len(node.exprs))] + [W])
        select = ", ".join(f"{render(e)} AS {quote(cname(i))}" for i, e in enumerate(node.exprs))
        where = f" WHERE {render(node.where)}" if node.where is not None else ""
        return self.sql(f"SELECT {select + ', ' if select else ''}{W} FROM d{where}", d=d)
