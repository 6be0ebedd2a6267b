"""The DB-API surface: cursors, bulk inserts, barriers and refreshes, errors users can act on."""
from __future__ import annotations

import dataclasses
import datetime
import decimal

import pandas as pd
import pyarrow as pa
import pytest

import dagster_rw


def test_cursor_returns_plain_python_values_and_dbapi_description(conn):
    conn.execute("CREATE TABLE v (i INT PRIMARY KEY, b BOOLEAN, n NUMERIC(8,2), s VARCHAR, d DATE, "
                 "ts TIMESTAMP, tz TIMESTAMPTZ, iv INTERVAL, r REAL, f DOUBLE PRECISION)")
    cur = conn.execute("INSERT INTO v VALUES (1, true, 12.50, 'x', DATE '2024-02-29', "
                       "TIMESTAMP '2024-01-01 10:00:00.5', TIMESTAMPTZ '2024-01-01 10:00:00+02', "
                       "INTERVAL '1 day 2 hours', 1.5, 2.25), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    assert cur.rowcount == 2
    conn.execute("FLUSH")
    cur = conn.execute("SELECT * FROM v ORDER BY i")
    assert [d[0] for d in cur.description] == ["i", "b", "n", "s", "d", "ts", "tz", "iv", "r", "f"]
    assert all(len(d) == 7 for d in cur.description)
    first = cur.fetchone()
    assert first[:5] == (1, True, decimal.Decimal("12.50"), "x", datetime.date(2024, 2, 29))
    assert first[5] == datetime.datetime(2024, 1, 1, 10, 0, 0, 500000)
    assert first[6] == datetime.datetime(2024, 1, 1, 8, 0, tzinfo=datetime.UTC)
    assert first[7] == datetime.timedelta(days=1, hours=2)
    assert first[8:] == (1.5, 2.25)
    assert cur.fetchall() == [(2,) + (None,) * 9]
    assert cur.fetchone() is None


def test_bulk_insert_accepts_arrow_pandas_and_spark_dataframes(conn, spark):
    conn.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)")
    conn.execute("CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM t")
    assert conn.insert("t", pa.table({"id": [1, 2], "name": ["a", "b"]})) == 2
    assert conn.insert("t", pd.DataFrame({"id": [3], "name": ["c"]})) == 1
    assert conn.insert("t", spark.createDataFrame([(4, "d"), (1, "z")], "id bigint, name string")) == 2
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM t ORDER BY id").fetchall() == [(1, "z"), (2, "b"), (3, "c"), (4, "d")]
    assert conn.execute("SELECT n FROM c").fetchall() == [(4,)]


def test_dml_is_invisible_until_a_barrier_and_refresh(conn):
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT sum(v) AS total FROM t")
    conn.execute("INSERT INTO t VALUES (1, 10)")
    assert conn.execute("SELECT * FROM t").fetchall() == []
    epoch = conn.barrier()
    assert conn.execute("SELECT * FROM t").fetchall() == []  # sealed, not yet applied
    assert conn.refresh("t") == epoch
    assert conn.execute("SELECT * FROM t").fetchall() == [(1, 10)]
    assert conn.execute("SELECT * FROM s").fetchall() == [(None,)]  # the view has not moved
    status = {s["name"]: s for s in conn.status()}
    assert status["s"]["lag_epochs"] == 1 and status["t"]["lag_epochs"] == 0
    assert conn.refresh("s") == epoch
    assert conn.execute("SELECT * FROM s").fetchall() == [(10,)]


def test_lag_counts_data_not_applied_yet_not_epochs_others_moved_on(conn):
    conn.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW over_a AS SELECT count(*) AS n FROM a")
    conn.execute("CREATE MATERIALIZED VIEW over_b AS SELECT count(*) AS n FROM b")
    conn.execute("CREATE MATERIALIZED VIEW over_over_a AS SELECT n + 1 AS m FROM over_a")
    conn.execute("FLUSH")
    for i in range(3):  # epochs that only touch a, applied only by a
        conn.execute(f"INSERT INTO a VALUES ({i}, {i})")
        conn.barrier()
        conn.refresh("a")
    conn.execute("INSERT INTO b VALUES (1, 1)")
    newest = conn.barrier()  # sealed for b, applied by nobody
    status = {s["name"]: s for s in conn.status()}
    assert {n: status[n]["epoch"] for n in ["over_a", "over_b", "over_over_a"]} == dict.fromkeys(
        ["over_a", "over_b", "over_over_a"], newest - 4)
    # a applied its three epochs; what reads it has them still to apply, over_over_a through over_a
    assert status["a"]["lag_epochs"] == 0 and status["a"]["lag_seconds"] == 0
    assert status["over_a"]["lag_epochs"] == 3 and status["over_over_a"]["lag_epochs"] == 3
    assert status["over_a"]["lag_seconds"] >= status["b"]["lag_seconds"] >= 0
    # b's data sits in the newest epoch only: b and over_b are one epoch behind, not four
    assert status["b"]["lag_epochs"] == 1 and status["over_b"]["lag_epochs"] == 1
    conn.refresh("b")
    status = {s["name"]: s for s in conn.status()}
    assert status["b"]["lag_epochs"] == 0 and status["over_b"]["lag_epochs"] == 1
    conn.refresh("over_b")
    conn.refresh("over_a")
    status = {s["name"]: s for s in conn.status()}
    assert status["over_b"]["lag_epochs"] == 0 and status["over_a"]["lag_epochs"] == 0
    assert status["over_over_a"]["lag_epochs"] == 3  # over_a's change file now holds those epochs
    conn.execute("FLUSH")
    assert all(s["lag_epochs"] == 0 and s["lag_seconds"] == 0 for s in conn.status())


