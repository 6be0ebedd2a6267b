"""Window functions OVER (PARTITION BY ... ORDER BY ... [ROWS | RANGE frame]): ranking ones
(row_number, rank, dense_rank), offset ones (lag, lead), value ones (first_value, last_value,
nth_value) and aggregates (count, sum, avg, min, max); value functions and aggregates over a ROWS
or RANGE frame or SQL's default.

A window function's values in one partition depend only on that partition's rows, so the operator
recomputes the partitions a step touches: old output = the function over the partition's old rows,
new output = over old rows + delta, output delta = new - old. Only rows whose value (or content)
changed survive consolidation, so a top-N filter above this operator sees a small delta.

State: `input`, the child's rows keyed by (partition columns, stream key), so a step reads the rows of
the touched partitions by key prefix, as a join reads one side. NULL partition values form their own
partition (lookups are null-safe and SQL's PARTITION BY groups NULLs together).

Ties: row_number, lag, lead and ROWS frames break ORDER BY ties by the stream key (deterministic
across steps, where SQL leaves the order of peers open); rank, dense_rank, RANGE frames and the
default frame (which take in the current row's peers) give peers the same value, as SQL does.
first_value, last_value and nth_value pick rows of the frame in the ORDER BY, ties broken by the
stream key: every row gets its number in that total order, the frame (by the ORDER BY alone, so a
RANGE frame still takes in whole peer groups) gives the first and last numbers it holds (a frame
is a run of consecutive rows in the total order), and the value is the argument of the row with
the number wanted (first, last, or first + n - 1 when the frame reaches it), joined back.

Without PARTITION BY the whole input is one partition: every step that changes the input reads and
re-ranks all of it (correct, but the cost grows with the input, not with the delta).
"""
from __future__ import annotations

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W, col_list, consolidate_sql, null_safe_eq, row_schema, state_upsert_sql


RANKING = ("row_number", "rank", "dense_rank")
OFFSETS = ("lag", "lead")
VALUES = ("first_value", "last_value", "nth_value")


