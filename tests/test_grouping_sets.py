"""GROUPING SETS, ROLLUP and CUBE in views, maintained as a UNION ALL of one aggregate per grouping
set (rewrites.grouping_sets), equal DuckDB's answer over the same base data under inserts, updates
and deletes, on both paths (in-process and Spark). The grand total of ROLLUP and CUBE is a global
aggregate: one row even while the input is empty, as in PostgreSQL and DuckDB."""
from __future__ import annotations

import pytest
from both_paths import run_on
from test_differential import SCHEMA, _workload_test

import dagster_rw

GROUPING_SETS = {
    "rollup_groups": "SELECT k, s, count(*) AS n, sum(v) AS sv, grouping(k, s) AS g FROM t1 GROUP BY ROLLUP (k, s)",
    "cube_having": "SELECT k, v % 3 AS m, max(id) AS mx, count(v) AS cv FROM t1 GROUP BY CUBE (k, v % 3) "
                   "HAVING count(*) > 1",
    "sets_over_join": "SELECT t2.k, t1.s, count(*) AS n, min(t2.w) AS mw FROM t1 JOIN t2 ON t1.k = t2.k "
                      "GROUP BY GROUPING SETS ((t2.k), (t1.s), ())",
    "rollup_nopk": "SELECT k, count(*) AS n, sum(v) AS sv FROM t3 GROUP BY k, ROLLUP (v)",
    "distinct_sets": "SELECT DISTINCT k FROM t1 GROUP BY GROUPING SETS ((k), (k, s))",
    "on_rollup": "SELECT count(*) AS totals, sum(n) AS rows_counted FROM rollup_groups WHERE g = 3",
}

test_grouping_set_views_match_duckdb = _workload_test(GROUPING_SETS)


def test_grand_total_row_exists_over_an_empty_table_and_names_are_postgresql_names(conn):
    conn.execute(SCHEMA[0])
    conn.execute("CREATE MATERIALIZED VIEW r AS SELECT k, sum(v), count(*) FROM t1 GROUP BY ROLLUP (k)")
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM r")
    assert [d[0] for d in cur.description] == ["k", "sum", "count"]
    assert cur.fetchall() == [(None, None, 0)]


@pytest.mark.parametrize("query, error", [
    ("SELECT k, count(*) FROM t1 GROUP BY ROLLUP (k) ORDER BY k LIMIT 2", "ORDER BY / LIMIT on GROUPING SETS"),
    ("SELECT k, grouping(v) FROM t1 GROUP BY CUBE (k)", "arguments to GROUPING must be grouping expressions"),
])
def test_unsupported_grouping_set_shapes_are_refused_at_create_by_name(conn, query, error):
    conn.execute(SCHEMA[0])
    with pytest.raises(dagster_rw.Error, match=error) as e:
        conn.execute(f"CREATE MATERIALIZED VIEW bad AS {query}")
    assert "'bad'" in str(e.value)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_grouping_sets_on_both_paths_match_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, GROUPING_SETS)
