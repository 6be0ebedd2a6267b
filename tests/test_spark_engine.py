"""The Spark path runs the same rules as the in-process path: both must give DuckDB's answer."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from both_paths import run_on
from oracle import Oracle, assert_same
from test_differential import (
    DYNAMIC_FILTERS,
    FUNCTIONS_SETUP,
    JOINS,
    LINEAR_AND_AGGREGATES,
    ORDERED_AGGREGATES,
    SETS_TOPN_NOPK,
    SQL_FUNCTIONS,
    SUBQUERY_PREDICATES,
    WINDOWS,
    _values,
)

import dagster_rw

pytestmark = pytest.mark.spark

VIEWS = {
    # group_agg and distinct_count_having of test_differential in one view (each view costs Spark jobs)
    "group_agg_distinct_having": "SELECT k, count(*) AS n, sum(v) AS sv, min(v) AS mn, max(v) AS mx, "
                                 "count(v) AS cv, avg(v) AS av, count(DISTINCT v) AS dv, max(s) AS ms "
                                 "FROM t1 GROUP BY k HAVING count(*) > 1 OR max(v) > 5",
    "global_agg": LINEAR_AND_AGGREGATES["global_agg"],
    "join_agg": JOINS["join_agg"],
    "full_join_residual": JOINS["full_join_residual"],
    "top_n": SETS_TOPN_NOPK["top_n"],
    "top_n_ties": SETS_TOPN_NOPK["top_n_ties"],
    "union_all": SETS_TOPN_NOPK["union_all"],
    "row_number_top2": WINDOWS["row_number_top2"],
    "window_aggregates": WINDOWS["window_aggregates"],
    "string_agg_groups": ORDERED_AGGREGATES["string_agg_groups"],
    "array_agg_groups": ORDERED_AGGREGATES["array_agg_groups"],
    "df_scalar_max": DYNAMIC_FILTERS["df_scalar_max"],
    # a semi-join and an anti-join (EXISTS / NOT EXISTS subqueries) in one view
    "exists_not_exists": "SELECT id, k FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.k = t1.k AND t2.w > 2) "
                         "AND NOT EXISTS (SELECT 1 FROM t2 c WHERE c.id = t1.id AND c.w > 5)",
    # a correlated scalar subquery (a join with its aggregate grouped by the key)
    "scalar_correlated": "SELECT id, v FROM t1 WHERE v > (SELECT avg(w) FROM t2 WHERE t2.k = t1.k)",
    # NOT IN: an anti-join and a dynamic filter on what NULLs allow
    "not_in": "SELECT id FROM t1 WHERE v NOT IN (SELECT w FROM t2)",
    # regexp_match(...)[n] on Spark's regexp_extract (Java's regexes) and on DuckDB's (RE2); the oracle
    # knows the answer without regexes: k's digit after an 'a' or a 'b', else NULL
    "regexp_group": ("SELECT id, (regexp_match(s || '=' || CAST(k AS VARCHAR), '([a-b])=(\\d)'))[2] AS g FROM t1",
                     "SELECT id, CASE WHEN s IN ('a', 'b') THEN CAST(k AS VARCHAR) END AS g FROM t1"),
    # SQL functions inlined (casts to the declared types, integer division) in Spark's words
    "fn_group": SQL_FUNCTIONS["fn_group"],
    # a correlation other than an equality: over the domain of the outer values it reads
    "not_exists_residual": SUBQUERY_PREDICATES["not_exists_residual"],
    # set-returning functions, one over the other's rows: POSEXPLODE of an array and of a guarded
    # SEQUENCE on Spark (NULL and negative stops give no rows)
    "srf_nested": "SELECT u, generate_series(0, u, 2) AS g FROM "
                  "(SELECT unnest(ARRAY[k, v, k + v]) AS u FROM t1 WHERE v > 0) x",
}

STEPS = [
    ("t1", [(1, 1, 5, "a"), (2, 1, 7, "b"), (3, 2, None, None), (4, 3, 2, "c")]),
    ("t2", [(1, 1, 3, "1.50"), (2, 2, 9, "2.25"), (3, 4, 1, None)]),
    ("sql", "UPDATE t1 SET v = 8 WHERE id = 1"),
    ("sql", "DELETE FROM t1 WHERE id = 2"),
    ("t1", [(5, 2, 4, "a"), (1, 2, 6, "b")]),
    ("sql", "DELETE FROM t2 WHERE k = 2"),
]


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_spark_and_in_process_paths_give_the_same_views(tmp_path, spark, engine):
    # first the inserts, then updates, deletes and inserts together
    run_on(str(tmp_path / engine), spark, engine, VIEWS, steps=STEPS, flush_after=(1, len(STEPS) - 1),
           setup=FUNCTIONS_SETUP)


def test_batch_selects_run_on_spark_past_spark_select_rows(tmp_path, spark, monkeypatch):
    """With engine 'auto', a SELECT reading more committed rows than `spark_select_rows` runs on
    Spark, a smaller one in-process; both give DuckDB's answer."""
    from dagster_rw.engine.spark import SparkEngine

    ran = []
    original = SparkEngine.run_query
    monkeypatch.setattr(SparkEngine, "run_query", lambda self, *a, **k: ran.append(1) or original(self, *a, **k))
    rows = [(i, i % 4) for i in range(12)]
    oracle = Oracle()
    oracle.execute("CREATE TABLE t (a INT PRIMARY KEY, b INT)")
    oracle.upsert("t", _values(rows))
    queries = ["SELECT b, count(*), sum(a) FROM t GROUP BY b",
               # a series whose stop lies behind its start gives no rows (Spark's sequence would
               # count back, or fail)
               "SELECT a, generate_series(b, 2) AS g FROM t",
               "SELECT a, generate_series(2, b, -1) AS g FROM t"]
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, spark_select_rows=100)
    conn.execute("CREATE TABLE t (a INT PRIMARY KEY, b INT)")
    conn.execute(f"INSERT INTO t VALUES {_values(rows)}")
    conn.execute("FLUSH")
    for query in queries:
        for limit, on_spark in ((100, False), (10, True)):
            conn.wh.options = dataclasses.replace(conn.wh.options, spark_select_rows=limit)
            ran.clear()
            assert_same(conn.execute(query).fetchall(), oracle.rows(query), f"{query}, spark_select_rows={limit}")
            assert bool(ran) == on_spark
    conn.close()


