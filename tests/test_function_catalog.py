"""SQL reaches the warehouse only: a call of a function outside the catalog (DuckDB's file, settings
and extension functions among them) is refused by name before anything runs, statements that reach
the host are refused by the parser, and DuckDB itself runs with external access off, so that even
SQL handed to it directly reads no file outside the warehouse."""
from __future__ import annotations

from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dagster_rw
from dagster_rw.engine.duck import DuckEngine, locked_connection
from dagster_rw.errors import ProgrammingError
from dagster_rw.sql import statements as st
from dagster_rw.sql.function_catalog import CATALOG, by_family

SECRET = "TOPSECRET-7f3a"


@pytest.fixture
def secret_file(tmp_path):
    """A file outside the warehouse whose content must never come back."""
    path = tmp_path / "secret.csv"
    path.write_text(f"name\n{SECRET}\n")
    return str(path)


@pytest.fixture
def loaded(conn):
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, content VARCHAR)")
    conn.execute("INSERT INTO t VALUES (1, 'a'), (2, 'bb')")
    conn.execute("FLUSH")
    return conn


@pytest.fixture
def engine_never_runs(loaded, monkeypatch):
    """The connection, with its in-process engine made to fail the test if a query reaches it."""
    def ran(*args, **kwargs):
        raise AssertionError(f"a refused statement reached the engine: {args[:1]}")

    for method in ("sql", "execute", "describe", "write_parquet"):
        monkeypatch.setattr(loaded.engine, method, ran)
    return loaded


def _refused(conn, sql: str) -> str:
    with pytest.raises(ProgrammingError) as e:
        conn.execute(sql)
    message = str(e.value)
    assert SECRET not in message
    return message


HIDDEN = {
    "FROM": "SELECT * FROM read_csv('{f}')",
    "FROM (text)": "SELECT * FROM read_text('/etc/hostname')",
    "INSERT ... SELECT": "INSERT INTO t SELECT 5, content FROM read_text('/etc/hostname')",
    "INSERT ... VALUES": "INSERT INTO t VALUES (6, getenv('HOME'))",
    "select list": "SELECT getenv('HOME')",
    "settings": "SELECT current_setting('home_directory')",
    "settings table": "SELECT * FROM duckdb_settings()",
    "glob": "SELECT * FROM glob('/etc/*')",
    "view": "CREATE MATERIALIZED VIEW v AS SELECT * FROM read_parquet('/x/*.parquet')",
    "table AS": "CREATE TABLE c AS SELECT * FROM read_csv('{f}')",
    "sink AS": "CREATE SINK s AS SELECT * FROM read_csv('{f}') WITH (connector = 'file', path = '/tmp/rw_sink')",
    "subquery": "SELECT * FROM t WHERE content IN (SELECT name FROM read_csv('{f}'))",
    "CTE": "WITH x AS (SELECT * FROM read_csv('{f}')) SELECT * FROM x",
    "view's CTE": "CREATE MATERIALIZED VIEW v AS WITH x AS (SELECT * FROM read_csv('{f}')) SELECT * FROM x",
    "CASE": "SELECT CASE WHEN id > 0 THEN getenv('HOME') ELSE content END FROM t",
    "window": "SELECT sum(id) OVER (PARTITION BY read_blob('{f}')) FROM t",
    "lateral": "SELECT * FROM t, LATERAL read_csv('{f}')",
    "join": "SELECT * FROM t JOIN read_csv('{f}') r ON true",
    "UPDATE": "UPDATE t SET content = getenv('HOME')",
    "DELETE": "DELETE FROM t WHERE content = current_setting('home_directory')",
    "EXPLAIN": "EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT * FROM read_csv('{f}')",
    "alias of a supported aggregate": "SELECT group_concat(content) FROM t",
    "IF": "SELECT if(id > 1, 'x', 'y') FROM t",
    "session keyword": "SELECT current_user",
    "a file as a Spark table": 'SELECT * FROM csv."/etc/hosts"',
    "DuckDB's own schema": "SELECT * FROM information_schema.tables",
}


@pytest.mark.parametrize("sql", list(HIDDEN.values()), ids=list(HIDDEN))
def test_a_function_outside_the_catalog_is_refused_before_anything_runs(engine_never_runs, secret_file, sql):
    conn = engine_never_runs
    before = conn.wh.catalog(reload=True)
    message = _refused(conn, sql.format(f=secret_file))
    assert "does not exist" in message
    after = conn.wh.catalog(reload=True)
    assert after.version == before.version and set(after.objects) == set(before.objects)


