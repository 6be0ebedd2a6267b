"""Temporal (lookup) join: each new stream row meets the dimension's committed state, once.

d(output) = d(stream) looked up in the dimension as it is now. The dimension's own changes are
not joined with the past stream, so they never retract or amend earlier output (the stream side
is append-only, so there are no stream deletions to match either). No state of its own: the
dimension's committed rows, sorted by its primary key, are the index.
"""
from __future__ import annotations

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W, consolidate_sql
from .join import JoinSides


class LookupJoinOp(JoinSides, Operator):
    def state_tables(self):
        return {}

    def apply(self, inputs):
        (dl,) = self.shared(inputs[0])  # read by the lookup and the join (the dimension's changes: not at all)
        node = self.node
        right = node.right
        names = [c.name for c in right.columns]  # the dimension's columns, in the Scan's order
        pk_names = [names[k] for k in right.stream_key]
        # look up by the dimension's primary key (in its order); the ON condition then applies in full
        key_of = {rk: lk for lk, rk in zip(node.left_keys, node.right_keys)}
        wanted = self.sql(
            f"SELECT DISTINCT {', '.join(f'{quote(cname(key_of[k]))} AS {quote(names[k])}' for k in right.stream_key)} "
            f"FROM d WHERE {' AND '.join(f'{quote(cname(key_of[k]))} IS NOT NULL' for k in right.stream_key)}", d=dl)
        found = self.ctx.lookup_committed(node.dimension, wanted, pk_names)
        hits = self.sql(f"SELECT {', '.join(f'{quote(n)} AS {quote(cname(i))}' for i, n in enumerate(names))} "
                        f"FROM f", f=found)
        cond = self.condition()
        out = f"SELECT {self.output_select('l.' + W)} FROM dl l JOIN r ON {cond}"
        if node.kind == "left":
            nl = len(node.left.columns)
            pad = [f"l.{quote(c)} AS {quote(c)}" for c in self.lcols()] + [
                f"NULL AS {quote(cname(nl + i))}" for i in range(len(right.columns))]
            out += (f" UNION ALL SELECT {', '.join(pad)}, l.{W} AS {W} FROM dl l "
                    f"WHERE NOT EXISTS (SELECT 1 FROM r WHERE {cond})")
        rel = self.sql(out, dl=dl, r=hits)
        typed = ", ".join(f"CAST({quote(cname(i))} AS {sqltypes.duckdb_type(c.type)}) AS {quote(cname(i))}"
                          for i, c in enumerate(node.columns))
        rel = self.sql(f"SELECT {typed}, {W} FROM o", o=rel)
        return self.sql(consolidate_sql([cname(i) for i in range(len(node.columns))], "o"), o=rel)

