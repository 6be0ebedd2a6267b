"""STRUCT columns: a table's struct columns, ROW(...) values, field access `(s).a` at any depth,
structs built in views, and aggregates grouped by a struct's fields; against DuckDB on random
workloads and on both paths; what is refused by name (a struct as a key). Structs in sources: test_source_nested."""
from __future__ import annotations

import pyarrow as pa
import pytest
from both_paths import run_on
from test_differential import _workload_test

import dagster_rw
from dagster_rw import types as sqltypes
from dagster_rw.errors import ProgrammingError

SETUP = [
    ("CREATE TABLE ts (id INT PRIMARY KEY, p STRUCT<a INT, b VARCHAR>, q STRUCT<r STRUCT<x INT>, l INT[]>)",
     "CREATE TABLE ts (id INT PRIMARY KEY, p STRUCT(a INT, b VARCHAR), q STRUCT(r STRUCT(x INT), l INT[]))"),
    ("INSERT INTO ts VALUES (1, ROW(1, 'x'), ROW(ROW(5), ARRAY[1, 2])), (2, ROW(2, NULL), NULL), "
     "(3, NULL, ROW(NULL, ARRAY[]::INT[])), (4, ROW(1, 'x'), ROW(ROW(NULL), NULL)), (5, ROW(NULL, 'y'), ROW(ROW(7), ARRAY[3]))",
     "INSERT INTO ts VALUES (1, ROW(1, 'x'), ROW(ROW(5), [1, 2])), (2, ROW(2, NULL), NULL), "
     "(3, NULL, ROW(NULL, []::INT[])), (4, ROW(1, 'x'), ROW(ROW(NULL), NULL)), (5, ROW(NULL, 'y'), ROW(ROW(7), [3]))"),
]
VIEWS = {
    "struct_fields": "SELECT t1.id, (ts.p).a AS a, (ts.p).b AS b, ((ts.q).r).x AS x, (ts.q).l AS l "
                     "FROM t1 JOIN ts ON t1.k = ts.id",
    "struct_kept": "SELECT t1.id, t1.v, ts.p, ts.q FROM t1 LEFT JOIN ts ON t1.k = ts.id",
    "struct_built": ("SELECT id, ROW(k, s) AS r, ROW(ROW(v), id) AS n FROM t1",
                     "SELECT id, {'f1': k, 'f2': s} AS r, {'f1': {'f1': v}, 'f2': id} AS n FROM t1"),
    "struct_of_aggregates": ("SELECT k, ROW(count(*), sum(v)) AS r FROM t1 GROUP BY k",
                             "SELECT k, {'f1': count(*), 'f2': sum(v)} AS r FROM t1 GROUP BY k"),
    "struct_grouped_by_field": "SELECT (ts.p).b AS b, count(*) AS n, sum(t1.v) AS sv, max((ts.p).a) AS ma "
                               "FROM t1 JOIN ts ON t1.k = ts.id GROUP BY (ts.p).b",
    "struct_filtered": "SELECT t1.id, t1.v FROM t1 JOIN ts ON t1.k = ts.id WHERE (ts.p).a > 1 OR ts.q IS NULL",
    "struct_compared": ("SELECT t1.id FROM t1 JOIN ts ON t1.k = ts.id WHERE ts.p = ROW(1, 'x')::STRUCT<a INT, b VARCHAR>",
                        "SELECT t1.id FROM t1 JOIN ts ON t1.k = ts.id WHERE ts.p = {'a': 1, 'b': 'x'}"),
    "struct_field_of_built": ("SELECT id, (ROW(v, s)).f2 AS s2 FROM t1 WHERE (ROW(v, k)).f1 > 2",
                              "SELECT id, s AS s2 FROM t1 WHERE v > 2"),
}

test_struct_views_match_duckdb = _workload_test(VIEWS, setup=SETUP)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_struct_views_on_both_paths(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS, setup=SETUP)
    conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine)
    cur = conn.execute("SELECT p, q FROM ts WHERE id = 1")
    assert [d[:2] for d in cur.description] == [  # the same type codes on both paths
        ("p", "STRUCT(a INTEGER, b VARCHAR)"), ("q", "STRUCT(r STRUCT(x INTEGER), l INTEGER[])")]
    assert cur.fetchall() == [({"a": 1, "b": "x"}, {"r": {"x": 5}, "l": [1, 2]})]