def test_the_error_names_the_function_and_its_argument_types_as_postgresql_does(loaded):
    assert _refused(loaded, "SELECT * FROM read_csv('/etc/passwd')").startswith(
        "function read_csv(unknown) does not exist (line 1, column 15)")
    assert _refused(loaded, "SELECT getenv(id, 2, 2.5, NULL, true, content::text) FROM t").startswith(
        "function getenv(integer, integer, numeric, unknown, boolean, character varying) does not exist")
    # a supported function with an argument count it does not take: the accepted forms are named
    message = _refused(loaded, "SELECT round(id, 1, 2) FROM t")
    assert message.startswith("function round(integer, integer, integer) does not exist")
    assert "round(numeric) | round(numeric, integer)" in message


def test_a_refused_statement_changes_nothing(loaded, secret_file):
    _refused(loaded, "INSERT INTO t SELECT 5, content FROM read_text('/etc/hostname')")
    _refused(loaded, f"INSERT INTO t SELECT 6, name FROM read_csv('{secret_file}')")
    _refused(loaded, f"CREATE MATERIALIZED VIEW v AS SELECT * FROM read_csv('{secret_file}')")
    _refused(loaded, f"CREATE TABLE c AS SELECT name FROM read_csv('{secret_file}')")
    loaded.execute("FLUSH")
    assert sorted(loaded.execute("SELECT id, content FROM t").fetchall()) == [(1, "a"), (2, "bb")]
    assert loaded.execute("SHOW MATERIALIZED VIEWS").fetchall() == []
    assert loaded.execute("SHOW TABLES").fetchall() == [("t",)]


@pytest.mark.parametrize("sql", [
    "COPY t TO '/tmp/t.csv'", "COPY (SELECT 1) TO '/tmp/one.parquet' (FORMAT parquet)", "ATTACH '/tmp/x.duckdb' AS x",
    "DETACH x", "INSTALL httpfs", "FORCE INSTALL httpfs", "LOAD httpfs", "LOAD '/tmp/ext.duckdb_extension'",
    "PRAGMA database_list", "EXPORT DATABASE '/tmp/export'", "IMPORT DATABASE '/tmp/export'", "CALL pragma_version()",
    "SET enable_external_access = true", "SET allowed_directories = ['/']", "SET memory_limit = '1GB'",
    "RESET enable_external_access", "USE memory",
])
def test_statements_that_reach_the_host_are_refused_by_the_parser(sql):
    with pytest.raises(ProgrammingError):
        st.parse(sql)


def test_the_settings_the_product_documents_are_accepted(conn):
    conn.execute("CREATE TABLE t (id INT)")
    conn.execute("SET RW_IMPLICIT_FLUSH TO true")
    conn.execute("SET streaming_parallelism TO 4")  # RisingWave's, accepted and ignored
    conn.execute("INSERT INTO t VALUES (1)")
    assert conn.execute("SELECT * FROM t").fetchall() == [(1,)]
    with pytest.raises(ProgrammingError, match='unrecognized configuration parameter "threads"'):
        conn.execute("SET threads TO 1")


def test_supported_functions_and_sql_functions_keep_working(loaded):
    conn = loaded
    conn.execute("CREATE FUNCTION shout(s varchar) RETURNS varchar LANGUAGE SQL AS $$SELECT upper(s) || '!'$$")
    # a SQL function of the warehouse may take a name DuckDB gives one of its own: it runs its body
    conn.execute("CREATE FUNCTION getenv(s varchar) RETURNS varchar LANGUAGE SQL RETURN lower(s)")
    conn.execute("""CREATE MATERIALIZED VIEW m AS
        SELECT id, shout(content) AS loud, getenv('HOME') AS home, length(content) AS n,
               coalesce(nullif(content, 'a'), 'none') AS c, round(id * 1.25, 1) AS r
        FROM t""")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT string_agg(content, ',' ORDER BY content DESC) AS all_ FROM t")
    conn.execute("CREATE MATERIALIZED VIEW g AS SELECT id, generate_series(1, id) AS k FROM t")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM m").fetchall()) == [
        (1, "A!", "home", 1, "none", Decimal("1.3")), (2, "BB!", "home", 2, "bb", Decimal("2.5"))]
    assert conn.execute("SELECT * FROM s").fetchall() == [("bb,a",)]
    assert sorted(conn.execute("SELECT id, k FROM g").fetchall()) == [(1, 1), (2, 1), (2, 2)]
    assert conn.execute("SELECT sum(g) FROM generate_series(1, 4) AS g").fetchall() == [(10,)]
    assert conn.execute("SELECT upper(content), rank() OVER (ORDER BY id DESC) FROM t ORDER BY id").fetchall() == [
        ("A", 2), ("BB", 1)]
    assert conn.execute("SELECT CAST(id AS varchar), extract(year FROM DATE '2024-05-06'), "
                        "substring('abcdef' FROM 2 FOR 3), position('c' IN 'abc') FROM t WHERE id = 1"
                        ).fetchall() == [("1", 2024, "bcd", 3)]


