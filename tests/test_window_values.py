"""first_value, last_value and nth_value OVER windows in views: a step recomputes the window
partitions it touches, and the view equals DuckDB's answer over the same base data under inserts,
updates and deletes, on both paths (in-process and Spark). Rows of one frame are taken in the
ORDER BY with ties broken by the stream key; where a view's ORDER BY has ties, DuckDB's query says
the same thing without them."""
from __future__ import annotations

import pytest
from both_paths import run_on
from test_differential import SCHEMA, _workload_test

import dagster_rw

MINUTES = "TIMESTAMP '2024-01-01 00:00:00' + id * INTERVAL '1 minute'"

WINDOW_VALUES = {
    "values_frames": "SELECT id, k, first_value(v) OVER (PARTITION BY k ORDER BY id) AS f, "
                     "last_value(s) OVER (PARTITION BY k ORDER BY v NULLS FIRST, id ROWS BETWEEN 1 PRECEDING "
                     "AND 1 FOLLOWING) AS l, "
                     "nth_value(v, 2) OVER (ORDER BY v DESC NULLS LAST, id RANGE BETWEEN UNBOUNDED PRECEDING "
                     "AND UNBOUNDED FOLLOWING) AS n2, "
                     "nth_value(v * 2 + k, 3) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN 2 PRECEDING AND "
                     "CURRENT ROW) AS n3, "
                     "last_value(v) OVER (ORDER BY id ROWS BETWEEN 3 PRECEDING AND 2 PRECEDING) AS back FROM t1",
    # ties: the frame takes in whole peer groups, and its first / last row among peers is the one
    # with the lowest / highest key
    "values_ties": ("SELECT id, last_value(id) OVER (ORDER BY k) AS lk, first_value(s) OVER (ORDER BY k "
                    "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS fs, "
                    "last_value(s) OVER (PARTITION BY s ORDER BY v DESC) AS ls FROM t1",
                    "SELECT id, max(id) OVER (PARTITION BY k) AS lk, first_value(s) OVER (PARTITION BY k ORDER BY id "
                    "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS fs, s AS ls FROM t1"),
    "values_range": f"SELECT id, nth_value(v, 2) OVER (ORDER BY id RANGE BETWEEN 3 PRECEDING AND 1 FOLLOWING) AS nv, "
                    f"first_value(s) OVER (PARTITION BY k ORDER BY {MINUTES} DESC RANGE BETWEEN INTERVAL '2 minutes' "
                    "PRECEDING AND CURRENT ROW) AS fs FROM t1",
    "values_decimal": "SELECT id, last_value(d) OVER (PARTITION BY k ORDER BY id RANGE BETWEEN CURRENT ROW AND "
                      "2 FOLLOWING) AS ld, first_value(d) OVER (ORDER BY d NULLS FIRST, id) AS fd FROM t2",
    # a table without a key: equal rows are interchangeable, ordered by every column
    "values_nopk": "SELECT k, v, first_value(v) OVER (PARTITION BY k ORDER BY v NULLS FIRST) AS f, "
                   "last_value(k) OVER (ORDER BY k NULLS FIRST, v NULLS FIRST ROWS BETWEEN UNBOUNDED PRECEDING "
                   "AND 1 FOLLOWING) AS lk FROM t3",
    "values_over_aggregate": "SELECT k, n, n - first_value(n) OVER (ORDER BY k NULLS FIRST) AS from_first, "
                             "nth_value(k, 2) OVER (ORDER BY n DESC, k NULLS FIRST ROWS BETWEEN UNBOUNDED PRECEDING "
                             "AND UNBOUNDED FOLLOWING) AS second FROM (SELECT k, count(*) AS n FROM t1 GROUP BY k) g",
}

test_window_value_views_match_duckdb = _workload_test(WINDOW_VALUES)


@pytest.mark.parametrize("query, error", [
    ("SELECT id, first_value(v) OVER (PARTITION BY k) AS f FROM t1", "first_value\\(\\) without ORDER BY"),
    ("SELECT id, nth_value(v, k) OVER (ORDER BY id) AS f FROM t1", "nth_value\\(\\) position that is not"),
    ("SELECT id, nth_value(v, 0) OVER (ORDER BY id) AS f FROM t1", "argument of nth_value must be greater than zero"),
    ("SELECT id, nth_value(v, -2) OVER (ORDER BY id) AS f FROM t1", "argument of nth_value must be greater than zero"),
    ("SELECT id, last_value(v) IGNORE NULLS OVER (ORDER BY id) AS f FROM t1", "window functions other than"),
    ("SELECT id, first_value(max(v)) OVER (ORDER BY id) AS f FROM t1", "aggregate inside first_value"),
    ("SELECT id, last_value(v) OVER (ORDER BY id GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t1",
     "window frames other than ROWS and RANGE"),
    ("SELECT id, first_value(v) OVER (ORDER BY s RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t1",
     "RANGE frame offset of a number over an ORDER BY key of type varchar"),
])
def test_unsupported_value_function_shapes_are_refused_at_create_by_name(conn, query, error):
    conn.execute(SCHEMA[0])
    with pytest.raises(dagster_rw.Error, match=error) as e:
        conn.execute(f"CREATE MATERIALIZED VIEW bad AS {query}")
    assert "'bad'" in str(e.value)


def test_value_functions_are_named_and_typed_as_postgresql_names_and_types_them(conn):
    conn.execute(SCHEMA[0])
    conn.execute("CREATE MATERIALIZED VIEW w AS SELECT id, first_value(s) OVER (ORDER BY id), "
                 "last_value(v) OVER (ORDER BY id), nth_value(v, 2) OVER (ORDER BY id) FROM t1")
    conn.execute("INSERT INTO t1 VALUES (1, 1, 5, 'a'), (2, 1, 7, NULL)")
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM w ORDER BY id")
    assert [d[0] for d in cur.description] == ["id", "first_value", "last_value", "nth_value"]
    assert cur.fetchall() == [(1, "a", 5, None), (2, "a", 7, 7)]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_value_functions_on_both_paths_match_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, WINDOW_VALUES)
