"""A view's expressions are non-strict: a value that cannot be computed is NULL and counted.

An integer overflow, a bad cast or a division by zero inside a view gives NULL for that expression,
the row is kept, and the failure is counted in `rw_view_errors`; a batch SELECT of the same
expression still fails. The oracle is DuckDB with TRY(...) / TRY_CAST around the expressions that
fail, over the same base data; both paths (in-process and Spark) give the same rows and counts.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.errors import Error

BIG = 9223372036854775807
SCHEMA = "CREATE TABLE t (id INT PRIMARY KEY, k INT, price BIGINT, s VARCHAR, i INT)"

# view -> (its query, the same query in DuckDB with the failing expressions tried)
VIEWS = {
    "arith": ("SELECT id, price + 726 AS p, i * 2 AS i2, -price AS np, (i * 2) + 1 AS nested FROM t",
              "SELECT id, TRY(price + 726) AS p, TRY(i * 2) AS i2, TRY(-price) AS np, TRY(TRY(i * 2) + 1) AS nested "
              "FROM t"),
    "casts": ("SELECT id, s::int AS si, CAST(price AS INT) AS pi, i / (k - k) AS d FROM t",
              "SELECT id, TRY_CAST(s AS INT) AS si, TRY_CAST(price AS INT) AS pi, NULL::BIGINT AS d FROM t"),
    # a failing filter drops the row (its condition is NULL)
    "filtered": ("SELECT id, k FROM t WHERE s::int > 1", "SELECT id, k FROM t WHERE TRY_CAST(s AS INT) > 1"),
    # the failing branch is not evaluated on the rows that take the other one
    "guarded": ("SELECT id, CASE WHEN i < 1000000000 THEN i * 2 ELSE -1 END AS g, "
                "COALESCE(i, price + 1) AS c FROM t",
                "SELECT id, CASE WHEN i < 1000000000 THEN i * 2 ELSE -1 END AS g, COALESCE(i, TRY(price + 1)) AS c "
                "FROM t"),
    # an aggregate over NULLs where values failed
    "grouped": ("SELECT k, max(price + 726) AS mp, count(s::int) AS n FROM t GROUP BY k",
                "SELECT k, max(TRY(price + 726)) AS mp, count(TRY_CAST(s AS INT)) AS n FROM t GROUP BY k"),
}

rows = st.lists(st.tuples(
    st.integers(0, 6), st.integers(0, 2),
    st.one_of(st.none(), st.sampled_from([0, 5, -5, BIG, BIG - 726, BIG - 725, -BIG - 1, -BIG])),
    st.one_of(st.none(), st.sampled_from(["1", "2", "42", "two", "", "99999999999"])),
    st.one_of(st.none(), st.sampled_from([0, 3, 999999999, 1000000000, 1073741824, -1073741825, 2147483647]))),
    min_size=1, max_size=6)
ops = st.lists(st.one_of(st.tuples(st.just("insert"), rows),
                         st.tuples(st.just("delete"), st.integers(0, 6)),
                         st.tuples(st.just("flush"))), min_size=2, max_size=10)


def _values(batch) -> str:
    def lit(v):
        return "NULL" if v is None else (f"'{v}'" if isinstance(v, str) else str(v))

    return ", ".join("(" + ", ".join(lit(v) for v in r) + ")" for r in {r[0]: r for r in batch}.values())


def run(conn, oracle, steps, views=VIEWS):
    def compare():
        conn.execute("FLUSH")
        for name in views:
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.db.sql(f"SELECT * FROM {name}").fetchall(),
                        name)

    conn.execute(SCHEMA)
    oracle.execute(SCHEMA)
    for name, (ours, theirs) in views.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {ours}")
        oracle.db.execute(f"CREATE VIEW {name} AS {theirs}")
    for op in steps:
        if op[0] == "insert":
            conn.execute(f"INSERT INTO t VALUES {_values(op[1])}")
            oracle.upsert("t", _values(op[1]))
        elif op[0] == "delete":
            conn.execute(f"DELETE FROM t WHERE id = {op[1]}")
            oracle.execute(f"DELETE FROM t WHERE id = {op[1]}")
        else:
            compare()
    compare()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(steps=ops)
def test_failing_values_are_null_in_views_and_the_rows_are_kept(tmp_path_factory, steps):
    with dagster_rw.connect(str(tmp_path_factory.mktemp("wh"))) as conn:
        run(conn, Oracle(), steps)


STEPS = [("insert", [(1, 0, 5, "1", 3), (2, 0, BIG, "two", 2000000000), (3, 1, None, "42", None)]),
         ("flush",),
         ("insert", [(2, 1, BIG - 726, "2", 7), (4, 1, -BIG - 1, "x", -1073741825)]),
         ("delete", 3)]


def errors(conn) -> list[tuple]:
    return sorted(conn.execute("SELECT view, epoch, expression, error, count, example FROM rw_view_errors").fetchall())


def test_each_failure_is_counted_with_its_expression_error_and_example(warehouse):
    with dagster_rw.connect(warehouse) as conn:
        run(conn, Oracle(), STEPS, {"arith": VIEWS["arith"], "filtered": VIEWS["filtered"]})
        first, second = sorted({e[1] for e in errors(conn)})
        assert errors(conn) == sorted([
            # epoch 1: id 2 overflows both sums; its s is no integer
            ("arith", first, "price + 726", "bigint out of range", 1, f"{BIG} + 726"),
            ("arith", first, "i * 2", "integer out of range", 1, "2000000000 * 2"),
            ("arith", first, "i * 2", "integer out of range", 1, "2000000000 * 2"),  # inside (i * 2) + 1
            ("filtered", first, "CAST(s AS INT)", "invalid input syntax for type integer", 1, "two"),
            # epoch 2: id 2's old row leaves (evaluated again), id 4 comes; -price fails on the least bigint
            ("arith", second, "price + 726", "bigint out of range", 1, f"{BIG} + 726"),
            ("arith", second, "i * 2", "integer out of range", 2, "-1073741825 * 2"),
            ("arith", second, "i * 2", "integer out of range", 2, "-1073741825 * 2"),
            ("arith", second, "-price", "bigint out of range", 1, str(-BIG - 1)),
            ("filtered", second, "CAST(s AS INT)", "invalid input syntax for type integer", 2, "two"),
        ])
        # the expression over a failed value is NULL, not failed again: (i * 2) + 1 is never counted
        assert not any(e[2] == "(i * 2) + 1" for e in errors(conn))
        # a batch SELECT fails, as in PostgreSQL
        with pytest.raises(Error, match="(?i)overflow|out of range"):
            conn.execute("SELECT -price FROM t").fetchall()
        with pytest.raises(Error, match="(?i)conver|cast"):
            conn.execute("SELECT s::int FROM t").fetchall()


def test_a_branch_not_taken_and_a_coalesce_argument_not_reached_count_nothing(warehouse):
    with dagster_rw.connect(warehouse) as conn:
        run(conn, Oracle(), [("insert", [(1, 0, BIG, "1", 2000000000), (2, 0, BIG, "1", None)])],
            {"guarded": VIEWS["guarded"]})
        # id 1 takes the ELSE branch and its i is not NULL; id 2's price + 1 is reached and fails
        assert [(e[2], e[4]) for e in errors(conn)] == [("price + 1", 1)]


def test_errors_survive_a_reconnect_and_leave_with_the_view(warehouse):
    with dagster_rw.connect(warehouse) as conn:
        run(conn, Oracle(), STEPS[:2], {"casts": VIEWS["casts"]})
        before = errors(conn)
        assert {(e[2], e[4]) for e in before} == {("CAST(s AS INT)", 1), ("CAST(price AS INT)", 1), ("i / (k - k)", 2)}
    with dagster_rw.connect(warehouse) as conn:
        assert errors(conn) == before
        conn.execute("DROP MATERIALIZED VIEW casts")
        assert errors(conn) == []


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_spark_and_in_process_paths_count_the_same_failures(tmp_path, spark, engine):
    conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine)
    run(conn, Oracle(), STEPS, {"arith": VIEWS["arith"], "casts": VIEWS["casts"], "grouped": VIEWS["grouped"]})
    got = [(e[0], e[2], e[3], e[4], e[5]) for e in errors(conn)]
    assert sorted(got) == EXPECTED, got
    assert {s["engine"] for s in conn.status()} == {engine}


EXPECTED = sorted([
        ("arith", "price + 726", "bigint out of range", 1, f"{BIG} + 726"),
        ("arith", "i * 2", "integer out of range", 1, "2000000000 * 2"),
        ("arith", "i * 2", "integer out of range", 1, "2000000000 * 2"),
        ("arith", "price + 726", "bigint out of range", 1, f"{BIG} + 726"),
        ("arith", "i * 2", "integer out of range", 2, "-1073741825 * 2"),
        ("arith", "i * 2", "integer out of range", 2, "-1073741825 * 2"),
        ("arith", "-price", "bigint out of range", 1, str(-BIG - 1)),
        ("casts", "CAST(s AS INT)", "invalid input syntax for type integer", 1, "two"),
        ("casts", "CAST(price AS INT)", "integer out of range", 1, str(BIG)),
        ("casts", "i / (k - k)", "division by zero", 2, "2000000000"),  # the least as text
        ("casts", "CAST(s AS INT)", "invalid input syntax for type integer", 2, "two"),
        ("casts", "CAST(price AS INT)", "integer out of range", 3, str(-BIG - 1)),
        ("casts", "i / (k - k)", "division by zero", 3, "-1073741825"),
        ("grouped", "price + 726", "bigint out of range", 1, f"{BIG} + 726"),
        ("grouped", "CAST(s AS INT)", "invalid input syntax for type integer", 1, "two"),
        ("grouped", "price + 726", "bigint out of range", 1, f"{BIG} + 726"),
        ("grouped", "CAST(s AS INT)", "invalid input syntax for type integer", 2, "two"),
])