def test_a_sql_function_may_not_call_what_the_catalog_refuses_nor_take_a_supported_name(conn):
    with pytest.raises(ProgrammingError, match=r"function getenv\(unknown\) does not exist"):
        conn.execute("CREATE FUNCTION home() RETURNS varchar LANGUAGE SQL AS $$SELECT getenv('HOME')$$")
    with pytest.raises(ProgrammingError, match="name of a built-in function"):
        conn.execute("CREATE FUNCTION make_date(a int) RETURNS int LANGUAGE SQL RETURN a")  # a catalog name
    assert conn.execute("SHOW FUNCTIONS").fetchall() == []


def test_the_catalog_knows_its_functions_by_kind_and_arity():
    assert CATALOG["round"].min_args == 1 and CATALOG["round"].max_args == 2
    assert CATALOG["concat"].max_args is None
    assert {"scalar"} == set(CATALOG["upper"].kinds)
    assert {"aggregate", "window"} <= set(CATALOG["first_value"].kinds)
    assert {"generate_series", "unnest", "tumble", "hop"} <= {s.name for s in by_family()["set-returning"]}
    for refused in ("read_csv", "read_parquet", "read_text", "read_blob", "glob", "getenv", "current_setting",
                    "duckdb_settings", "read_json"):
        assert refused not in CATALOG


def test_refusal_happens_in_the_front_end_without_a_spark_session(warehouse, secret_file):
    started = []

    def session():
        started.append(True)
        raise AssertionError("a refused statement started Spark")

    with dagster_rw.connect(warehouse, spark=session, engine="spark") as conn:
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, content VARCHAR)")
        for sql in ("SELECT * FROM read_csv('{f}')", "CREATE MATERIALIZED VIEW v AS SELECT * FROM read_csv('{f}')",
                    "INSERT INTO t SELECT 5, content FROM read_text('/etc/hostname')", "SELECT getenv('HOME')",
                    "UPDATE t SET content = getenv('HOME')", "COPY t TO '/tmp/t.csv'",
                    'SELECT * FROM csv."/etc/hosts"'):
            _refused(conn, sql.format(f=secret_file))
        assert conn.execute("SHOW MATERIALIZED VIEWS").fetchall() == []
    assert started == []


# -- the second wall: DuckDB itself ----------------------------------------------------------------

def test_the_engines_duckdb_reads_no_file_outside_the_warehouse_even_when_called_directly(loaded, secret_file):
    conn = loaded
    conn.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n, max(length(content)) AS w FROM t")
    conn.execute("INSERT INTO t VALUES (3, 'ccc')")
    conn.execute("FLUSH")
    assert conn.execute("SELECT n, w FROM v").fetchall() == [(3, 3)]  # the engine's own files are read
    con = conn.engine.con
    for sql in (f"SELECT * FROM read_csv('{secret_file}')", "SELECT * FROM read_text('/etc/hostname')",
                "SELECT * FROM glob('/etc/*')", f"COPY (SELECT 1) TO '{secret_file}.out'", "INSTALL httpfs",
                "LOAD httpfs", f"ATTACH '{secret_file}.db' AS x"):
        with pytest.raises(duckdb.Error) as e:
            con.sql(sql).fetchall()
        assert SECRET not in str(e.value)
    for sql in ("SET enable_external_access = true", "SET allowed_directories = ['/']",
                "SET lock_configuration = false"):
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute(sql)
    conn.execute("INSERT INTO t VALUES (4, 'dddd')")
    conn.execute("FLUSH")
    assert conn.execute("SELECT n, w FROM v").fetchall() == [(4, 4)]


def test_a_bare_engine_and_a_writer_connection_reach_only_their_folders(tmp_path, secret_file):
    inside = tmp_path / "inside"
    inside.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), inside / "f.parquet")
    with pytest.raises(duckdb.Error):
        DuckEngine(threads=1).con.sql(f"SELECT * FROM read_csv('{secret_file}')").fetchall()
    con = locked_connection([str(inside)])
    assert con.sql(f"SELECT sum(a) FROM read_parquet('{inside / 'f.parquet'}')").fetchall() == [(3,)]
    con.execute(f"COPY (SELECT 1 AS b) TO '{inside / 'g.parquet'}' (FORMAT parquet)")
    for sql in (f"SELECT * FROM read_csv('{secret_file}')", f"SELECT * FROM read_parquet('{inside}/../secret.csv')",
                f"COPY (SELECT 1) TO '{tmp_path / 'outside.parquet'}' (FORMAT parquet)"):
        with pytest.raises(duckdb.Error):
            con.sql(sql).fetchall()
    # a folder whose name starts like an allowed one is another folder
    (tmp_path / "inside2").mkdir()
    pq.write_table(pa.table({"a": [9]}), tmp_path / "inside2" / "f.parquet")
    with pytest.raises(duckdb.Error):
        con.sql(f"SELECT * FROM read_parquet('{tmp_path / 'inside2' / 'f.parquet'}')").fetchall()
