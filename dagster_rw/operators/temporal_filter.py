"""Temporal filter: the rows whose time column compares with now() plus or minus a constant, where
now() is the barrier time of the epoch a step reaches (RisingWave's temporal filters).

`WHERE ts > now() - INTERVAL '1 hour'` is a lower bound: as time passes, rows leave and never come
back. `WHERE ts <= now() - INTERVAL '1 hour'` is an upper bound: rows enter (a delay). Both make
a sliding window. now() never decreases from one step to the next (the step keeps it in state
and takes the larger of it and its epoch's time), so neither does any bound.

State: `rows`, sorted by the compared value, the input rows whose outcome can still change with
time: with a lower bound, those it has not expired (an expired row can never pass again, so it is
forgotten); with upper bounds alone, those that have not entered yet (once in, a row stays until
its input deletes it). `clock`: now() as of the last step. The output is linear in the input
rows, so a step's change is

    filter(input delta, now) + filter(old rows, now) - filter(old rows, old now)

and the last two terms differ only for rows whose value lies between a bound's old and new value:
one range read of the sorted state per bound, however many rows the state holds.
"""
from __future__ import annotations

import datetime

import pyarrow as pa

from ..engine.duck import quote
from ..sql.plan import NOW, cname
from .base import DELETED, Operator, W, col_list, consolidate_sql, micros, null_safe_eq, render, row_schema, \
    state_upsert_sql

CLOCK = pa.schema([("now_us", pa.int64())])
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _instant(now_us: int) -> str:
    """now() as a TIMESTAMPTZ literal (DuckDB)."""
    return f"TIMESTAMPTZ '{(_EPOCH + datetime.timedelta(microseconds=now_us)).isoformat(sep=' ')}'"


class TemporalFilterOp(Operator):
    def cols(self) -> list[str]:
        return [cname(i) for i in range(len(self.node.child.columns))]

    def state_tables(self):
        node = self.node
        pk = [cname(node.column)] + [cname(k) for k in node.child.stream_key if k != node.column]
        return {"rows": (pk, row_schema(node.child)), "clock": ([], CLOCK)}

    def bound_values(self, now_us: int) -> list[int]:
        """Each bound's value at `now_us`, in microseconds since 1970."""
        exprs = ", ".join(f"epoch_us(CAST(({render(b.bound)}) AS TIMESTAMPTZ)) AS b{i}"
                          for i, b in enumerate(self.node.bounds))
        row = self.ctx.evaluate(f"SELECT {exprs} FROM (SELECT {_instant(now_us)} AS {NOW}) rw_t").to_pylist()[0]
        return [row[f"b{i}"] for i in range(len(self.node.bounds))]

    def passes(self, values: list[int]) -> str:
        """SQL: a row passes every bound at these values."""
        v = micros(quote(cname(self.node.column)))
        return " AND ".join(f"{v} {b.op} {x}" for b, x in zip(self.node.bounds, values))

    def settled(self, values: list[int]) -> str:
        """SQL: a row's outcome can no longer change as time passes (a row with a value): a lower
        bound has expired it, or, with upper bounds alone, it has entered."""
        v = micros(quote(cname(self.node.column)))
        lower = [f"{v} {b.op} {x}" for b, x in zip(self.node.bounds, values) if b.is_lower]
        return f"NOT ({' AND '.join(lower)})" if lower else self.passes(values)

    def changing(self, old: list[int], new: list[int]) -> list[tuple[int, int]]:
        """The value ranges (microseconds, inclusive, disjoint) holding every row whose outcome may
        differ between the two sets of bound values."""
        spans = sorted((o, n) for o, n in zip(old, new) if o != n)
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return [(lo, hi) for lo, hi in merged]

    def apply(self, inputs):
        (d,) = self.shared(*inputs)  # read by the output and by the state writes
        node, ctx = self.node, self.ctx
        cols = self.cols()
        value = quote(cname(node.column))
        rows, clock = self.state("rows"), self.state("clock")
        then = None
        if clock.files:
            kept = self.engine.to_arrow(clock.read_all())
            then = kept.column("now_us")[0].as_py() if kept.num_rows else None
        now = ctx.barrier_time(ctx.target)
        if then is not None:
            now = max(now, then)
        new = self.bound_values(now)
        old = self.bound_values(then) if then is not None else None

        parts = [self.sql(f"SELECT {col_list(cols)}, {W} FROM d WHERE {self.passes(new)}", d=d)]
        moved = None
        if old is not None:
            field = row_schema(node.child).field(cname(node.column))
            reads = [rows.range(*pa.array([lo, hi], pa.int64()).cast(field.type).to_pylist())
                     for lo, hi in self.changing(old, new)]
            if reads:
                moved = self.sql(" UNION ALL ".join(f"SELECT * FROM r{i}" for i in range(len(reads))), shared=True,
                                 **{f"r{i}": r for i, r in enumerate(reads)})
                parts.append(self.sql(
                    f"SELECT * FROM (SELECT {col_list(cols)}, CAST((CASE WHEN {self.passes(new)} THEN 1 ELSE 0 END) "
                    f"- (CASE WHEN {self.passes(old)} THEN 1 ELSE 0 END) AS BIGINT) AS {W} FROM m) rw_t "
                    f"WHERE {W} <> 0", m=moved))

        # state: the delta's rows whose outcome can still change (its deletions: of rows the state held)
        pk = self.state_tables()["rows"][0]
        was_kept = f"NOT ({self.settled(old)})" if old is not None else "TRUE"
        kept = self.sql(f"SELECT {col_list(cols)}, {W} FROM d WHERE {value} IS NOT NULL AND "
                        f"(({W} > 0 AND NOT ({self.settled(new)})) OR ({W} < 0 AND {was_kept}))", shared=True, d=d)
        rows.stage(self.sql(state_upsert_sql(cols, pk, "k"), k=kept))
        if moved is not None:  # and the rows time has settled, unless the delta wrote them already
            rows.stage(self.sql(
                f"SELECT {col_list(cols)}, true AS {DELETED} FROM m rw_a WHERE {self.settled(new)} AND NOT EXISTS "
                f"(SELECT 1 FROM k rw_b WHERE {null_safe_eq(pk, pk, 'rw_a', 'rw_b')})", m=moved, k=kept))
        if now != then:
            clock.stage(pa.table({"now_us": pa.array([now], pa.int64()), DELETED: pa.array([False])}))

        out = parts[0] if len(parts) == 1 else self.sql("SELECT * FROM a UNION ALL SELECT * FROM b",
                                                         a=parts[0], b=parts[1])
        if node.id in ctx.unconsolidated:  # an aggregate above adds weights up: no need to here
            return out
        return self.sql(consolidate_sql(cols, "o"), o=out)
