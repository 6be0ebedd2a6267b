"""Temporal joins (`JOIN dim FOR SYSTEM_TIME AS OF PROCTIME()`) over a left side that retracts rows
(a table with updates and deletes, an aggregate): the join keeps the row it emitted for each left
row, and a retracted left row retracts exactly that row.

While the dimension does not change after the left rows arrive, a temporal join equals the plain
join, which DuckDB computes: the random workloads load the dimension first and then insert, update
and delete the left side only. When the dimension changes, earlier output stays as it was emitted:
checked by hand below."""
from __future__ import annotations

import pytest
from both_paths import run_on
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_differential import run_workload, small, t1_rows

DIMENSION = "INSERT INTO t2 VALUES (0, 0, 5, 1.50), (1, 1, NULL, NULL), (2, 0, 7, 2.25), (4, 3, 1, 0.10)"

TEMPORAL_OVER_RETRACTIONS = {
    "tj_inner": ("SELECT t1.id, t1.v, t2.w FROM t1 JOIN t2 FOR SYSTEM_TIME AS OF PROCTIME() ON t1.k = t2.id",
                 "SELECT t1.id, t1.v, t2.w FROM t1 JOIN t2 ON t1.k = t2.id"),
    "tj_left_agg": ("SELECT t2.w, count(*) AS n, sum(t1.v) AS sv FROM t1 LEFT JOIN t2 FOR SYSTEM_TIME AS OF "
                    "PROCTIME() ON t1.k = t2.id GROUP BY t2.w",
                    "SELECT t2.w, count(*) AS n, sum(t1.v) AS sv FROM t1 LEFT JOIN t2 ON t1.k = t2.id GROUP BY t2.w"),
    # the left side an aggregate: each group's row is retracted and re-emitted as it changes
    "tj_over_aggregate": ("SELECT x.k, x.n, t2.d FROM (SELECT k, count(*) AS n FROM t1 GROUP BY k) x "
                          "LEFT JOIN t2 FOR SYSTEM_TIME AS OF PROCTIME() ON x.k = t2.id AND x.n < 3",
                          "SELECT x.k, x.n, t2.d FROM (SELECT k, count(*) AS n FROM t1 GROUP BY k) x "
                          "LEFT JOIN t2 ON x.k = t2.id AND x.n < 3"),
}

left_only = st.one_of(
    st.tuples(st.just("insert"), st.just("t1"), t1_rows()),
    st.tuples(st.just("sql"), st.sampled_from([
        "UPDATE t1 SET v = v + 1 WHERE k = {n}", "UPDATE t1 SET k = {n} WHERE id = {m}",
        "DELETE FROM t1 WHERE id = {m}", "DELETE FROM t1 WHERE v > {n}",
    ]), st.tuples(small, st.integers(0, 12))),
    st.just(("flush",)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(left_only, min_size=3, max_size=14),
       create_at=st.lists(st.integers(0, 14), min_size=3, max_size=3))
def test_temporal_joins_over_a_retracting_side_match_duckdb(tmp_path_factory, ops, create_at):
    run_workload(str(tmp_path_factory.mktemp("wh")), TEMPORAL_OVER_RETRACTIONS, ops, create_at,
                 setup=[(DIMENSION, DIMENSION), ("FLUSH", "SELECT 1")])


def test_a_retracted_row_retracts_what_it_met_not_what_the_dimension_holds_now(conn):
    conn.execute("CREATE TABLE orders (id INT PRIMARY KEY, item INT, qty INT)")
    conn.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR)")
    conn.execute("CREATE MATERIALIZED VIEW named AS SELECT o.id, o.qty, i.name FROM orders o "
                 "LEFT JOIN items FOR SYSTEM_TIME AS OF PROCTIME() i ON o.item = i.id")
    conn.execute("CREATE MATERIALIZED VIEW per_name AS SELECT i.name, sum(o.qty) AS qty FROM orders o "
                 "JOIN items FOR SYSTEM_TIME AS OF PROCTIME() i ON o.item = i.id GROUP BY i.name")
    conn.execute("INSERT INTO items VALUES (1, 'pen'), (2, 'ink')")
    conn.execute("FLUSH")
    conn.execute("INSERT INTO orders VALUES (1, 1, 10), (2, 2, 20), (3, 9, 30)")
    conn.execute("FLUSH")
    conn.execute("UPDATE items SET name = 'quill' WHERE id = 1")
    conn.execute("DELETE FROM items WHERE id = 2")
    conn.execute("FLUSH")  # earlier output is not amended
    assert sorted(conn.execute("SELECT * FROM named").fetchall()) == [(1, 10, "pen"), (2, 20, "ink"), (3, 30, None)]
    conn.execute("UPDATE orders SET qty = 11 WHERE id = 1")  # retracts (1, 10, pen), meets quill
    conn.execute("DELETE FROM orders WHERE id = 2")  # retracts (2, 20, ink), though ink is gone
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM named").fetchall()) == [(1, 11, "quill"), (3, 30, None)]
    assert conn.execute("SELECT * FROM per_name").fetchall() == [("quill", 11)]
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN CREATE MATERIALIZED VIEW x AS SELECT o.id, i.name FROM orders o "
        "JOIN items FOR SYSTEM_TIME AS OF PROCTIME() i ON o.item = i.id").fetchall())
    assert "state: the row emitted for each stream row, by [id]" in plan


@pytest.mark.spark
def test_temporal_joins_over_a_retracting_side_on_spark(tmp_path, spark):
    steps = [
        ("sql", DIMENSION),
        ("t1", [(1, 0, 5, "a"), (2, 1, 7, "b"), (3, 2, None, None), (4, 4, 2, "c"), (5, 6, 1, "a")]),
        ("sql", "UPDATE t1 SET v = 9, k = 2 WHERE id = 1"),
        ("sql", "DELETE FROM t1 WHERE id = 4"),
        ("t1", [(6, 0, 3, "a"), (7, None, None, "b")]),
    ]
    run_on(str(tmp_path / "wh"), spark, "spark", TEMPORAL_OVER_RETRACTIONS, steps=steps, flush_after=(0, 1, 4))
