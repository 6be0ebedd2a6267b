"""UNION ALL: the deltas of all branches side by side, each row tagged with its branch number."""
from __future__ import annotations

from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W


class UnionAllOp(Operator):
    def apply(self, inputs):
        node = self.node
        width = node.visible
        total = len(node.columns)
        parts, rels = [], {}
        pos = width + 1
        for b, (child, d) in enumerate(zip(node.inputs, inputs)):
            keys = child.stream_key  # positions in the child after the visible columns
            select = [f"{quote(cname(i))} AS {quote(cname(i))}" for i in range(width)]
            select.append(f"CAST({b} AS INTEGER) AS {quote(cname(width))}")
            mine = {pos + j: k for j, k in enumerate(keys)}
            for out in range(width + 1, total):
                if out in mine:
                    select.append(f"{quote(cname(mine[out]))} AS {quote(cname(out))}")
                else:
                    from .. import types as sqltypes

                    t = sqltypes.duckdb_type(node.columns[out].type)
                    select.append(f"CAST(NULL AS {t}) AS {quote(cname(out))}")
            pos += len(keys)
            parts.append(f"SELECT {', '.join(select)}, {W} FROM d{b}")
            rels[f"d{b}"] = d
        return self.sql(" UNION ALL ".join(parts), **rels)
