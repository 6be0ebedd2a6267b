"""BIT_AND, BIT_OR and BIT_XOR in views, maintained as counts per bit under inserts, updates and
deletes, equal DuckDB's answer over the same base data on both paths (in-process and Spark).
Values run negative (the sign bit) and past 32 bits; the table without a key repeats values,
which bit_xor counts."""
from __future__ import annotations

import pytest
from both_paths import run_on
from test_differential import SCHEMA, _workload_test

import dagster_rw

BIT_AGGREGATES = {
    "bit_groups": "SELECT k, bit_and(v) AS a, bit_or(v) FILTER (WHERE s IS NOT NULL) AS o, bit_xor(v) AS x, "
                  "count(*) AS n FROM t1 GROUP BY k",
    # past 32 bits, and 16 bits (a view pays one count per bit of each bit aggregate)
    "bit_wide": "SELECT s, bit_xor(CAST(v - id AS BIGINT) * 3000000000 + id) AS x, "
                "bit_and(DISTINCT CAST(k AS SMALLINT) - 2) AS a FROM t1 GROUP BY s",
    "bit_global": "SELECT bit_or(v) AS o FROM t1 WHERE s IS NOT NULL",
    "bit_nopk_having": "SELECT k, bit_xor(v) AS x FROM t3 GROUP BY k HAVING bit_or(v) > 1",
    "bit_over_join": "SELECT t2.k, bit_or(t1.v * t2.w) AS o FROM t1 JOIN t2 ON t1.k = t2.k GROUP BY t2.k",
}

test_bit_aggregate_views_match_duckdb = _workload_test(BIT_AGGREGATES)


@pytest.mark.parametrize("query, error", [
    ("SELECT bit_xor(DISTINCT v) FROM t1", "BIT_XOR\\(DISTINCT"),
    ("SELECT k, bit_or(s) FROM t1 GROUP BY k", "function bit_or\\(varchar\\) does not exist"),
    ("SELECT bit_and(v * 1.5) FROM t1", "function bit_and\\(numeric"),
    ("SELECT id, bit_or(v) OVER (PARTITION BY k) AS o FROM t1", "window functions other than"),
])
def test_unsupported_bit_aggregate_shapes_are_refused_at_create_by_name(conn, query, error):
    conn.execute(SCHEMA[0])
    with pytest.raises(dagster_rw.Error, match=error) as e:
        conn.execute(f"CREATE MATERIALIZED VIEW bad AS {query}")
    assert "'bad'" in str(e.value)


def test_bit_aggregates_are_named_and_typed_as_their_argument(conn):
    conn.execute(SCHEMA[0])
    conn.execute("CREATE MATERIALIZED VIEW b AS SELECT bit_and(v), bit_or(CAST(v AS BIGINT)), "
                 "bit_xor(CAST(v AS SMALLINT)) FROM t1")
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM b").fetchall() == [(None, None, None)]
    conn.execute("INSERT INTO t1 VALUES (1, 1, 6, 'a'), (2, 1, -3, NULL)")
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM b")
    assert [d[0] for d in cur.description] == ["bit_and", "bit_or", "bit_xor"]
    assert cur.fetchall() == [(4, -1, -5)]
    assert [d[1] for d in cur.description] == ["INTEGER", "BIGINT", "SMALLINT"]


# on Spark, the views with 64 and 16 bits and repeated values (every view's counts make wide rows
# that each step's jobs compile and carry)
ON_SPARK = {name: BIT_AGGREGATES[name] for name in ("bit_wide", "bit_nopk_having")}


@pytest.mark.spark
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_bit_aggregates_on_both_paths_match_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, ON_SPARK)