class OverWindowOp(Operator):
    def cols(self) -> list[str]:
        return [cname(i) for i in range(len(self.node.child.columns))]

    def rank_col(self) -> str:
        return cname(len(self.node.child.columns))

    def partition(self) -> list[str]:
        return [cname(i) for i in self.node.partition]

    def key(self) -> list[str]:
        """The child's stream key, or every column when it has none (rows are then whole-row unique)."""
        return [cname(k) for k in self.node.child.stream_key] or self.cols()

    def state_pk(self) -> list[str]:
        pk = self.partition()
        return pk + [k for k in self.key() if k not in pk]

    def state_tables(self):
        return {"input": (self.state_pk(), row_schema(self.node.child))}

    def apply(self, inputs):
        (d,) = self.shared(*inputs)  # read by a count, the lookup, the new rows and the state writes
        cols = self.cols()
        if self.engine.num_rows(d) == 0:
            return self.sql(f"SELECT {col_list(cols)}, CAST(NULL AS BIGINT) AS {quote(self.rank_col())}, "
                            f"{W} FROM d WHERE 1 = 0", d=d)
        state = self.state("input")
        (old,) = self.shared(self._old_rows(state, d))
        new = self._new_rows(old, d)
        if self.node.func in VALUES:
            out = self.sql(self._values_sql(), n=new, o=old)
        else:
            out = self.sql(
                f"SELECT {self._ranked_select('1')} FROM n UNION ALL SELECT {self._ranked_select('-1')} FROM o",
                n=new, o=old)
        state.stage(self.sql(state_upsert_sql(cols, self.state_pk()), shared=True, d=d))
        return self.sql(consolidate_sql(cols + [self.rank_col()], "o"), o=out)

    def _old_rows(self, state, d):
        """The stored rows of the partitions the delta touches (all rows without PARTITION BY)."""
        part = self.partition()
        if not part:
            return state.read_all()
        keys = self.sql(f"SELECT DISTINCT {col_list(part)} FROM d", d=d)
        return state.lookup(keys, part)

    def _new_rows(self, old, d):
        """Old rows plus the delta, consolidated: the touched partitions after this step."""
        cols = self.cols()
        merged = self.sql(consolidate_sql(cols, "u"), u=self.sql(
            f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM o UNION ALL SELECT {col_list(cols)}, {W} FROM d",
            o=old, d=d))
        return self.sql(f"SELECT {col_list(cols)} FROM m WHERE {W} > 0", m=merged)

    def _ranked_select(self, weight: str) -> str:
        """The select list ranking one relation's rows: its columns, the rank, then `weight`."""
        rank = self._rank_expr()
        return f"{col_list(self.cols())}, {rank} AS {quote(self.rank_col())}, CAST({weight} AS BIGINT) AS {W}"

    def _rank_expr(self) -> str:
        node = self.node
        order = [f"{quote(cname(o.column))} {'DESC' if o.desc else 'ASC'} NULLS {'FIRST' if o.nulls_first else 'LAST'}"
                 for o in node.order]
        offset = node.func in OFFSETS
        aggregate = node.func not in RANKING and not offset
        if node.func in RANKING and node.func != "row_number" and not order:
            return "CAST(1 AS BIGINT)"  # every row is a peer of every other row of its partition
        if node.func == "row_number" or offset or (node.frame.startswith("ROWS") and order):
            order += [f"{quote(k)} ASC NULLS FIRST" for k in self.key()]
        over = []
        if self.partition():
            over.append(f"PARTITION BY {col_list(self.partition())}")
        if order:
            over.append("ORDER BY " + ", ".join(order))
        if node.frame:
            over.append(node.frame)
        out_type = sqltypes.duckdb_type(node.columns[-1].type)
        if offset:
            default = "" if node.default is None else f", {quote(cname(node.default))}"
            call = f"{node.func}({quote(cname(node.arg))}, {node.offset}{default})"
        else:
            call = f"{node.func}()" if not aggregate else "count(*)" if node.arg is None else \
                f"{node.func}({quote(cname(node.arg))})"
        return f"CAST({call} OVER ({' '.join(over)}) AS {out_type})"

    def _values_sql(self) -> str:
        """first_value / last_value / nth_value over the new rows `n` (weight +1) and the old rows
        `o` (weight -1) at once: each side is a partition of its own (rw_side)."""
        node = self.node
        cols, part = self.cols(), self.partition()
        order = [f"{quote(cname(o.column))} {'DESC' if o.desc else 'ASC'} NULLS {'FIRST' if o.nulls_first else 'LAST'}"
                 for o in node.order]
        total = order + [f"{quote(k)} ASC NULLS FIRST" for k in self.key()]
        by = f"PARTITION BY {col_list(['rw_side'] + part)}"
        frame_order = total if node.frame.startswith("ROWS") else order
        over = " ".join([by] + (["ORDER BY " + ", ".join(frame_order)] if frame_order else [])
                        + ([node.frame] if node.frame else []))
        if node.func == "first_value":
            target = "f.rw_lo"
        elif node.func == "last_value":
            target = "f.rw_hi"
        else:
            target = f"CASE WHEN f.rw_lo + {node.offset - 1} <= f.rw_hi THEN f.rw_lo + {node.offset - 1} END"
        out_type = sqltypes.duckdb_type(node.columns[-1].type)
        arg = quote(cname(node.arg))
        same = null_safe_eq(["rw_side"] + part, ["rw_side"] + part, "f", "v")
        return (
            f"WITH rw_u AS (SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS rw_side FROM n "
            f"UNION ALL SELECT {col_list(cols)}, CAST(-1 AS BIGINT) AS rw_side FROM o), "
            f"rw_n AS (SELECT *, row_number() OVER ({by} ORDER BY {', '.join(total)}) AS rw_rn FROM rw_u), "
            f"rw_f AS (SELECT *, min(rw_rn) OVER ({over}) AS rw_lo, max(rw_rn) OVER ({over}) AS rw_hi FROM rw_n) "
            f"SELECT {col_list(cols, 'f.')}, CAST(v.{arg} AS {out_type}) AS {quote(self.rank_col())}, f.rw_side AS {W} "
            f"FROM rw_f f LEFT JOIN rw_n v ON {same} AND v.rw_rn = {target}")