def test_type_names_round_trip():
    name = sqltypes.struct_name([("a", "integer"), ("B c", "struct<x varchar, y integer[]>")])
    assert name == 'struct<a integer, "B c" struct<x varchar, y integer[]>>'
    assert sqltypes.struct_fields(name) == [("a", "integer"), ("B c", "struct<x varchar, y integer[]>")]
    assert sqltypes.from_duckdb(sqltypes.duckdb_type(name)) == name
    assert sqltypes.arrow_type(name) == pa.struct([
        pa.field("a", pa.int32()), pa.field("B c", pa.struct([pa.field("x", pa.string()),
                                                             pa.field("y", pa.list_(pa.int32()))]))])
    assert sqltypes.display_name(name) == 'struct<a integer, "B c" struct<x character varying, y integer[]>>'


def test_insert_update_select_and_describe(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, s STRUCT<a INT, b VARCHAR>, n STRUCT<x STRUCT<y INT>>)")
    assert conn.execute("DESCRIBE t").fetchall()[:3] == [
        ("id", "integer", False), ("s", "struct<a integer, b character varying>", False),
        ("n", "struct<x struct<y integer>>", False)]
    conn.execute("INSERT INTO t VALUES (1, ROW(1, 'x'), ROW(ROW(5))), (2, NULL, ROW(NULL))")
    conn.insert("t", pa.table({"id": pa.array([3], pa.int32()),
                               "s": pa.array([{"a": 3, "b": "z"}], pa.struct([("a", pa.int32()), ("b", pa.string())])),
                               "n": pa.array([None], pa.struct([("x", pa.struct([("y", pa.int32())]))]))}))
    conn.execute("UPDATE t SET s = ROW(10, 'y') WHERE id = 1")
    conn.execute("CREATE MATERIALIZED VIEW v AS SELECT id, s, (s).a AS a, ((n).x).y AS y FROM t")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM v").fetchall()) == [
        (1, {"a": 10, "b": "y"}, 10, 5), (2, None, None, None), (3, {"a": 3, "b": "z"}, 3, None)]
    assert conn.execute("SELECT (s).b FROM t WHERE id = 3").fetchall() == [("z",)]
    assert conn.execute("SELECT ROW(1, 'a') AS r").fetchall() == [({"f1": 1, "f2": "a"},)]
    assert conn.execute("DESCRIBE v").fetchall()[1] == ("s", "struct<a integer, b character varying>", False)
    # a row of the wrong shape is refused, naming the table, and nothing accepted is lost
    with pytest.raises(dagster_rw.DataError, match="'t'"):
        conn.execute("INSERT INTO t VALUES (4, ROW('not a number', 'x'), NULL)")
    conn.execute("FLUSH")
    assert [r[0] for r in sorted(conn.execute("SELECT id FROM v").fetchall())] == [1, 2, 3]


@pytest.mark.parametrize("query, refused", [
    ("SELECT s, count(*) AS n FROM t GROUP BY s", "a struct column (s, struct<a integer, b varchar>) as a GROUP BY key"),
    ("SELECT DISTINCT s FROM t", "a struct column (s, struct<a integer, b varchar>)"),
    ("SELECT count(DISTINCT s) AS n FROM t", "as the argument of COUNT(DISTINCT ...)"),
    ("SELECT max(s) AS m FROM t", "as the argument of MAX"),
    ("SELECT id, s FROM t ORDER BY s LIMIT 2", "as an ORDER BY key"),
    ("SELECT a.id FROM t a JOIN t b ON a.s = b.s", "as a join key"),
])
def test_a_struct_as_a_key_is_refused_by_name(tmp_path, query, refused):
    conn = dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, s STRUCT<a INT, b VARCHAR>)")
    with pytest.raises(ProgrammingError, match="'v'") as e:
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    assert refused in str(e.value)
