"""lag / lead and RANGE frames in views: a step recomputes the window partitions it touches, and the
view equals DuckDB's answer over the same base data under inserts, updates and deletes, on both
paths (in-process and Spark). Each ORDER BY under lag / lead is total (or orders whole rows of a
table without a key), so both engines have one answer; RANGE frames take in peers, so ties are
part of the test."""
from __future__ import annotations

import pytest
from both_paths import run_on
from test_differential import SCHEMA, _workload_test

import dagster_rw

MINUTES = "TIMESTAMP '2024-01-01 00:00:00' + id * INTERVAL '1 minute'"

WINDOW_OFFSETS_AND_RANGES = {
    "lag_lead": "SELECT id, k, v, lag(v) OVER (PARTITION BY k ORDER BY id) AS prev, "
                "lead(v, 2) OVER (PARTITION BY k ORDER BY id) AS next2, "
                "lag(s, 1, 'none') OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, id) AS ps, "
                "v - lag(v, 0) OVER (ORDER BY id) AS zero FROM t1",
    # a default of another type: both cast to the common type, as PostgreSQL does
    "lag_lead_defaults": ("SELECT id, lag(v, 1, 0.5) OVER (ORDER BY id) AS pv, "
                          "lead(id, 1, v) OVER (PARTITION BY s ORDER BY id DESC) AS nid FROM t1",
                          "SELECT id, lag(CAST(v AS DECIMAL(11,1)), 1, 0.5) OVER (ORDER BY id) AS pv, "
                          "lead(id, 1, v) OVER (PARTITION BY s ORDER BY id DESC) AS nid FROM t1"),
    # a table without a key: equal rows are interchangeable, ordered by every column
    "lag_nopk": "SELECT k, v, lag(v) OVER (PARTITION BY k ORDER BY v NULLS FIRST) AS pv, "
                "lead(k, 1, -1) OVER (ORDER BY k NULLS FIRST, v NULLS FIRST) AS nk FROM t3",
    "lag_over_aggregate": "SELECT k, n, n - lag(n, 1, 0) OVER (ORDER BY k NULLS FIRST) AS growth "
                          "FROM (SELECT k, count(*) AS n FROM t1 GROUP BY k) g",
    "range_numeric": "SELECT id, k, v, "
                     "sum(v) OVER (PARTITION BY k ORDER BY v RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS near, "
                     "count(*) OVER (ORDER BY v DESC RANGE BETWEEN CURRENT ROW AND 3 FOLLOWING) AS below, "
                     "max(id) OVER (PARTITION BY k ORDER BY v RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
                     "AS upto, min(v) OVER (PARTITION BY s RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED "
                     "FOLLOWING) AS lo FROM t1",
    "range_interval": f"SELECT id, k, sum(v) OVER (PARTITION BY k ORDER BY {MINUTES} RANGE BETWEEN "
                      "INTERVAL '3 minutes' PRECEDING AND CURRENT ROW) AS recent, "
                      f"count(v) OVER (ORDER BY {MINUTES} DESC RANGE BETWEEN INTERVAL '90 seconds' PRECEDING "
                      "AND INTERVAL '1' MINUTE FOLLOWING) AS around FROM t1",
    "range_decimal": "SELECT id, sum(w) OVER (ORDER BY d RANGE BETWEEN 1.5 PRECEDING AND CURRENT ROW) AS sw, "
                     "max(w) OVER (PARTITION BY k ORDER BY d NULLS FIRST RANGE BETWEEN CURRENT ROW AND 0.75 "
                     "FOLLOWING) AS mw FROM t2",
}

test_lag_lead_and_range_frame_views_match_duckdb = _workload_test(WINDOW_OFFSETS_AND_RANGES)


@pytest.mark.parametrize("query, error", [
    ("SELECT id, lag(v) OVER (PARTITION BY k) AS p FROM t1", "lag\\(\\) without ORDER BY"),
    ("SELECT id, lead(v, k) OVER (ORDER BY id) AS p FROM t1", "lead\\(\\) offset that is not"),
    ("SELECT id, lag(v) IGNORE NULLS OVER (ORDER BY id) AS p FROM t1", "window functions other than"),
    ("SELECT id, ntile(2) OVER (ORDER BY id) AS p FROM t1", "window functions other than"),
    ("SELECT id, sum(v) OVER (ORDER BY id GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t1",
     "window frames other than ROWS and RANGE"),
    ("SELECT id, sum(v) OVER (ORDER BY k, id RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t1",
     "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column"),
    ("SELECT id, sum(v) OVER (ORDER BY s RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t1",
     "RANGE frame offset of a number over an ORDER BY key of type varchar"),
    ("SELECT id, sum(v) OVER (ORDER BY id RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW) FROM t1",
     "RANGE frame offset of an INTERVAL over an ORDER BY key of type integer"),
    (f"SELECT id, sum(v) OVER (ORDER BY {MINUTES} RANGE BETWEEN INTERVAL '1' MONTH PRECEDING AND CURRENT ROW) "
     "FROM t1", "RANGE frame offset in months"),
    ("SELECT id, sum(v) OVER (ORDER BY id RANGE BETWEEN CURRENT ROW AND 1 PRECEDING) FROM t1",
     "frame starting from current row cannot have preceding rows"),
])
def test_unsupported_window_shapes_are_refused_at_create_by_name(conn, query, error):
    conn.execute(SCHEMA[0])
    with pytest.raises(dagster_rw.Error, match=error) as e:
        conn.execute(f"CREATE MATERIALIZED VIEW bad AS {query}")
    assert "'bad'" in str(e.value)


def test_lag_is_named_and_typed_as_postgresql_names_and_types_it(conn):
    conn.execute(SCHEMA[0])
    conn.execute("CREATE MATERIALIZED VIEW w AS SELECT id, lag(v) OVER (ORDER BY id), "
                 "lead(s, 1, 'x') OVER (ORDER BY id) FROM t1")
    conn.execute("INSERT INTO t1 VALUES (1, 1, 5, 'a'), (2, 1, 7, NULL)")
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM w ORDER BY id")
    assert [d[0] for d in cur.description] == ["id", "lag", "lead"]
    assert cur.fetchall() == [(1, None, None), (2, 5, "x")]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_lag_lead_and_range_frames_on_both_paths_match_duckdb(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, WINDOW_OFFSETS_AND_RANGES)
