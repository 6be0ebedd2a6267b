"""Map (filter, then project): linear, so its delta is the rule applied to the input delta."""
from __future__ import annotations

from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W, render


class MapOp(Operator):
    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        select = ", ".join(f"{render(e)} AS {quote(cname(i))}" for i, e in enumerate(node.exprs))
        where = f" WHERE {render(node.where)}" if node.where is not None else ""
        return self.sql(f"SELECT {select + ', ' if select else ''}{W} FROM d{where}", d=d)
