"""CREATE MATERIALIZED VIEW ... AS VALUES: its rows once (columns named column1, column2, ... as in
PostgreSQL, or by the view's column list), read by other views like any relation; equal to
DuckDB's answer on both paths (the workload on both paths is test_both_paths')."""
from __future__ import annotations

import pytest
from both_paths import run_on

import dagster_rw

VALUES_VIEWS = {
    "vals": "VALUES (1, 'a', 2.5), (2, NULL, -1.0), (1, 'a', 2.5)",
}
OVER_VALUES = {
    # a view over the VALUES view, joined to a maintained table
    "vals_join": ("SELECT t1.id, vals.column2 AS tag FROM t1 JOIN vals ON t1.k = vals.column1",
                  "SELECT t1.id, vals.col1 AS tag FROM t1 JOIN vals ON t1.k = vals.col0"),
    "vals_agg": ("SELECT column1, count(*) AS n, sum(column3) AS s FROM vals GROUP BY column1",
                 "SELECT col0, count(*) AS n, sum(col2) AS s FROM vals GROUP BY col0"),
}


def test_values_view_names_its_columns_as_postgresql(conn):
    conn.execute("CREATE MATERIALIZED VIEW v AS VALUES (1, 'a'), (2, NULL)")
    conn.execute("CREATE MATERIALIZED VIEW w (n, s) AS VALUES (7, 'x')")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT column1, column2 FROM v").fetchall(), key=str) == [(1, "a"), (2, None)]
    assert conn.execute("SELECT n, s FROM w").fetchall() == [(7, "x")]


@pytest.mark.parametrize("sql, error", [
    ("VALUES (1), (2, 3)", "same length"),
    ("VALUES ((SELECT 1))", "subquery in VALUES"),
])
def test_values_a_view_cannot_hold_are_refused(conn, sql, error):
    with pytest.raises(dagster_rw.Error, match=error):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {sql}")


def test_values_views_in_process_match_duckdb(tmp_path):
    run_on(str(tmp_path / "wh"), None, "duckdb", {**VALUES_VIEWS, **OVER_VALUES})