def test_a_view_created_after_unflushed_dml_starts_from_a_snapshot_that_holds_it(conn):
    # as in RisingWave, whose CREATE MATERIALIZED VIEW waits for a barrier of its own
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE TABLE other (x INT)")
    conn.execute("INSERT INTO t VALUES (1, 10), (2, 20)")
    conn.execute("INSERT INTO other VALUES (7)")
    before = conn.execute("SELECT count(*) FROM t").fetchall()
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT sum(v) AS total, count(*) AS n FROM t")
    assert before == [(0,)]  # DML alone is still invisible
    assert conn.execute("SELECT * FROM s").fetchall() == [(30, 2)]
    assert conn.execute("SELECT * FROM t ORDER BY id").fetchall() == [(1, 10), (2, 20)]
    # the barrier sealed the other table's DML too; that table advances at its next refresh
    assert {s["name"]: s["lag_epochs"] for s in conn.status()}["other"] == 1
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM other").fetchall() == [(7,)]
    # with nothing staged for its inputs, creating a view cuts no barrier
    epochs_before = {s["name"]: s["epoch"] for s in conn.status()}
    conn.execute("INSERT INTO other VALUES (8)")
    conn.execute("CREATE MATERIALIZED VIEW s2 AS SELECT max(v) AS top FROM t")
    assert conn.execute("SELECT * FROM s2").fetchall() == [(20,)]
    assert {s["name"]: s["epoch"] for s in conn.status()}["t"] == epochs_before["t"]


def test_implicit_flush_makes_every_dml_visible(conn):
    conn.execute("CREATE TABLE t (id INT)")
    conn.execute("SET RW_IMPLICIT_FLUSH TO true")
    conn.execute("INSERT INTO t VALUES (1), (1)")
    assert conn.execute("SELECT count(*) FROM t").fetchall() == [(2,)]


def test_unsupported_sql_names_the_construct_and_its_position(conn):
    conn.execute("CREATE TABLE t (a INT, b INT)")
    with pytest.raises(dagster_rw.ProgrammingError, match=r"window functions .*line 1, column \d+"):
        conn.execute("CREATE MATERIALIZED VIEW w AS SELECT a, ntile(2) OVER (ORDER BY b) FROM t")
    with pytest.raises(dagster_rw.ProgrammingError, match=r"LEFT JOIN without an equality condition .*line 1"):
        conn.execute("CREATE MATERIALIZED VIEW x AS SELECT t1.a FROM t t1 LEFT JOIN t t2 ON t1.a < t2.b")
    with pytest.raises(dagster_rw.ProgrammingError, match='column "nope" does not exist'):
        conn.execute("CREATE MATERIALIZED VIEW y AS SELECT nope FROM t")
    assert conn.execute("SHOW MATERIALIZED VIEWS").fetchall() == []


def test_constraint_and_dependency_errors(conn):
    conn.execute("CREATE TABLE t (a INT PRIMARY KEY, b INT)")
    conn.execute("CREATE TABLE log (a INT) APPEND ONLY")
    conn.execute("CREATE MATERIALIZED VIEW m AS SELECT a FROM t")
    with pytest.raises(dagster_rw.IntegrityError, match="depend"):
        conn.execute("DROP TABLE t")
    with pytest.raises(dagster_rw.IntegrityError, match="primary key"):
        conn.execute("INSERT INTO t VALUES (NULL, 1)")
    with pytest.raises(dagster_rw.ProgrammingError, match="APPEND ONLY"):
        conn.execute("DELETE FROM log")
    with pytest.raises(dagster_rw.ProgrammingError, match="already exists"):
        conn.execute("CREATE TABLE t (x INT)")
    conn.execute("DROP MATERIALIZED VIEW m")
    conn.execute("DROP TABLE t")
    assert conn.execute("SHOW TABLES").fetchall() == [("log",)]


