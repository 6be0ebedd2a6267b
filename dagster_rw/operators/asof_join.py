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
from .join import JoinSides
from .outer_join import _any_null

_DESCENDING = {">=": True, ">": True, "<=": False, "<": False}


class AsofJoinOp(JoinSides, Operator):
    def apply(self, inputs):
        dl, dr = self.shared(*inputs)  # read by the lookups, the recomputation and the state writes
        lk, rk = self.lkeys(), self.rkeys()
        lc, rc = self.lcols(), self.rcols()
        l_old, r_old = self.touched_rows(dl, dr)
        l_old, r_old = self.shared(self._unit(l_old, lc), self._unit(r_old, rc))
        l_new = self._updated(l_old, dl, lc, lk)
        r_new = self._updated(r_old, dr, rc, rk)
        parts = [f"SELECT * FROM ({self._asof('ln', 'rn')}) n",
                 f"SELECT {self._negated()} FROM ({self._asof('lo', 'ro')}) o"]
        nl = len(lc)
        if self.node.kind == "left":  # rows with a NULL join key meet nothing: they pass through padded
            pad = ", ".join([f"l.{quote(c)} AS {quote(c)}" for c in lc] +
                            [f"CAST(NULL AS {self._type(nl + i)}) AS {quote(f'c{nl + i}')}" for i in range(len(rc))])
            parts.append(f"SELECT {pad}, l.{W} AS {W} FROM dl l WHERE {_any_null(lk, 'l')}")
        out = self.sql(" UNION ALL ".join(parts), ln=l_new, rn=r_new, lo=l_old, ro=r_old, dl=dl)
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

    def _updated(self, old, delta, cols: list[str], keys: list[str]):
        """A side's rows of the touched keys after the step: the old ones and the delta's rows
        with non-NULL keys, their weights added up."""
        nonnull = " AND ".join(f"{quote(c)} IS NOT NULL" for c in keys)
        return self.sql(consolidate_sql(cols, "u"), u=self.sql(
            f"SELECT {col_list(cols)}, {W} FROM o UNION ALL SELECT {col_list(cols)}, {W} FROM d WHERE {nonnull}",
            o=old, d=delta))

    def _unit(self, rel, cols):
        return self.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM s", s=rel)


__all__ = ["AsofJoinOp"]
