"""Temporal joins through an index: `JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() ON ...` whose ON
matches the key of an index on dim (CREATE INDEX ... ON dim (k)) rather than dim's primary key
looks dim up in the index, as RisingWave does; a left row may then meet several dimension rows.
Naming the index as the dimension works too.

While the dimension does not change after the left rows arrive, a temporal join equals the plain
join, which DuckDB computes (random workloads that load the dimension first, then insert, update
and delete the left side only, on both paths). When the dimension changes, earlier output stays as
it was emitted: checked by hand below."""
from __future__ import annotations

import pytest
from both_paths import run_on
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_differential import run_workload
from test_temporal_join_memo import left_only

import dagster_rw

DIMENSION = "INSERT INTO t2 VALUES (0, 0, 5, 1.50), (1, 1, NULL, NULL), (2, 0, 7, 2.25), (4, 3, 1, 0.10), (5, NULL, 2, 3.00)"
SETUP = [(DIMENSION, DIMENSION), ("CREATE INDEX t2_by_k ON t2 (k)", "SELECT 1"), ("FLUSH", "SELECT 1")]

THROUGH_INDEX = {
    "tji_inner": ("SELECT t1.id, t1.v, t2.id AS did, t2.w FROM t1 JOIN t2 FOR SYSTEM_TIME AS OF PROCTIME() "
                  "ON t1.k = t2.k",
                  "SELECT t1.id, t1.v, t2.id AS did, t2.w FROM t1 JOIN t2 ON t1.k = t2.k"),
    "tji_left_agg": ("SELECT t2.w, count(*) AS n, sum(t1.v) AS sv FROM t1 LEFT JOIN t2 FOR SYSTEM_TIME AS OF "
                     "PROCTIME() ON t1.k = t2.k GROUP BY t2.w",
                     "SELECT t2.w, count(*) AS n, sum(t1.v) AS sv FROM t1 LEFT JOIN t2 ON t1.k = t2.k GROUP BY t2.w"),
    "tji_named_index": ("SELECT t1.id, x.id AS did, x.d FROM t1 LEFT JOIN t2_by_k FOR SYSTEM_TIME AS OF PROCTIME() x "
                        "ON t1.k = x.k AND x.w > 2",
                        "SELECT t1.id, x.id AS did, x.d FROM t1 LEFT JOIN t2 x ON t1.k = x.k AND x.w > 2"),
}


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(left_only, min_size=3, max_size=14),
       create_at=st.lists(st.integers(0, 14), min_size=3, max_size=3))
def test_temporal_joins_through_an_index_match_duckdb(tmp_path_factory, ops, create_at):
    run_workload(str(tmp_path_factory.mktemp("wh")), THROUGH_INDEX, ops, create_at, setup=SETUP)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_temporal_joins_through_an_index_on_both_paths(tmp_path, spark, engine):
    steps = [
        ("t1", [(1, 0, 5, "a"), (2, 1, 7, "b"), (3, 2, None, None), (4, 3, 2, "c"), (5, None, 1, "a")]),
        ("sql", "UPDATE t1 SET v = 9, k = 3 WHERE id = 1"),
        ("sql", "DELETE FROM t1 WHERE id = 4"),
        ("t1", [(6, 0, 3, "a"), (7, 1, None, "b")]),
    ]
    run_on(str(tmp_path / engine), spark, engine, THROUGH_INDEX, steps=steps, flush_after=(0, 2, 3), setup=SETUP)


def test_rows_meet_the_index_as_of_their_epoch(conn):
    """The index is advanced before the join in each FLUSH: an order meets products inserted in
    its own epoch, and keeps what it met when the products change later."""
    conn.execute("CREATE TABLE products (id INT PRIMARY KEY, code VARCHAR, name VARCHAR)")
    conn.execute("CREATE TABLE orders (oid INT PRIMARY KEY, code VARCHAR)")
    with pytest.raises(dagster_rw.ProgrammingError, match="nor the key of an index on it"):
        conn.execute("CREATE MATERIALIZED VIEW named AS SELECT o.oid, p.name FROM orders o "
                     "JOIN products FOR SYSTEM_TIME AS OF PROCTIME() p ON o.code = p.code")
    conn.execute("CREATE INDEX names_only ON products (code) INCLUDE (name)")  # lacks id: not used
    with pytest.raises(dagster_rw.ProgrammingError, match="nor the key of an index on it"):
        conn.execute("CREATE MATERIALIZED VIEW named AS SELECT o.oid, p.name FROM orders o "
                     "JOIN products FOR SYSTEM_TIME AS OF PROCTIME() p ON o.code = p.code")
    conn.execute("CREATE INDEX by_code ON products (code)")
    conn.execute("CREATE MATERIALIZED VIEW named AS SELECT o.oid, p.id, p.name FROM orders o "
                 "JOIN products FOR SYSTEM_TIME AS OF PROCTIME() p ON o.code = p.code")
    assert conn.wh.catalog().get("named").inputs == ["orders", "products", "by_code"]
    conn.execute("INSERT INTO products VALUES (1, 'A', 'apple'), (2, 'A', 'apricot'), (3, 'B', 'banana')")
    conn.execute("INSERT INTO orders VALUES (10, 'A'), (11, 'C')")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM named").fetchall()) == [(10, 1, "apple"), (10, 2, "apricot")]
    conn.execute("UPDATE products SET name = 'big apple' WHERE id = 1")
    conn.execute("INSERT INTO orders VALUES (12, 'A')")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM named").fetchall()) == [
        (10, 1, "apple"), (10, 2, "apricot"), (12, 1, "big apple"), (12, 2, "apricot")]
    conn.execute("DELETE FROM orders WHERE oid = 10")  # retracts both rows it met, as they were met
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM named").fetchall()) == [(12, 1, "big apple"), (12, 2, "apricot")]
    with pytest.raises(dagster_rw.IntegrityError, match="depend on it"):
        conn.execute("DROP INDEX by_code")
