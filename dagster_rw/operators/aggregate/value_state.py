"""The aggregate's state layout: the value state (`acc`: per group the row count and the running
sums and counts), and the count tables of MIN/MAX/COUNT DISTINCT and of the ordered aggregates."""
from __future__ import annotations

import pyarrow as pa

from ... import types as sqltypes
from ...sql.plan import ORDERED_AGGS, cname
from ...storage.count_table import CountTable

MINPUT = ("min", "max")


def weighted_sum(x: str, weight: str, acc_type: str, cast: bool = True) -> str:
    """SQL summing `x * weight` over a group's non-NULL values (NULL when there are none), cast to
    the accumulator's type (`cast`; a partial sum summed again later needs no cast). An INTERVAL is summed field by field, months, days and microseconds
    apart, as PostgreSQL adds intervals (`1 hour` plus `1 day` is `1 day 01:00:00`, never 25
    hours): DuckDB has no SUM over intervals."""
    if acc_type != "interval":
        total = f"sum(CASE WHEN {x} IS NOT NULL THEN {x} * {weight} END)"
        return f"CAST({total} AS {sqltypes.duckdb_type(acc_type)})" if cast else total

    def field(part: str) -> str:
        return f"sum(CASE WHEN {x} IS NOT NULL THEN ({part}) * {weight} END)"

    months = field(f"datepart('year', {x}) * 12 + datepart('month', {x})")
    days = field(f"datepart('day', {x})")
    micros = field(f"datepart('hour', {x}) * 3600000000 + datepart('minute', {x}) * 60000000 "
                   f"+ datepart('microseconds', {x})")
    return (f"(to_months(CAST({months} AS INTEGER)) + to_days(CAST({days} AS INTEGER)) "
            f"+ to_microseconds(CAST({micros} AS BIGINT)))")


def _acc_type(func: str, arg_type: str, out_type: str) -> str:
    if func == "avg":
        if arg_type.startswith("numeric"):
            scale = arg_type[arg_type.index(",") + 1:-1]
            return f"numeric(38,{scale})"
        if arg_type in ("smallint", "integer", "bigint"):
            return "bigint"
        return "double precision"
    return out_type


class ValueState:
    """AggregateOp's state layout."""

    # -- state layout --------------------------------------------------------------------------
    def acc_columns(self) -> list[tuple[str, str]]:
        node = self.node
        cols = [("cnt", "bigint")]
        for i, a in enumerate(node.aggs):
            out_type = node.columns[self.ng + i].type
            arg_type = node.child.columns[a.arg].type if a.arg is not None else "bigint"
            if a.func in ("sum", "avg"):
                cols += [(f"s{i}", _acc_type(a.func, arg_type, out_type)), (f"n{i}", "bigint")]
            elif a.func == "count":
                cols.append((f"n{i}", "bigint"))
            elif a.func in MINPUT:
                cols.append((f"m{i}", out_type))
            elif a.func in ORDERED_AGGS:
                cols.append((f"r{i}", out_type))
        return cols

    def state_tables(self):
        node = self.node
        gfields = [pa.field(cname(g), sqltypes.arrow_type(node.child.columns[g].type)) for g in node.group]
        tables = {"acc": (self.groups, pa.schema(
            gfields + [pa.field(n, sqltypes.arrow_type(t)) for n, t in self.acc_columns()]))}
        for i, a in enumerate(node.aggs):
            if a.func in ORDERED_AGGS:
                fields = [pa.field(n, sqltypes.arrow_type(node.child.columns[c].type))
                          for n, c in self.ordered_inputs(a)]
                tables[f"ocount{i}"] = (self.groups + [f.name for f in fields], pa.schema(
                    gfields + fields + [pa.field("cnt", pa.int64())]), CountTable)
            elif a.func in MINPUT or a.distinct:
                vtype = sqltypes.arrow_type(node.child.columns[a.arg].type)
                tables[f"vcount{i}"] = (self.groups + ["v"], pa.schema(
                    gfields + [pa.field("v", vtype), pa.field("cnt", pa.int64())]), CountTable)
        return tables

    def value_type(self, a) -> str:
        return sqltypes.duckdb_type(self.node.child.columns[a.arg].type)
