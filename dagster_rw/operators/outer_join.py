"""LEFT / RIGHT / FULL equi-joins, maintained per join key.

The output rows of one join key depend only on both sides' rows with that key, so the delta is
(L_new[K] join R_new[K]) - (L_old[K] join R_old[K]) over the keys K that the step touched. Rows with a
NULL join key never match: on a preserved side they pass through padded with NULLs.
"""
from __future__ import annotations

from .base import Operator, W, consolidate_sql, null_safe_eq
from .join import JoinSides, any_null


class OuterJoinOp(JoinSides, Operator):
    def apply(self, inputs):
        dl, dr = self.shared(*inputs)  # read by the lookups, the join and the state writes
        kind = self.node.kind
        lk, rk = self.lkeys(), self.rkeys()
        lc, rc = self.lcols(), self.rcols()
        lo, ro, ln, rn = self.touched_sides(dl, dr)
        sql_kind = {"left": "LEFT", "right": "RIGHT", "full": "FULL"}[kind]
        cond = self.condition()
        weight = f"coalesce(l.{W}, 1) * coalesce(r.{W}, 1)"
        parts = [
            f"SELECT {self.output_select(weight)} FROM ln l {sql_kind} JOIN rn r ON {cond}",
            f"SELECT {self.output_select('-' + weight)} FROM lo l {sql_kind} JOIN ro r ON {cond}",
        ]
        nl = len(lc)
        if kind in ("left", "full"):
            pad = ", ".join([f'l."{c}" AS "{c}"' for c in lc] + [f'NULL AS "c{nl + i}"' for i in range(len(rc))])
            parts.append(f"SELECT {pad}, l.{W} AS {W} FROM dl l WHERE {any_null(lk, 'l')}")
        if kind in ("right", "full"):
            pad = ", ".join([f'NULL AS "{c}"' for c in lc] + [f'r."{c}" AS "c{nl + i}"' for i, c in enumerate(rc)])
            parts.append(f"SELECT {pad}, r.{W} AS {W} FROM dr r WHERE {any_null(rk, 'r')}")
        out = self.sql(
            " UNION ALL ".join(parts),
            ln=ln, rn=rn, lo=lo, ro=ro, dl=dl, dr=dr,
        )
        all_cols = [f"c{i}" for i in range(len(self.node.columns))]
        out = self.sql(consolidate_sql(all_cols, "o"), o=out)
        self.stage_sides(dl, dr)
        return out


__all__ = ["OuterJoinOp", "null_safe_eq"]
