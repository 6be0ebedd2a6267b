"""CREATE INDEX / DROP INDEX / SHOW INDEXES: an index is a materialized view of one table or view,
stored under the index key followed by the base's key. Its rows equal DuckDB's `SELECT <columns>
FROM base` after every flush of random workloads (test_both_paths runs INDEXES_BOTH_PATHS on Spark)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same
from test_differential import SCHEMA, _apply, operations

import dagster_rw
from dagster_rw.errors import IntegrityError, ProgrammingError

# name -> (CREATE INDEX, DuckDB's query for the index's rows)
INDEXES_BOTH_PATHS = {
    "ix_t1_k": ("CREATE INDEX ix_t1_k ON t1 (k DESC, v) INCLUDE (s)", "SELECT k, v, s FROM t1"),
    "ix_t3_v": ("CREATE INDEX ix_t3_v ON t3 (v)", "SELECT * FROM t3"),
}
INDEXES = {
    **INDEXES_BOTH_PATHS,
    "ix_t1_s": ("CREATE INDEX ix_t1_s ON t1 (s)", "SELECT * FROM t1"),
    "ix_t2_w": ("CREATE INDEX ix_t2_w ON t2 (w, k) INCLUDE (d) DISTRIBUTED BY (w)", "SELECT w, k, d FROM t2"),
    "ix_per_k": ("CREATE INDEX ix_per_k ON per_k (n)", "SELECT * FROM per_k"),
}
PER_K = "SELECT k, count(*) AS n, sum(v) AS sv FROM t1 GROUP BY k"


def _check(conn, oracle, created):
    for name in created:
        _, theirs = INDEXES[name]
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(theirs), name)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(operations, min_size=3, max_size=14),
       create_at=st.lists(st.integers(0, 14), min_size=len(INDEXES), max_size=len(INDEXES)))
def test_index_rows_match_duckdb_on_random_workloads(tmp_path_factory, ops, create_at):
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    conn.execute(f"CREATE MATERIALIZED VIEW per_k AS {PER_K}")
    oracle.execute(f"CREATE VIEW per_k AS {PER_K}")
    created: list[str] = []
    for i, op in enumerate(ops + [("flush",)]):
        for name, at in zip(INDEXES, create_at):
            if at <= i and name not in created:
                conn.execute(INDEXES[name][0])
                created.append(name)
        _apply(conn, oracle, op)
        if op[0] == "flush":
            _check(conn, oracle, created)
    conn.close()


@pytest.fixture
def conn(tmp_path):
    c = dagster_rw.connect(str(tmp_path / "wh"))
    c.execute("CREATE TABLE t (k INT PRIMARY KEY, a INT, b VARCHAR, c INT)")
    c.execute("INSERT INTO t VALUES (1, 5, 'x', 10), (2, 3, 'y', 20), (3, 5, NULL, 30)")
    yield c
    c.close()


def test_index_is_stored_under_its_key_then_the_base_key(conn):
    conn.execute("CREATE INDEX idx ON t (a DESC, b) INCLUDE (c)")
    obj = conn.wh.get("idx")
    assert obj.stream_key[:2] == ["a", "b"] and len(obj.stream_key) == 3
    key_column = obj.stream_key[2]  # the base's key, carried as a hidden column
    assert [c.hidden for c in obj.columns if c.name == key_column] == [True]
    assert [c.name for c in obj.visible_columns] == ["a", "b", "c"]
    conn.execute("UPDATE t SET a = 7 WHERE k = 2")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM idx").fetchall(), key=str) == \
        sorted([(5, "x", 10), (7, "y", 20), (5, None, 30)], key=str)


def test_show_indexes_and_drop_index(conn):
    conn.execute("CREATE INDEX idx1 ON t (a, b DESC) INCLUDE (c)")
    conn.execute("CREATE INDEX idx2 ON t (b)")
    conn.execute("CREATE INDEX IF NOT EXISTS idx2 ON t (c)")  # exists: nothing done
    cur = conn.execute("SHOW INDEXES FROM t")
    assert [d[0] for d in cur.description] == ["Name", "On", "Key", "Include", "Distributed By"]
    assert cur.fetchall() == [("idx1", "t", "a ASC, b DESC", "c", "a, b"), ("idx2", "t", "b ASC", "k, a, c", "b")]
    assert conn.execute("SHOW MATERIALIZED VIEWS").fetchall() == []  # an index is not listed as a view
    with pytest.raises(ProgrammingError, match="is an index; use DROP INDEX"):
        conn.execute("DROP MATERIALIZED VIEW idx1")
    with pytest.raises(ProgrammingError, match="is a table; use DROP TABLE"):
        conn.execute("DROP INDEX t")
    conn.execute("DROP INDEX idx1")
    conn.execute("DROP INDEX IF EXISTS idx1")
    with pytest.raises(ProgrammingError, match='index "idx1" does not exist'):
        conn.execute("DROP INDEX idx1")
    assert conn.execute("SHOW INDEXES FROM t").fetchall() == [("idx2", "t", "b ASC", "k, a, c", "b")]


def test_drop_table_drops_its_indexes_unless_something_reads_them(conn):
    conn.execute("CREATE INDEX idx ON t (a)")
    conn.execute("CREATE MATERIALIZED VIEW mv AS SELECT a FROM idx")
    with pytest.raises(IntegrityError, match=r"cannot drop 't'.*\(mv\)"):
        conn.execute("DROP TABLE t")
    conn.execute("DROP MATERIALIZED VIEW mv")
    conn.execute("DROP TABLE t")
    assert conn.wh.catalog().objects == {}
    conn.execute("CREATE TABLE t (k INT)")  # the names are free again
    conn.execute("CREATE INDEX idx ON t (k)")
    assert conn.execute("SHOW INDEXES FROM t").fetchall() == [("idx", "t", "k ASC", "", "k")]


@pytest.mark.parametrize("sql, error", [
    ("CREATE INDEX i ON t ((a + 1))", "not supported: an expression as a column of index 'i'"),
    ("CREATE INDEX i ON t (zz)", 'column "zz" of index \'i\' does not exist in \'t\''),
    ("CREATE INDEX i ON nothing (a)", 'relation "nothing" does not exist'),
    ("CREATE INDEX ON t (a)", "not supported: CREATE INDEX without a name"),
    ("CREATE INDEX i ON t (a, a)", "names a column twice"),
    ("CREATE INDEX i ON t (a, b) DISTRIBUTED BY (b)", "DISTRIBUTED BY must be a prefix of the index key"),
    ("CREATE INDEX i ON t (a) WHERE a > 1", "not supported: WHERE a > 1 in CREATE INDEX i"),
    ("CREATE INDEX i ON t USING hnsw (a)", "vector indexes"),
])
def test_index_shapes_refused_by_name(conn, sql, error):
    with pytest.raises(ProgrammingError, match=error.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        conn.execute(sql)


def test_index_on_an_index_and_renames_refused(conn):
    conn.execute("CREATE INDEX idx ON t (a)")
    with pytest.raises(ProgrammingError, match="it is an index"):
        conn.execute("CREATE INDEX i2 ON idx (a)")
    with pytest.raises(ProgrammingError, match='renaming "t": it is an index or has indexes'):
        conn.execute("ALTER TABLE t RENAME TO t2")


def test_a_sql_project_refuses_an_index_by_name(tmp_path):
    from dagster_rw.dagster.project import RwProject

    (tmp_path / "t.sql").write_text("CREATE TABLE t (k INT PRIMARY KEY, a INT);\nCREATE INDEX idx ON t (a);\n")
    with pytest.raises(ProgrammingError, match="t.sql: not supported in a SQL project: CREATE INDEX idx"):
        RwProject(tmp_path, plan_cache=None).objects
