"""Set-returning functions in FROM beside a relation (`FROM t, unnest(...) AS x`, CROSS JOIN
LATERAL, JOIN LATERAL ... ON true): against DuckDB, which runs the same lateral calls, on random
workloads and on both paths; jsonb_each[_text] by hand."""
from __future__ import annotations

import pytest
from both_paths import run_on
from oracle import Oracle, assert_same
from test_differential import _workload_test

import dagster_rw

VIEWS = {
    "lat_unnest": "SELECT t1.id, x FROM t1, unnest(ARRAY[t1.k, t1.v]) AS x",
    "lat_series_grouped": "SELECT g.n, count(*) AS c, sum(t1.v) AS sv FROM t1 CROSS JOIN LATERAL "
                          "generate_series(1, t1.k) AS g(n) GROUP BY g.n",
    "lat_star_filtered": ("SELECT * FROM t1 JOIN LATERAL generate_series(0, t1.k) AS n ON true WHERE n < 2",
                          "SELECT * FROM t1, generate_series(0, t1.k) AS g(n) WHERE n < 2"),
    "lat_over_join": "SELECT x.id, x.w, s FROM (SELECT t1.id, t2.w FROM t1 JOIN t2 ON t1.k = t2.k) x, "
                     "unnest(ARRAY[x.w, x.w + 1]) AS s",
}

test_lateral_set_returning_views_match_duckdb = _workload_test(VIEWS)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_lateral_set_returning_views_on_both_paths(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_jsonb_each_beside_a_table(tmp_path, request, engine):
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine=engine)
    conn.execute("CREATE TABLE d (id INT PRIMARY KEY, j JSONB)")
    conn.execute("""INSERT INTO d VALUES (1, '{"b": [1, 2.50], "a": null, "c": "x"}'), (2, '[1]'), (3, '{"z": {}}')""")
    conn.execute("CREATE MATERIALIZED VIEW members AS SELECT id, e.key, e.value FROM d, jsonb_each(d.j) AS e")
    conn.execute("CREATE MATERIALIZED VIEW texts AS SELECT id, k, v FROM d JOIN LATERAL jsonb_each_text(j) AS m(k, v) "
                 "ON true WHERE v IS NOT NULL")
    conn.execute("CREATE MATERIALIZED VIEW listed AS SELECT id, jsonb_each(j) AS m FROM d")
    conn.execute("FLUSH")
    conn.execute("""UPDATE d SET j = '{"n": 1}' WHERE id = 2""")
    conn.execute("DELETE FROM d WHERE id = 3")
    conn.execute("FLUSH")
    # as PostgreSQL gives them: jsonb_each's values in jsonb's form, jsonb_each_text's as text
    assert sorted(conn.execute("SELECT * FROM members").fetchall(), key=repr) == [
        (1, "a", "null"), (1, "b", "[1, 2.50]"), (1, "c", '"x"'), (2, "n", "1")]
    assert sorted(conn.execute("SELECT * FROM texts").fetchall()) == [(1, "b", "[1, 2.50]"), (1, "c", "x"), (2, "n", "1")]
    assert sorted(conn.execute("SELECT id, (m).key FROM listed").fetchall()) == [(1, "a"), (1, "b"), (1, "c"), (2, "n")]
    assert [r[:2] for r in conn.execute("DESCRIBE members").fetchall()[:3]] == [
        ("id", "integer"), ("key", "character varying"), ("value", "jsonb")]


BATCH_QUERIES = [
    "SELECT t.id, x FROM t, unnest(t.tags) AS x",
    "SELECT id, i FROM t CROSS JOIN LATERAL generate_series(1, t.n) AS g(i) WHERE i > 1",
    "SELECT x, count(*) AS c FROM t JOIN LATERAL unnest(tags) AS u(x) ON true GROUP BY x",
    "SELECT s.id, s.x FROM (SELECT t.id, x FROM t, unnest(t.tags) AS x) AS s WHERE s.x <> 'b'",
]


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_batch_selects_with_lateral_calls_match_duckdb(tmp_path, request, engine):
    """A batch SELECT with a set-returning function in FROM, on either engine, gives DuckDB's own
    lateral call's rows (Spark has no lateral call in FROM: the select-list form runs there)."""
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine=engine)
    rows = [(1, 2, ["a", "b"]), (2, 0, []), (3, 3, ["b", "b", "c"]), (4, 1, None)]
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT, tags VARCHAR[])")
    conn.execute("INSERT INTO t VALUES " + ", ".join(
        f"({i}, {n}, {'NULL' if tags is None else 'ARRAY[' + ', '.join(repr(x) for x in tags) + ']::varchar[]'})"
        for i, n, tags in rows))
    conn.execute("FLUSH")
    oracle = Oracle()
    oracle.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT, tags VARCHAR[])")
    oracle.execute("INSERT INTO t VALUES (1, 2, ['a', 'b']), (2, 0, []), (3, 3, ['b', 'b', 'c']), (4, 1, NULL)")
    for sql in BATCH_QUERIES:
        assert_same(conn.execute(sql).fetchall(), oracle.rows(sql), sql)
