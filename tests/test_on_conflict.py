"""CREATE TABLE ... ON CONFLICT: on random workloads (rows of one key in one INSERT, across INSERTs
of one epoch and across epochs, with deletes and updates between), the table and the views over
it equal DuckDB's INSERT ... ON CONFLICT applied row by row, on both paths."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.errors import ProgrammingError

COLUMNS = "(id INT PRIMARY KEY, a INT, b VARCHAR, ver INT)"
SET_ALL = "a = excluded.a, b = excluded.b, ver = excluded.ver"
SET_NOT_NULL = "a = coalesce(excluded.a, t.a), b = coalesce(excluded.b, t.b), ver = coalesce(excluded.ver, t.ver)"
NEWER = " WHERE t.ver IS NULL OR excluded.ver >= t.ver"  # NULL is below every version
# clause -> (DuckDB's action for one inserted row, whether an UPDATE's NULL keeps the old value)
POLICIES = {
    "": (f"DO UPDATE SET {SET_ALL}", False),
    "ON CONFLICT DO NOTHING": ("DO NOTHING", False),
    "ON CONFLICT DO UPDATE FULL WITH VERSION COLUMN(ver)": (f"DO UPDATE SET {SET_ALL}{NEWER}", False),
    "ON CONFLICT DO UPDATE IF NOT NULL": (f"DO UPDATE SET {SET_NOT_NULL}", True),
    "ON CONFLICT DO UPDATE IF NOT NULL WITH VERSION COLUMN (ver)": (f"DO UPDATE SET {SET_NOT_NULL}{NEWER}", True),
}
VIEWS = {
    "per_b": "SELECT b, count(*) AS n, sum(a) AS s, max(ver) AS v FROM t GROUP BY b",
    "big": "SELECT id, a, ver FROM t WHERE a > 2",
}

maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
rows = st.lists(st.tuples(st.integers(0, 5), maybe(st.integers(0, 6)), maybe(st.sampled_from(["x", "y"])),
                          maybe(st.integers(0, 4))), min_size=1, max_size=5)
operations = st.one_of(
    st.tuples(st.just("insert"), rows),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("update"), st.tuples(st.integers(0, 5), maybe(st.integers(0, 6)))),
    st.tuples(st.just("flush"), st.none()),
)


def _literal(v) -> str:
    return "NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v)


def run_policy(path: str, clause: str, ops, engine: str = "duckdb", spark=None) -> None:
    action, update_keeps_old = POLICIES[clause]
    conn = dagster_rw.connect(path, engine=engine, spark=spark)
    oracle = Oracle()
    conn.execute(f"CREATE TABLE t {COLUMNS} {clause}")
    oracle.db.execute(f"CREATE TABLE t {COLUMNS}")
    for name, query in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")

    def check():
        label = f"{clause or 'overwrite'} ({engine})"
        assert_same(conn.execute("SELECT * FROM t").fetchall(), oracle.rows("SELECT * FROM t"), f"t, {label}")
        for name, query in VIEWS.items():  # the views see exactly what the table holds
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(query), f"{name}, {label}")

    for what, arg in ops:
        if what == "insert":
            conn.execute(f"INSERT INTO t VALUES {', '.join('(' + ', '.join(map(_literal, r)) + ')' for r in arg)}")
            for r in arg:  # one row at a time: a later row of the INSERT meets the earlier one
                oracle.db.execute(f"INSERT INTO t VALUES ({', '.join(map(_literal, r))}) ON CONFLICT (id) {action}")
        elif what == "delete":
            conn.execute(f"DELETE FROM t WHERE id = {arg}")
            oracle.db.execute(f"DELETE FROM t WHERE id = {arg}")
        elif what == "update":
            key, value = arg
            conn.execute(f"UPDATE t SET a = {_literal(value)} WHERE id = {key}")
            new = f"coalesce({_literal(value)}, a)" if update_keeps_old else _literal(value)
            oracle.db.execute(f"UPDATE t SET a = {new} WHERE id = {key}")
        else:
            conn.execute("FLUSH")
            check()
    conn.execute("FLUSH")
    check()
    conn.close()


@pytest.mark.parametrize("clause", list(POLICIES))
def test_policy_matches_duckdb_on_random_workloads(tmp_path_factory, clause):
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    @given(ops=st.lists(operations, min_size=3, max_size=12))
    def check(ops):
        run_policy(str(tmp_path_factory.mktemp("wh")), clause, ops)

    check()


SPARK_OPS = [
    ("insert", [(1, 1, "x", 2), (1, None, "y", 3), (2, 5, None, None), (1, 4, None, 1)]),
    ("insert", [(3, 3, "x", 1), (2, None, "y", 0)]),
    ("flush", None),
    ("insert", [(1, 6, None, 3), (3, None, None, 0), (4, 4, "y", None)]),
    ("update", (2, None)),
    ("delete", 3),
    ("insert", [(3, 9, "x", None)]),
    ("flush", None),
]


@pytest.mark.parametrize("clause", [c for c in POLICIES if c])
def test_policy_matches_duckdb_on_spark(tmp_path, spark, clause):
    run_policy(str(tmp_path / "wh"), clause, SPARK_OPS, engine="spark", spark=spark)


def test_clauses_that_cannot_be_applied_are_refused_by_name(conn):
    for clause, message in [
        ("(id INT, v INT) ON CONFLICT DO NOTHING", "ON CONFLICT needs a primary key"),
        ("(id INT PRIMARY KEY, v INT) ON CONFLICT DO NOTHING WITH VERSION COLUMN(v)", "DO NOTHING never replaces"),
        ("(id INT PRIMARY KEY, v INT) ON CONFLICT DO UPDATE FULL WITH VERSION COLUMN(w)", '"w" does not exist'),
        ("(id INT PRIMARY KEY, v INT) ON CONFLICT DO UPDATE FULL WITH VERSION COLUMN(id)", "part of the primary key"),
        ("(id INT PRIMARY KEY, v BOOLEAN) ON CONFLICT DO UPDATE FULL WITH VERSION COLUMN(v)", "type boolean"),
        ("(id INT PRIMARY KEY, v INT) ON CONFLICT DO SOMETHING", "not supported: ON CONFLICT DO SOMETHING"),
        ("(id INT PRIMARY KEY, v INT) APPEND ONLY ON CONFLICT DO NOTHING", "ON CONFLICT on the APPEND ONLY table"),
    ]:
        with pytest.raises(ProgrammingError, match=message):
            conn.execute(f"CREATE TABLE x {clause}")
    assert conn.wh.catalog().get("x") is None
    conn.execute("CREATE TABLE x (id INT PRIMARY KEY, v INT) ON CONFLICT DO NOTHING")
    assert conn.wh.get("x").sql.endswith("ON CONFLICT DO NOTHING")
