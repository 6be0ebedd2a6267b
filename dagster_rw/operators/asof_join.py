"""ASOF joins, maintained per join key.

Each left row meets at most one right row: among the right rows with its join keys, the closest
by the inequality (`l.t >= r.t`: the right row with the greatest `t` not after the left row's).
A right row that arrives or leaves can change the match of every left row with its keys, so, as
for the outer joins, a step recomputes the keys it touched: the output delta is
asof(L_new[K], R_new[K]) - asof(L_old[K], R_old[K]), over the keys K of both sides' changes. The
state is each side's rows by (join key, stream key). Right rows tied on the compared column are
ranked by their other columns, so the match is the same on every engine and in every step.
"""
from __future__ import annotations

from .. import types as sqltypes
from ..engine.duck import quote
from .base import Operator, W, col_list, consolidate_sql
from .join import JoinSides, any_null

_DESCENDING = {">=": True, ">": True, "<=": False, "<": False}


class AsofJoinOp(JoinSides, Operator):
    def apply(self, inputs):
        dl, dr = self.shared(*inputs)  # read by the lookups, the recomputation and the state writes
        lk, lc, rc = self.lkeys(), self.lcols(), self.rcols()
        lo, ro, ln, rn = self.touched_sides(dl, dr)
        parts = [f"SELECT * FROM ({self._asof('ln', 'rn')}) n",
                 f"SELECT {self._negated()} FROM ({self._asof('lo', 'ro')}) o"]
        nl = len(lc)
        if self.node.kind == "left":  # rows with a NULL join key meet nothing: they pass through padded
            pad = ", ".join([f"l.{quote(c)} AS {quote(c)}" for c in lc] +
                            [f"CAST(NULL AS {self._type(nl + i)}) AS {quote(f'c{nl + i}')}" for i in range(len(rc))])
            parts.append(f"SELECT {pad}, l.{W} AS {W} FROM dl l WHERE {any_null(lk, 'l')}")
        out = self.sql(" UNION ALL ".join(parts), ln=ln, rn=rn, lo=lo, ro=ro, dl=dl)
        all_cols = [f"c{i}" for i in range(len(self.node.columns))]
        out = self.sql(consolidate_sql(all_cols, "o"), o=out)
        self.stage_sides(dl, dr)
        return out

    def _asof(self, left: str, right: str) -> str:
        """The ASOF join of two relations of weighted rows (each row distinct): every pair of rows
        meeting the keys and the inequality, ranked per left row, the closest first."""
        node = self.node
        lt, rt = quote(f"c{node.asof_left}"), quote(f"c{node.asof_right}")
        direction = "DESC" if _DESCENDING[node.asof_op] else "ASC"
        ties = ", ".join(f"r.{quote(c)} ASC NULLS FIRST" for c in self.rcols() if c != f"c{node.asof_right}")
        order = f"r.{rt} {direction}" + (f", {ties}" if ties else "")
        partition = ", ".join(f"l.{quote(c)}" for c in self.lcols())
        join = "LEFT JOIN" if node.kind == "left" else "JOIN"
        cond = f"{self.condition()} AND l.{lt} {node.asof_op} r.{rt}"
        ranked = (f"SELECT {self.output_select('l.' + W)}, row_number() OVER (PARTITION BY {partition} "
                  f"ORDER BY {order}) AS rw_rank FROM {left} l {join} {right} r ON {cond}")
        cols = col_list([f"c{i}" for i in range(len(node.columns))] + [W])
        return f"SELECT {cols} FROM ({ranked}) p WHERE rw_rank = 1"

    def _negated(self) -> str:
        return ", ".join([quote(f"c{i}") for i in range(len(self.node.columns))] + [f"-{W} AS {W}"])

    def _type(self, i: int) -> str:
        return sqltypes.duckdb_type(self.node.columns[i].type)


__all__ = ["AsofJoinOp"]
