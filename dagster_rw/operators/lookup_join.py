"""Temporal (lookup) join: each new stream row meets the dimension's committed state, once.

d(output) = d(stream) looked up in the dimension as it is now. The dimension's own changes are
not joined with the past stream, so they never retract or amend earlier output. Over an
append-only stream the join keeps no state of its own: the dimension's committed rows, sorted by
its primary key, are the index (or an index on it, sorted by the index key, when the join matches
that key rather than the primary key). Over a stream that retracts rows (a table, a view that updates)
it keeps a memo of the row it emitted for each stream row, by the stream's key: a retracted
stream row retracts that row, whatever the dimension holds now (RisingWave's memo table).
"""
from __future__ import annotations

from functools import partial

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W, col_list, consolidate_sql, null_safe_eq, row_schema, state_writes
from .join import JoinSides


class LookupJoinOp(JoinSides, Operator):
    def state_tables(self):
        if not self.node.memo:
            return {}
        return {"memo": (self.memo_key(), row_schema(self.node))}

    def memo_key(self) -> list[str]:
        return [cname(k) for k in self.node.stream_key]

    def left_key(self) -> list[str]:
        """The memo key's columns that come from the left row (all of it, unless the lookup goes
        through an index, where the dimension's key follows): a retracted left row's rows."""
        nl = len(self.node.left.columns)
        return [cname(k) for k in self.node.stream_key if k < nl]

    def apply(self, inputs):
        (dl,) = self.shared(inputs[0])  # read by the lookup and the join (the dimension's changes: not at all)
        if not self.node.memo:
            return self.looked_up(dl)
        cols = [cname(i) for i in range(len(self.node.columns))]
        key, left = self.memo_key(), self.left_key()
        gone = self.sql(f"SELECT * FROM d WHERE {W} < 0", shared=True, d=dl)
        memo = self.state("memo")
        emitted = memo.lookup(self.sql(f"SELECT DISTINCT {col_list(left)} FROM g", g=gone), left)
        retracted = self.sql(f"SELECT {', '.join(f'm.{quote(c)}' for c in cols)}, g.{W} AS {W} "
                             f"FROM m JOIN g ON {null_safe_eq(left, left, 'm', 'g')}", m=emitted, g=gone)
        added = self.looked_up(self.sql(f"SELECT * FROM d WHERE {W} > 0", d=dl))
        out = self.sql(consolidate_sql(cols, "o"), shared=True, o=self.sql(
            f"SELECT {col_list(cols)}, {W} FROM a UNION ALL SELECT {col_list(cols)}, {W} FROM r",
            a=added, r=retracted))
        memo.stage(partial(state_writes, self.engine, out, cols, key, not memo.files))
        return out

    def looked_up(self, dl):
        """The stream rows `dl` joined with the dimension's committed rows (padded, for a LEFT join)."""
        node = self.node
        right = node.right
        names = [c.name for c in right.columns]  # the dimension's columns, in the Scan's order
        by = node.lookup_key or right.stream_key
        # look up by the dimension's primary key or an index's key (in its order); the ON condition
        # then applies in full
        key_of = {rk: lk for lk, rk in zip(node.left_keys, node.right_keys)}
        wanted = self.sql(
            f"SELECT DISTINCT {', '.join(f'{quote(cname(key_of[k]))} AS {quote(names[k])}' for k in by)} "
            f"FROM d WHERE {' AND '.join(f'{quote(cname(key_of[k]))} IS NOT NULL' for k in by)}", d=dl)
        found = self.ctx.lookup_committed(node.dimension, wanted, [names[k] for k in by])
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

