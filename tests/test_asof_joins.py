"""ASOF joins (`ASOF [LEFT] JOIN ... ON equalities AND one inequality`), equal to DuckDB's own ASOF
JOIN over the same base data on random workloads (inserts, updates and deletes on both sides, over
several epochs), in-process; test_both_paths runs some of them on both paths.

Each view compares with a unique column of the right side (its primary key), so no two right rows
tie for a left row and DuckDB has one answer."""
from __future__ import annotations

import pytest
from test_differential import SCHEMA, _workload_test

import dagster_rw

ASOF_JOINS = {
    # the right row with the greatest id not above t1.v, among those with t1's k
    "asof_inner": "SELECT t1.id, t1.v, t2.id AS id2, t2.w FROM t1 ASOF JOIN t2 ON t1.k = t2.k AND t1.v >= t2.id",
    # the least id above t1.v; a left row meeting none (a NULL k or v too) is kept
    "asof_left_less": "SELECT t1.id, t2.id AS id2, t2.d FROM t1 ASOF LEFT JOIN t2 ON t1.k = t2.k AND t1.v < t2.id",
    # the inequality written with the right side first, under an aggregate
    "asof_reversed_agg": "SELECT t2.k, count(*) AS n, sum(t1.v) AS sv FROM t2 ASOF JOIN t1 "
                         "ON t2.k = t1.k AND t1.id <= t2.w GROUP BY t2.k",
    # a filtered, computed left side; two join keys
    "asof_left_two_keys": "SELECT x.id, x.v1, t2.id AS id2 FROM (SELECT id, k, v, v + 1 AS v1 FROM t1 "
                          "WHERE s IS NOT NULL) x ASOF LEFT JOIN t2 ON x.k = t2.k AND x.v = t2.w AND x.v1 > t2.id",
}

test_asof_join_views_match_duckdb = _workload_test(ASOF_JOINS, examples=40)

ASOF_BOTH_PATHS = {name: ASOF_JOINS[name] for name in ("asof_inner", "asof_left_less")}


@pytest.mark.parametrize("sql, construct", [
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.v >= t2.id", "ASOF JOIN without an equality condition"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.k = t2.k", "without exactly one inequality"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.k = t2.k AND t1.v >= t2.id AND t1.id < t2.w",
     "without exactly one inequality"),
    ("SELECT t1.id FROM t1 ASOF RIGHT JOIN t2 ON t1.k = t2.k AND t1.v >= t2.id", "ASOF RIGHT JOIN"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.k = t2.k AND t1.v + 1 >= t2.id", "does not compare a column of each side"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.k = t2.k AND t1.v >= t1.id", "does not compare a column of each side"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.k = t2.k AND t1.s >= t2.id",
     "inequality between character varying and integer"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 ON t1.k = t2.k AND t1.v >= t2.id AND t1.s = 'a'",
     "conditions other than equalities between the sides"),
    ("SELECT t1.id FROM t1 ASOF JOIN t2 USING (k)", "ASOF JOIN without ON"),
])
def test_asof_joins_the_engine_cannot_keep_are_refused_by_name(conn, sql, construct):
    for ddl in SCHEMA:
        conn.execute(ddl)
    with pytest.raises(dagster_rw.Error, match=construct):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {sql}")


def test_an_asof_join_follows_the_right_side_as_it_changes(conn):
    """A quote stream against trades: each trade meets the latest quote at or before it, and a
    quote inserted or deleted later moves the matches of its symbol's trades (hand-checked rows)."""
    conn.execute("CREATE TABLE trades (id INT PRIMARY KEY, sym VARCHAR, ts INT)")
    conn.execute("CREATE TABLE quotes (id INT PRIMARY KEY, sym VARCHAR, ts INT, px INT)")
    conn.execute("CREATE MATERIALIZED VIEW tq AS SELECT trades.id, quotes.px FROM trades "
                 "ASOF LEFT JOIN quotes ON trades.sym = quotes.sym AND trades.ts >= quotes.ts")
    conn.execute("INSERT INTO quotes VALUES (1, 'a', 10, 100), (2, 'a', 20, 200), (3, 'b', 5, 50)")
    conn.execute("INSERT INTO trades VALUES (1, 'a', 15), (2, 'a', 25), (3, 'a', 5), (4, 'b', 7), (5, 'c', 1)")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM tq").fetchall(), key=str) == \
        [(1, 100), (2, 200), (3, None), (4, 50), (5, None)]
    conn.execute("INSERT INTO quotes VALUES (4, 'a', 14, 140), (5, 'a', 1, 10)")
    conn.execute("DELETE FROM quotes WHERE id = 2")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM tq").fetchall(), key=str) == \
        [(1, 140), (2, 140), (3, 10), (4, 50), (5, None)]
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN CREATE MATERIALIZED VIEW x AS SELECT trades.id FROM trades "
        "ASOF JOIN quotes ON trades.sym = quotes.sym AND quotes.ts <= trades.ts").fetchall())
    assert "StreamAsOfJoin { type: inner, on: [sym] = [sym], asof: ts >= ts }" in plan
