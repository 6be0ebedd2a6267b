"""BOOL_AND, BOOL_OR and EVERY in views, maintained as counts under inserts, updates and deletes,
equal DuckDB's answer over the same base data on both paths (in-process and Spark; the
workload on both paths is test_both_paths')."""
from __future__ import annotations

import pytest
from test_differential import SCHEMA, _workload_test

import dagster_rw

BOOL_AGGREGATES = {
    # (view, the same query for DuckDB, which has no EVERY)
    "bool_groups": ("SELECT k, bool_and(v > 3) AS a, bool_or(v > 6) AS o, every(s IS NOT NULL) AS e, "
                    "count(*) AS n FROM t1 GROUP BY k",
                    "SELECT k, bool_and(v > 3) AS a, bool_or(v > 6) AS o, bool_and(s IS NOT NULL) AS e, "
                    "count(*) AS n FROM t1 GROUP BY k"),
    "bool_global": "SELECT bool_and(v % 2 = 0) AS a, bool_or(s = 'a') AS o FROM t1",
    "bool_having_filter": "SELECT k, bool_or(v > 2) FILTER (WHERE s IS NOT NULL) AS o FROM t1 GROUP BY k "
                          "HAVING bool_and(v < 9) OR bool_and(v IS NULL)",
    "bool_over_join": "SELECT t2.k, bool_and(t1.v < t2.w) AS a FROM t1 JOIN t2 ON t1.k = t2.k GROUP BY t2.k",
}

test_bool_aggregate_views_match_duckdb = _workload_test(BOOL_AGGREGATES)


def test_bool_aggregate_of_a_window_is_refused_by_name(conn):
    conn.execute(SCHEMA[0])
    with pytest.raises(dagster_rw.Error, match="(?i)bool_and"):
        conn.execute("CREATE MATERIALIZED VIEW w AS SELECT id, bool_and(v > 1) OVER (PARTITION BY k) AS a FROM t1")