# a table's first load on Spark: staged INSERTs (upserts by key), DELETEs of keys inserted earlier
# in the same load or never, per string and integer key
_LOAD_OPS = st.lists(st.tuples(st.sampled_from(["ins", "del"]), st.integers(0, 12), st.one_of(st.none(), st.integers(-5, 5))),
                     min_size=1, max_size=30)


@settings(max_examples=1, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(ops=_LOAD_OPS, batch_size=st.integers(1, 6))
# keys inserted, updated in later batches and in the same batch, deleted after an insert, deleted
# before one, deleted without one; NULL values; enough keys for two files
@example(ops=[("ins", k, k % 3 or None) for k in range(12)] + [("del", 3, None), ("ins", 4, 5), ("ins", 4, -4),
              ("del", 12, None), ("ins", 12, 1), ("del", 7, None), ("del", 9, None), ("ins", 9, 2),
              ("ins", 0, 0)], batch_size=5)
def test_a_first_load_on_spark_applies_each_keys_last_operation(tmp_path_factory, spark, ops, batch_size):
    """A table's first load on Spark is one job (each task keeps its keys' last operations and
    writes the state and the change log): the same rows as DuckDB's, over several files with
    disjoint key ranges, and its change log equals its rows."""
    path = tmp_path_factory.mktemp("load")
    conn = dagster_rw.connect(str(path), spark=spark, engine="spark")
    conn.wh.spark_engine().min_task_rows = 2  # a file per core from 4 rows up
    oracle = Oracle()
    for ddl in ("CREATE TABLE n (id INT PRIMARY KEY, v INT)", "CREATE TABLE s (id VARCHAR PRIMARY KEY, v INT)"):
        conn.execute(ddl)
        oracle.execute(ddl)
    # a view created before the load reads the load's change log
    conn.execute("CREATE MATERIALIZED VIEW per_v AS SELECT v, count(*) AS c, min(id) AS lo FROM s GROUP BY v")
    oracle.execute("CREATE VIEW per_v AS SELECT v, count(*) AS c, min(id) AS lo FROM s GROUP BY v")
    for start in range(0, len(ops), batch_size):  # each statement a staged batch of its own
        for op, key, v in ops[start:start + batch_size]:
            for table, k in (("n", str(key)), ("s", f"'k{key:02d}'")):
                if op == "ins":
                    row = f"({k}, {'NULL' if v is None else v})"
                    conn.execute(f"INSERT INTO {table} VALUES {row}")
                    oracle.upsert(table, row)
                else:
                    conn.execute(f"DELETE FROM {table} WHERE id = {k}")
                    oracle.execute(f"DELETE FROM {table} WHERE id = {k}")
    conn.execute("FLUSH")
    for table in ("n", "s", "per_v"):
        assert_same(conn.execute(f"SELECT * FROM {table}").fetchall(), oracle.rows(f"SELECT * FROM {table}"), table)
    for table in ("n", "s"):
        want = oracle.rows(f"SELECT * FROM {table}")
        m = conn.wh.manifest(table)
        files = m.state.get("output", [])
        assert sum(f.rows for f in files) == len(want) == m.stats["rows_inserted"]
        if len(want) >= 8:  # split over the two cores
            assert len(files) > 1, files
        if len(files) > 1:  # a run: disjoint key ranges in key order
            assert all(a.key_max < b.key_min for a, b in zip(files, files[1:]))
    conn.close()
