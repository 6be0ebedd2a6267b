"""The independent oracle: the same DML and the same view queries run by DuckDB, compared as multisets."""
from __future__ import annotations

import datetime
import decimal
import math

import duckdb
import sqlglot


def to_duckdb(sql: str) -> str:
    return sqlglot.transpile(sql, read="postgres", write="duckdb")[0]


class Oracle:
    def __init__(self):
        self.db = duckdb.connect()

    def execute(self, sql: str):
        self.db.execute(to_duckdb(sql))

    def upsert(self, table: str, values_sql: str):
        self.db.execute(f"INSERT OR REPLACE INTO {table} VALUES {values_sql}")

    def rows(self, sql: str):
        return self.db.sql(to_duckdb(sql)).fetchall()


def _norm_value(v):
    if type(v).__name__ == "MonthDayNano":
        # an interval with months (dagster-rw gives them as Arrow's MonthDayNano): as DuckDB's Python
        # rows give every interval, a timedelta counting a month as 30 days
        v = datetime.timedelta(days=v.months * 30 + v.days, microseconds=v.nanoseconds // 1000)
    if isinstance(v, dict):  # a struct: compared by its fields' names and normalized values, in order
        return "(" + ", ".join(f"{k}: {_norm_value(x)!r}" for k, x in v.items()) + ")"
    if isinstance(v, (list, tuple)):  # an array: compared by its normalized elements, in order
        return "{" + ", ".join(repr(_norm_value(x)) for x in v) + "}"
    if isinstance(v, decimal.Decimal):
        if abs(v) >= 10 ** 15 and v == v.to_integral_value():
            return int(v)  # beyond a float's exact integers (sums of BIGINTs): compared exactly, as ints
        v = float(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ("nan",)
        return round(v, 6) if abs(v) < 1e12 else float(f"{v:.9e}")
    if isinstance(v, (datetime.datetime, datetime.date, datetime.timedelta)):
        return str(v)
    return v


def normalize(rows) -> list[tuple]:
    out = [tuple(_norm_value(v) for v in r) for r in rows]
    return sorted(out, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r))


def assert_same(actual, expected, label: str):
    a, e = normalize(actual), normalize(expected)
    if a != e:
        missing = [r for r in e if r not in a]
        extra = [r for r in a if r not in e]
        raise AssertionError(
            f"{label}: view differs from DuckDB\n  missing ({len(missing)}): {missing[:10]}\n"
            f"  unexpected ({len(extra)}): {extra[:10]}\n  rows: got {len(a)}, want {len(e)}")