def test_sql_functions_are_inlined_kept_in_the_catalog_and_guarded_while_called(warehouse):
    with dagster_rw.connect(warehouse) as conn:
        conn.execute("CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE SQL AS "
                     "$$SELECT length(s) - length(replace(s, c, ''))$$")
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR)")
        conn.execute("INSERT INTO t VALUES (1, 'banana'), (2, NULL)")
        conn.execute("CREATE MATERIALIZED VIEW m AS SELECT id, count_char(s, 'a') AS n FROM t")
        assert sorted(conn.execute("SELECT * FROM m").fetchall()) == [(1, 3), (2, None)]
        assert conn.execute("SELECT count_char('aXa', 'a') + 1").fetchall() == [(3,)]
        conn.execute("CREATE FUNCTION mid(a numeric(10,2), b numeric(10,2)) RETURNS numeric(10,2) RETURN (a + b) / 2")
        conn.execute("CREATE FUNCTION next_of(bigint) RETURNS bigint LANGUAGE SQL AS 'SELECT $1 + 1'")
        assert conn.execute("SHOW FUNCTIONS").fetchall() == [
            ("count_char", "s character varying, c character varying", "integer", "sql"),
            ("mid", "a numeric(10,2), b numeric(10,2)", "numeric(10,2)", "sql"),
            ("next_of", "bigint", "bigint", "sql")]
        assert conn.execute("SELECT mid(1.00, 2.25), next_of(41)").fetchall() == [(decimal.Decimal("1.63"), 42)]
        with pytest.raises(dagster_rw.ProgrammingError, match="unsupported type XML"):
            conn.execute("CREATE FUNCTION j(a int) RETURNS xml RETURN a")
        with pytest.raises(dagster_rw.ProgrammingError, match="already exists"):
            conn.execute("CREATE FUNCTION count_char(s varchar) RETURNS int RETURN 1")
        with pytest.raises(dagster_rw.ProgrammingError, match="takes 2 arguments, not 1"):
            conn.execute("SELECT count_char('a')")
        with pytest.raises(dagster_rw.ProgrammingError, match='column "x" does not exist'):
            conn.execute("CREATE FUNCTION f(a int) RETURNS int RETURN x + 1")
        with pytest.raises(dagster_rw.ProgrammingError, match="LANGUAGE python"):
            conn.execute("CREATE FUNCTION f(a int) RETURNS int LANGUAGE python AS $$def f(a): return a$$")
        with pytest.raises(dagster_rw.ProgrammingError, match="without FROM"):
            conn.execute("CREATE FUNCTION f(a int) RETURNS int AS 'SELECT id FROM t'")
    # another process plans the view from its SQL with the function from the catalog
    with dagster_rw.connect(warehouse) as conn:
        conn.execute("INSERT INTO t VALUES (3, 'aaa')")
        conn.execute("FLUSH")
        assert sorted(conn.execute("SELECT * FROM m").fetchall()) == [(1, 3), (2, None), (3, 3)]
        for statement in ("DROP FUNCTION count_char",
                          "CREATE OR REPLACE FUNCTION count_char(s varchar, c varchar) RETURNS int RETURN 0"):
            with pytest.raises(dagster_rw.IntegrityError, match="depend on it"):
                conn.execute(statement)
        conn.execute("DROP MATERIALIZED VIEW m")
        conn.execute("CREATE OR REPLACE FUNCTION count_char(s varchar, c varchar) RETURNS int RETURN 0")
        assert conn.execute("SELECT count_char('aa', 'a')").fetchall() == [(0,)]
        conn.execute("DROP FUNCTION count_char")
        conn.execute("DROP FUNCTION IF EXISTS count_char")
        with pytest.raises(dagster_rw.ProgrammingError, match="does not exist"):
            conn.execute("DROP FUNCTION count_char")


def test_explain_shows_operators_stream_keys_and_state(conn):
    conn.execute("CREATE TABLE orders (id INT PRIMARY KEY, item_id INT)")
    conn.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR)")
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN CREATE MATERIALIZED VIEW m AS SELECT i.name, count(*) FROM orders o JOIN items i "
        "ON o.item_id = i.id GROUP BY i.name").fetchall())
    assert "StreamHashJoin" in plan and "StreamHashAgg" in plan
    assert "stream key: [item_id, id, id]" in plan or "stream key: [item_id" in plan
    assert "per-group accumulators" in plan
    assert "on Spark: a change of at most 1,000,000 rows is broadcast" in plan  # how a Spark step joins
    assert conn.execute("SHOW MATERIALIZED VIEWS").fetchall() == []  # EXPLAIN creates nothing


