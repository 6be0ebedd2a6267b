"""avg of integers is NUMERIC, as in PostgreSQL and RisingWave: a view's avg of BIGINTs keeps its
running sum as NUMERIC (past BIGINT's range, and back under deletes, without an error) and equals
DuckDB's avg on both paths; avg of smallint / integer is NUMERIC too; avg of floating point stays
double precision."""
from __future__ import annotations

import pytest
from both_paths import run_on

TOP = 9223372036854775807  # BIGINT's largest value

SETUP = [("CREATE TABLE big (id INT PRIMARY KEY, g INT, x BIGINT, i INT)",) * 2,
         ("CREATE TABLE big_nokey (g INT, x BIGINT)",) * 2]
STEPS = [
    ("sql", f"INSERT INTO big VALUES (1, 1, {TOP}, 1), (2, 1, {TOP}, 2), (3, 2, -{TOP}, -7), (4, 2, -{TOP}, NULL), "
            "(5, NULL, 7, 5), (8, 3, 1, 2147483647), (9, 3, 2, 2147483647)"),
    ("sql", f"INSERT INTO big_nokey VALUES (1, {TOP}), (1, {TOP}), (1, {TOP}), (2, NULL)"),
    ("sql", "UPDATE big SET x = 1 WHERE id = 2"),
    ("sql", f"INSERT INTO big VALUES (6, 2, -{TOP}, 3), (7, 1, {TOP}, 4)"),
    ("sql", "DELETE FROM big WHERE id IN (1, 3)"),
    ("sql", "DELETE FROM big_nokey WHERE g = 2"),
]
# DuckDB's avg of integers is a double: the oracle casts it as the view types it
VIEWS = {
    "avg_groups": ("SELECT g, avg(x) AS ax, avg(i) AS ai, sum(x) AS sx, count(*) AS n FROM big GROUP BY g",
                   "SELECT g, CAST(avg(x) AS DECIMAL(38,10)) AS ax, CAST(avg(i) AS DECIMAL(38,10)) AS ai, sum(x) AS sx, "
                   "count(*) AS n FROM big GROUP BY g"),
    "avg_global": ("SELECT avg(x) AS ax, avg(i) FILTER (WHERE x > 0) AS pos FROM big",
                   "SELECT CAST(avg(x) AS DECIMAL(38,10)) AS ax, CAST(avg(i) FILTER (WHERE x > 0) AS DECIMAL(38,10)) "
                   "AS pos FROM big"),
    "avg_nokey": ("SELECT g, avg(x) AS ax FROM big_nokey GROUP BY g",
                  "SELECT g, CAST(avg(x) AS DECIMAL(38,10)) AS ax FROM big_nokey GROUP BY g"),
}


def test_avg_of_bigint_past_its_range_matches_duckdb_in_process(tmp_path):
    run_on(str(tmp_path), None, "duckdb", VIEWS, steps=STEPS, flush_after=(0, 1, 3, 5), setup=SETUP)


def test_avg_of_integers_is_numeric_and_avg_of_floats_is_double(conn):
    conn.execute("CREATE TABLE t (a SMALLINT, b INT, c BIGINT, d DOUBLE PRECISION)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT avg(a) AS aa, avg(b) AS ab, avg(c) AS ac, avg(d) AS ad FROM t")
    conn.execute(f"INSERT INTO t VALUES (1, 1, {TOP}, 1.5), (2, 2, {TOP}, 2.0)")
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM s")
    assert [d[1] for d in cur.description] == ["DECIMAL(38,10)"] * 3 + ["DOUBLE"]
    (row,) = cur.fetchall()
    assert [str(v) for v in row[:2]] == ["1.5000000000", "1.5000000000"]
    assert abs(row[2] - TOP) < 2 ** 11 and row[3] == 1.75  # (the division is a double's)


# On both paths the sum passes BIGINT's range while the average stays below 2**53: the last
# division is a double's, and the engines turn a double past 2**53 into NUMERIC differently (Spark
# by its shortest decimal form, 9223372036854776000; DuckDB by its binary value, ...775808)
HALF = 2 ** 52
BOTH_STEPS = [
    ("sql", "INSERT INTO big_nokey VALUES " + ", ".join([f"(3, {HALF})"] * 2100) + ", (1, 5), (1, 6), (NULL, 1)"),
    ("sql", "INSERT INTO big VALUES (1, 1, 7, 1), (2, 1, 8, 2), (3, 2, -7, -7), (4, 2, NULL, NULL)"),
    ("sql", f"INSERT INTO big_nokey VALUES (3, {HALF}), (1, 7)"),
    ("sql", "DELETE FROM big_nokey WHERE g = 1"),
    ("sql", "UPDATE big SET i = 2147483647, x = -1 WHERE id = 1"),
]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_avg_of_bigint_on_both_paths_matches_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS, steps=BOTH_STEPS, flush_after=(1, 4), setup=SETUP)
