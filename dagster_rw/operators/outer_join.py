"""LEFT / RIGHT / FULL equi-joins, maintained per join key.

The output rows of one join key depend only on both sides' rows with that key, so the delta is
(L_new[K] join R_new[K]) - (L_old[K] join R_old[K]) over the keys K that the step touched. Rows with a
NULL join key never match: on a preserved side they pass through padded with NULLs.
"""
from __future__ import annotations

from .base import Operator, W, col_list, consolidate_sql, null_safe_eq
from .join import JoinSides


class OuterJoinOp(JoinSides, Operator):
    def apply(self, inputs):
        dl, dr = self.shared(*inputs)  # read by the lookups, the join and the state writes
        kind = self.node.kind
        lk, rk = self.lkeys(), self.rkeys()
        lc, rc = self.lcols(), self.rcols()
        l_old, r_old = self.touched_rows(dl, dr)
        nonnull_l = " AND ".join(f'"{c}" IS NOT NULL' for c in lk)
        nonnull_r = " AND ".join(f'"{c}" IS NOT NULL' for c in rk)
        l_new = self.sql(consolidate_sql(lc, "u"), u=self.sql(
            f"SELECT {col_list(lc)}, CAST(1 AS BIGINT) AS {W} FROM o UNION ALL "
            f"SELECT {col_list(lc)}, {W} FROM d WHERE {nonnull_l}", o=l_old, d=dl))
        r_new = self.sql(consolidate_sql(rc, "u"), u=self.sql(
            f"SELECT {col_list(rc)}, CAST(1 AS BIGINT) AS {W} FROM o UNION ALL "
            f"SELECT {col_list(rc)}, {W} FROM d WHERE {nonnull_r}", o=r_old, d=dr))
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
            parts.append(f"SELECT {pad}, l.{W} AS {W} FROM dl l WHERE {_any_null(lk, 'l')}")
        if kind in ("right", "full"):
            pad = ", ".join([f'NULL AS "{c}"' for c in lc] + [f'r."{c}" AS "c{nl + i}"' for i, c in enumerate(rc)])
            parts.append(f"SELECT {pad}, r.{W} AS {W} FROM dr r WHERE {_any_null(rk, 'r')}")
        out = self.sql(
            " UNION ALL ".join(parts),
            ln=l_new, rn=r_new, lo=self._unit(l_old, lc), ro=self._unit(r_old, rc), dl=dl, dr=dr,
        )
        all_cols = [f"c{i}" for i in range(len(self.node.columns))]
        out = self.sql(consolidate_sql(all_cols, "o"), o=out)
        self.stage_sides(dl, dr)
        return out

    def _unit(self, rel, cols):
        return self.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM s", s=rel)


def _any_null(cols: list[str], prefix: str) -> str:
    return "(" + " OR ".join(f'{prefix}."{c}" IS NULL' for c in cols) + ")"


__all__ = ["OuterJoinOp", "null_safe_eq"]