def test_describe_lists_columns_and_key(conn):
    conn.execute("CREATE TABLE t (a INT, b VARCHAR, PRIMARY KEY (a))")
    assert conn.execute("DESCRIBE t").fetchall() == [
        ("a", "integer", False), ("b", "character varying", False), ("primary key", "a", None)]


def test_large_batch_reads_run_on_spark_with_the_same_answer(tmp_path, spark):
    wh = str(tmp_path / "wh")
    small = dagster_rw.connect(wh, spark=spark)
    small.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, v NUMERIC(10,2), ts TIMESTAMPTZ)")
    small.insert("t", pa.table({"id": list(range(50)), "g": [i % 4 for i in range(50)],
                                "v": pa.array([decimal.Decimal(i) / 4 for i in range(50)], pa.decimal128(10, 2)),
                                "ts": pa.array([datetime.datetime(2024, 1, 1, i % 24, tzinfo=datetime.UTC)
                                                for i in range(50)], pa.timestamp("us", tz="UTC"))}))
    small.execute("FLUSH")
    query = "SELECT g, count(*), sum(v), max(ts), 7 / 2 AS q FROM t GROUP BY g ORDER BY g"
    in_process = small.execute(query)
    on_spark = dagster_rw.connect(wh, spark=spark, engine="spark").execute(query)
    assert on_spark.fetchall() == in_process.fetchall()
    assert [d[0] for d in on_spark.description] == [d[0] for d in in_process.description] == \
        ["g", "count", "sum", "max", "q"]
    codes = [[d[1] for d in cur.description] for cur in (on_spark, in_process)]
    assert [c[:2] + c[3:] for c in codes] == [["INTEGER", "BIGINT", "TIMESTAMP WITH TIME ZONE", "BIGINT"]] * 2
    assert all(c[2].startswith("DECIMAL(") and c[2].endswith(",2)") for c in codes)  # precision is the engine's


def test_spark_steps_keep_timestamps_without_time_zone_naive(tmp_path, spark):
    """A TIMESTAMP column stepped and read on Spark comes back naive, as in-process; TIMESTAMPTZ UTC-aware."""
    results = {}
    for engine in ("spark", "duckdb"):
        conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine)
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP, tz TIMESTAMPTZ)")
        conn.execute("CREATE MATERIALIZED VIEW v AS SELECT id, ts + INTERVAL '1 hour' AS later, tz FROM t")
        conn.execute("INSERT INTO t VALUES (1, '2024-01-02 03:04:05', '2024-01-02 03:04:05+00'), (2, NULL, NULL)")
        conn.execute("FLUSH")
        cur = conn.execute("SELECT t.id, ts, later, t.tz FROM t JOIN v ON t.id = v.id ORDER BY t.id")
        results[engine] = (cur.fetchall(), [d[1] for d in cur.description])
    assert results["spark"] == results["duckdb"]
    assert results["spark"][0][0] == (1, datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.datetime(2024, 1, 2, 4, 4, 5),
                                      datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC))
    assert results["spark"][1] == ["INTEGER", "TIMESTAMP", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE"]


def test_every_kind_of_statement_has_a_handler():
    """The cursor carries out a statement through dbapi.HANDLERS, keyed by its class: a kind of
    statement the parser can make and no handler takes would fail only when first used."""
    from dagster_rw import dbapi
    from dagster_rw.sql import secret_statements, sink_statements, statements
    from dagster_rw.sql.dialect import Statement

    def subclasses(cls):
        return {k for sub in cls.__subclasses__() for k in {sub} | subclasses(sub)}

    defined = {c for m in (statements, sink_statements, secret_statements) for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, Statement) and c is not Statement}
    assert len(defined) == 16
    assert subclasses(Statement) | defined == set(dbapi.HANDLERS)
    assert all(callable(h) and h.__qualname__.startswith("Cursor.") for h in dbapi.HANDLERS.values())


def test_a_misspelt_option_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(dagster_rw.ProgrammingError,
                       match=r"unknown option 'compact_max_file' for connect\(\); the options are: .*compact_max_files"):
        dagster_rw.connect(str(tmp_path / "wh"), compact_max_file=4)
    assert not (tmp_path / "wh").exists()  # refused before the warehouse is opened
    with dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb", compact_max_files=4) as conn:
        assert conn.wh.options.compact_max_files == 4 and conn.wh.options["engine"] == "duckdb"
        with pytest.raises(dataclasses.FrozenInstanceError):
            conn.wh.options.engine = "spark"
    assert "secret" not in repr(dagster_rw.Options(aws_secret_access_key="secret"))
