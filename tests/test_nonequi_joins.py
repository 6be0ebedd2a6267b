"""Joins without an equality between their inputs (cross joins, nested-loop joins), equal to
DuckDB's answer over the same base data on random workloads (inserts, updates and deletes on both
sides, over several epochs), in-process; test_both_paths runs some of them on both paths.

Each side's change meets the other side's whole state, so a step is cheap when one side is small
(a global aggregate's one row) and correct at any size. Outer joins without an equality are
refused by name."""
from __future__ import annotations

import pytest
from test_differential import SCHEMA, _workload_test

import dagster_rw

NONEQUI_JOINS = {
    "nl_less": "SELECT t1.id, t2.id AS id2, t1.v, t2.w FROM t1 JOIN t2 ON t1.v < t2.w",
    "nl_between": "SELECT t1.id, t2.id AS id2, t2.d FROM t1, t2 WHERE t1.v BETWEEN t2.k AND t2.w",
    # a one-row side (a global aggregate): each row beside the total, which every change of t1 moves
    "nl_share_of_total": "SELECT t1.id, t1.v, x.n, x.total FROM t1 CROSS JOIN "
                         "(SELECT count(*) AS n, sum(v) AS total FROM t1) x",
    "nl_cross_no_key": "SELECT t2.id, t3.k, t3.v FROM t2 CROSS JOIN t3 WHERE t2.k <> t3.k",  # t3 has duplicates
    "nl_on_true_agg": "SELECT t1.k, count(*) AS n, sum(t2.w) AS sw FROM t1 INNER JOIN t2 ON TRUE "
                      "WHERE t1.v <= t2.w OR t2.w IS NULL GROUP BY t1.k",
    # an equi-join, then a third input by comparison alone
    "nl_after_equi": "SELECT t1.id, t2.id AS id2, t3.v AS v3 FROM t1 JOIN t2 ON t1.k = t2.k, t3 WHERE t3.v > t1.v",
    # two one-row sides, neither with a stream key
    "nl_two_aggregates": "SELECT a.n, b.m FROM (SELECT count(*) AS n FROM t1) a, (SELECT max(w) AS m FROM t2) b",
}

test_nonequi_join_views_match_duckdb = _workload_test(NONEQUI_JOINS)

# on both paths (test_both_paths): a condition over both changing sides, a one-row side, a side
# without a key (duplicates), two sides without a stream key, a join feeding an aggregate
NONEQUI_JOINS_BOTH_PATHS = {name: NONEQUI_JOINS[name] for name in (
    "nl_between", "nl_share_of_total", "nl_cross_no_key", "nl_two_aggregates", "nl_on_true_agg")}


def test_explain_names_the_nested_loop_join(conn):
    for ddl in SCHEMA:
        conn.execute(ddl)
    lines = [r[0] for r in conn.execute(f"EXPLAIN CREATE MATERIALIZED VIEW v AS {NONEQUI_JOINS['nl_less']}")]
    join = next(line.strip() for line in lines if "Join" in line)
    assert join == "StreamNestedLoopJoin { type: inner, condition: v < w }", lines
    lines = [r[0] for r in conn.execute(f"EXPLAIN CREATE MATERIALIZED VIEW v AS {NONEQUI_JOINS['nl_after_equi']}")]
    joins = [line.strip().split(" {")[0] for line in lines if "Join" in line]
    assert joins == ["StreamNestedLoopJoin", "StreamHashJoin"], lines


@pytest.mark.parametrize("sql, construct", [
    ("SELECT t1.id FROM t1 LEFT JOIN t2 ON t1.v < t2.w", "LEFT JOIN without an equality condition"),
    ("SELECT t1.id FROM t1 FULL JOIN t3 ON TRUE", "FULL JOIN without an equality condition"),
])
def test_outer_joins_without_an_equality_are_refused_by_name(conn, sql, construct):
    for ddl in SCHEMA:
        conn.execute(ddl)
    with pytest.raises(dagster_rw.Error, match=f"'v'.*{construct}"):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {sql}")


# LATERAL subqueries, decorrelated into joins: rows correlated by equalities and comparisons, an
# aggregate without GROUP BY (one row for every outer row: COUNT 0 where nothing matches), GROUP BY
LATERALS = {
    "lat_count": "SELECT t1.id, x.n FROM t1, LATERAL (SELECT count(*) AS n FROM t2 WHERE t2.k = t1.k) x",
    "lat_aggs": "SELECT t1.id, n, x.mx, x.sd FROM t1 CROSS JOIN LATERAL (SELECT count(w) AS n, max(w) AS mx, "
                "sum(d) AS sd FROM t2 WHERE t2.k = t1.k AND t2.w > 0) x WHERE n < 3",
    "lat_rows_compared": "SELECT t1.id, x.id2, x.w FROM t1 JOIN LATERAL (SELECT t2.id AS id2, w FROM t2 "
                         "WHERE t2.k = t1.k AND t2.w > t1.v) AS x ON true",
    "lat_left": "SELECT t1.id, x.* FROM t1 LEFT JOIN LATERAL (SELECT w, d FROM t2 WHERE t2.k = t1.k) x ON TRUE",
    "lat_grouped": "SELECT t1.id, x.k2, x.s, x.c FROM t1, LATERAL (SELECT t2.w AS k2, sum(d) AS s, count(*) AS c "
                   "FROM t2 WHERE t2.k = t1.k GROUP BY t2.w) x",
    "lat_no_key_outer": "SELECT t3.k, t3.v, x.n FROM t3, LATERAL (SELECT count(*) AS n FROM t1 "
                        "WHERE t1.k = t3.k AND t1.v IS NOT NULL) x",
    "lat_comparison_only": "SELECT t1.id, x.id2 FROM t1, LATERAL (SELECT id AS id2 FROM t2 WHERE t2.w < t1.v) x",
}

test_lateral_views_match_duckdb = _workload_test(LATERALS)

LATERALS_BOTH_PATHS = {name: LATERALS[name] for name in ("lat_count", "lat_rows_compared", "lat_left")}


@pytest.mark.parametrize("sql, construct", [
    ("SELECT t1.id, x.v FROM t1, LATERAL (SELECT t1.v + w AS v FROM t2 WHERE t2.k = t1.k) x",
     "refers to the outer query outside its WHERE"),
    ("SELECT t1.id, x.w FROM t1, LATERAL (SELECT w FROM t2 WHERE t2.k = t1.k ORDER BY w LIMIT 1) x",
     "LIMIT in a correlated LATERAL subquery"),
    ("SELECT t1.id, x.n FROM t1, LATERAL (SELECT count(*) + 1 AS n FROM t2 WHERE t2.k = t1.k) x",
     "not one aggregate call"),
    ("SELECT * FROM t1, LATERAL (SELECT w FROM t2 WHERE t2.k = t1.k) x", r"SELECT \* over a LATERAL subquery"),
    ("SELECT t1.id FROM t1 RIGHT JOIN LATERAL (SELECT w FROM t2 WHERE t2.k = t1.k) x ON TRUE", "RIGHT JOIN LATERAL"),
    ("SELECT t1.id FROM t1 LEFT JOIN LATERAL (SELECT w FROM t2 WHERE t2.k = t1.k) x ON x.w > 1",
     "LEFT JOIN LATERAL with a condition other than ON TRUE"),
])
def test_lateral_subqueries_without_a_join_plan_are_refused_by_name(conn, sql, construct):
    for ddl in SCHEMA:
        conn.execute(ddl)
    with pytest.raises(dagster_rw.Error, match=f"'v'.*{construct}"):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {sql}")
