"""Dynamic filter: the left rows whose value compares with the current value of a one-row input.

`WHERE v > (SELECT max(x) FROM u)`. State: `left`, the left rows sorted by the compared value
(rows whose value is NULL never pass, so they are not kept), and `right`, the one-row side's
current row. The output is linear in the left rows, so a step's change is

    filter(left delta, new value) + filter(old left, new value) - filter(old left, old value)

and the last two terms differ only for rows whose value lies between the old and the new value:
one range read of the sorted state, however large the left side is.
"""
from __future__ import annotations

from ..engine.duck import quote
from ..errors import DataError
from ..sql.plan import cname
from .base import Operator, W, col_list, consolidate_sql, row_schema, state_upsert_sql


class DynamicFilterOp(Operator):
    def lcols(self) -> list[str]:
        return [cname(i) for i in range(len(self.node.left.columns))]

    def rcols(self) -> list[str]:
        return [cname(i) for i in range(len(self.node.right.columns))]

    def state_tables(self):
        node = self.node
        value = cname(node.column)
        left_pk = [value] + [cname(k) for k in node.left.stream_key if k != node.column]
        return {"left": (left_pk, row_schema(node.left)),
                "right": ([cname(k) for k in node.right.stream_key], row_schema(node.right))}

    def apply(self, inputs):
        dl, dr = self.shared(*inputs)  # each read by the output and by the state writes
        node = self.node
        lcols, rcols = self.lcols(), self.rcols()
        value, op = quote(cname(node.column)), node.op
        left, right = self.state("left"), self.state("right")
        rkey = self.state_tables()["right"][0]

        old = self.engine.to_arrow(right.read_all())
        new = self.engine.to_arrow(self.sql(
            f"SELECT {col_list(rcols)} FROM o x WHERE NOT EXISTS (SELECT 1 FROM d y WHERE y.{W} < 0"
            + "".join(f" AND x.{quote(k)} IS NOT DISTINCT FROM y.{quote(k)}" for k in rkey)
            + f") UNION ALL SELECT {col_list(rcols)} FROM d WHERE {W} > 0", o=old, d=dr))
        if new.num_rows > 1:
            raise DataError(f"{self.ctx.obj.name!r}: the one-row side of its dynamic filter holds "
                            f"{new.num_rows} rows")
        right.stage(self.sql(state_upsert_sql(rcols, rkey), shared=True, d=dr))
        bound = cname(0)
        old_v = old.column(bound)[0].as_py() if old.num_rows else None
        new_v = new.column(bound)[0].as_py() if new.num_rows else None

        parts = [self.sql(f"SELECT {col_list(lcols, 'x.')}, x.{W} FROM d x, n WHERE x.{value} {op} n.{bound}",
                          d=dl, n=new)]
        if old_v != new_v:
            # rows between the two values may change sides: read them (a superset), then compare
            if old_v is None or new_v is None:
                v = new_v if old_v is None else old_v
                lo, hi = (v, None) if op in (">", ">=") else (None, v)
            else:
                lo, hi = min(old_v, new_v), max(old_v, new_v)
            between = left.range(lo, hi)
            parts.append(self.sql(
                f"SELECT * FROM (SELECT {col_list(lcols, 'x.')}, CAST("
                f"(CASE WHEN x.{value} {op} n.{bound} THEN 1 ELSE 0 END) - "
                f"(CASE WHEN x.{value} {op} o.{bound} THEN 1 ELSE 0 END) AS BIGINT) AS {W} "
                f"FROM r x LEFT JOIN n ON TRUE LEFT JOIN o ON TRUE) rw_t WHERE {W} <> 0",
                r=between, n=new, o=old))
        kept = self.sql(f"SELECT * FROM d WHERE {value} IS NOT NULL", d=dl)  # NULL never passes
        left.stage(self.sql(state_upsert_sql(lcols, self.state_tables()["left"][0]), shared=True, d=kept))
        out = parts[0] if len(parts) == 1 else self.sql("SELECT * FROM a UNION ALL SELECT * FROM b",
                                                         a=parts[0], b=parts[1])
        return self.sql(consolidate_sql(lcols, "o"), o=out)
