"""BOOL_AND, BOOL_OR and EVERY in views, maintained as counts under inserts, updates and deletes,
equal DuckDB's answer over the same base data on both paths (in-process and Spark)."""
from __future__ import annotations

import pytest
from oracle import Oracle, assert_same
from test_differential import SCHEMA, _values, _workload_test

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


STEPS = [
    ("t1", [(1, 1, 5, "a"), (2, 1, 7, "b"), (3, 2, None, None), (4, 3, 2, "c")]),
    ("t2", [(1, 1, 9, "1.50"), (2, 2, 9, "2.25"), (3, 3, 1, None)]),
    ("sql", "UPDATE t1 SET v = 8 WHERE id = 1"),
    ("sql", "DELETE FROM t1 WHERE id = 2"),
    ("t1", [(5, 2, 4, "a"), (1, 2, 6, "b")]),
    ("sql", "DELETE FROM t1 WHERE v > 7"),
]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_bool_aggregates_on_both_paths_match_duckdb(tmp_path, spark, engine):
    conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine)
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for name, q in BOOL_AGGREGATES.items():
        q, oracle_q = (q, q) if isinstance(q, str) else q
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        oracle.execute(f"CREATE VIEW {name} AS {oracle_q}")
    for i, (what, arg) in enumerate(STEPS):
        if what == "sql":
            conn.execute(arg)
            oracle.execute(arg)
        else:
            conn.execute(f"INSERT INTO {what} VALUES {_values(arg)}")
            oracle.upsert(what, _values(arg))
        if i in (1, 3, len(STEPS) - 1):
            conn.execute("FLUSH")
            for name in BOOL_AGGREGATES:
                assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(),
                            oracle.rows(f"SELECT * FROM {name}"), f"{name} ({engine})")
    assert {s["engine"] for s in conn.status()} == {engine}
