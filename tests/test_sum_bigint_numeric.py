"""sum(bigint) is NUMERIC, as in PostgreSQL and RisingWave: a view's sum of BIGINTs goes past
BIGINT's range (and comes back under deletes) without an error, equal to DuckDB's exact sum
(HUGEINT) on both paths; sums of smaller integers stay BIGINT."""
from __future__ import annotations

import pytest
from both_paths import run_on

TOP = 9223372036854775807  # BIGINT's largest value

SETUP = [("CREATE TABLE big (id INT PRIMARY KEY, g INT, x BIGINT)",) * 2,
         ("CREATE TABLE big_nokey (g INT, x BIGINT)",) * 2]
STEPS = [
    ("sql", f"INSERT INTO big VALUES (1, 1, {TOP}), (2, 1, {TOP}), (3, 2, -{TOP}), (4, 2, -{TOP}), (5, NULL, 7)"),
    ("sql", f"INSERT INTO big_nokey VALUES (1, {TOP}), (1, {TOP}), (1, {TOP}), (2, NULL)"),
    ("sql", "UPDATE big SET x = 1 WHERE id = 2"),
    ("sql", f"INSERT INTO big VALUES (6, 2, -{TOP}), (7, 1, {TOP})"),
    ("sql", "DELETE FROM big WHERE id IN (1, 3)"),
    ("sql", "DELETE FROM big_nokey WHERE g = 2"),
]
VIEWS = {
    "sum_groups": "SELECT g, sum(x) AS sx, max(x) AS mx, count(*) AS n, sum(id) AS si FROM big GROUP BY g",
    "sum_global": "SELECT sum(x) AS sx, sum(x) FILTER (WHERE x > 0) AS pos FROM big",
    "sum_nokey": "SELECT g, sum(x) AS sx FROM big_nokey GROUP BY g",
    "sum_window": "SELECT id, sum(x) OVER (PARTITION BY g ORDER BY id) AS run FROM big",
}


def test_sum_of_bigint_past_its_range_matches_duckdb_in_process(tmp_path):
    run_on(str(tmp_path), None, "duckdb", VIEWS, steps=STEPS, flush_after=(0, 1, 3, 5), setup=SETUP)


def test_sum_of_bigint_is_numeric_and_sum_of_integer_is_bigint(conn):
    conn.execute("CREATE TABLE t (a INT, b BIGINT)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT sum(a) AS sa, sum(b) AS sb FROM t")
    conn.execute(f"INSERT INTO t VALUES (1, {TOP}), (2, {TOP})")
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM s")
    assert [d[1] for d in cur.description] == ["BIGINT", "DECIMAL(38,0)"]
    assert cur.fetchall() == [(3, 2 * TOP)]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_sum_of_bigint_on_both_paths_matches_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS, steps=STEPS, flush_after=(1, 5), setup=SETUP)
