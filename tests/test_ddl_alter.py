"""ALTER ... RENAME TO: the object keeps its rows and epoch, what reads it keeps updating, the new
name is what SHOW lists and what every definition says; what cannot be done is refused by name."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.errors import IntegrityError, ProgrammingError

TABLES = ["CREATE TABLE t1 (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE t3 (k INT, x INT)"]
# view -> query, over the oracle's fixed names t1 and t3
VIEWS = {
    "j": "SELECT t1.id, t1.v, t3.x FROM t1 JOIN t3 ON t1.k = t3.k",
    "agg": "SELECT k, count(*) AS n, sum(v) AS s FROM t1 GROUP BY k",
    "top": "SELECT k, max(s) AS m FROM agg GROUP BY k",  # a view over a view
}

operations = st.one_of(
    st.tuples(st.just("t1"), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(-5, 5)),
                                      min_size=1, max_size=4)),
    st.tuples(st.just("t3"), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9)), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("rename"), st.sampled_from(["t1", "t3", "j", "agg", "top"])),
    st.tuples(st.just("flush"), st.none()),
)


def _values(rows) -> str:
    return ", ".join("(" + ", ".join(str(v) for v in r) + ")" for r in rows)


def run_renames(path: str, ops, engine: str = "duckdb", spark=None) -> dict[str, str]:
    """Apply `ops`, renaming objects as they come; after every FLUSH each view, read by its
    current name, equals DuckDB's answer over the same rows. Returns the final names."""
    conn = dagster_rw.connect(path, engine=engine, spark=spark)
    oracle = Oracle()
    names = {n: n for n in ["t1", "t3", *VIEWS]}
    for ddl in TABLES:
        conn.execute(ddl)
        oracle.execute(ddl)
    for view, query in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {view} AS {query}")
        oracle.execute(f"CREATE VIEW {view} AS {query}")
    kinds = {"t1": "TABLE", "t3": "TABLE"}

    def check():
        for view in VIEWS:
            assert_same(conn.execute(f"SELECT * FROM {names[view]}").fetchall(),
                        oracle.rows(f"SELECT * FROM {view}"), f"{view} (now {names[view]}, {engine})")
        for table in ("t1", "t3"):
            assert_same(conn.execute(f"SELECT * FROM {names[table]}").fetchall(),
                        oracle.rows(f"SELECT * FROM {table}"), f"{table} (now {names[table]})")

    for n, (what, arg) in enumerate(ops):
        if what == "t1":
            conn.execute(f"INSERT INTO {names['t1']} VALUES {_values(arg)}")
            for row in arg:  # (a later row of the batch replaces an earlier one of its key)
                oracle.upsert("t1", _values([row]))
        elif what == "t3":
            conn.execute(f"INSERT INTO {names['t3']} VALUES {_values(arg)}")
            oracle.execute(f"INSERT INTO t3 VALUES {_values(arg)}")
        elif what == "delete":
            conn.execute(f"DELETE FROM {names['t1']} WHERE id = {arg}")
            oracle.execute(f"DELETE FROM t1 WHERE id = {arg}")
        elif what == "rename":
            new = f"{arg}_r{n}"
            conn.execute(f"ALTER {kinds.get(arg, 'MATERIALIZED VIEW')} {names[arg]} RENAME TO {new}")
            names[arg] = new
        else:
            conn.execute("FLUSH")
            check()
    conn.execute("FLUSH")
    check()
    shown = {r[0] for r in conn.execute("SHOW TABLES").fetchall() + conn.execute("SHOW MATERIALIZED VIEWS").fetchall()}
    assert shown == set(names.values())
    conn.close()
    return names


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(ops=st.lists(operations, min_size=4, max_size=14))
def test_views_over_renamed_objects_keep_updating_and_match_duckdb(tmp_path_factory, ops):
    run_renames(str(tmp_path_factory.mktemp("wh")), ops)


SPARK_OPS = [("t1", [(1, 1, 5), (2, 2, 3)]), ("t3", [(1, 7), (2, 8)]), ("rename", "t1"), ("flush", None),
             ("t1", [(1, 2, 4), (3, 1, 1)]), ("rename", "agg"), ("delete", 2), ("rename", "t3"),
             ("t3", [(1, 9)]), ("flush", None)]


def test_views_over_renamed_objects_keep_updating_on_spark(tmp_path, spark):
    run_renames(str(tmp_path / "wh"), SPARK_OPS, engine="spark", spark=spark)


def test_a_renamed_object_survives_reconnecting_and_its_old_name_is_free(warehouse):
    names = run_renames(warehouse, [("t1", [(1, 1, 5)]), ("t3", [(1, 2)]), ("rename", "t1"), ("rename", "j")])
    conn = dagster_rw.connect(warehouse)
    conn.execute("INSERT INTO t1_r2 VALUES (4, 1, 6)")
    conn.execute("CREATE TABLE t1 (id INT PRIMARY KEY, k INT, v INT)")  # the old name, a new object
    conn.execute("INSERT INTO t1 VALUES (4, 1, 100)")
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT id, v, x FROM {names['j']}").fetchall()) == [(1, 5, 2), (4, 6, 2)]
    assert conn.execute("SELECT * FROM t1").fetchall() == [(4, 1, 100)]
    new, renamed = conn.wh.get("t1"), conn.wh.get("t1_r2")
    assert new.key_folder != renamed.key_folder  # the new object's files never meet the renamed one's
    assert conn.wh.get(names["j"]).sql.startswith(f"CREATE MATERIALIZED VIEW {names['j']} AS SELECT t1_r2.id")
    conn.execute(f"DROP MATERIALIZED VIEW {names['j']}")
    conn.execute("DROP TABLE t1")
    conn.execute("FLUSH")
    assert conn.execute("SELECT k, n, s FROM agg").fetchall() == [(1, 2, 11)]
    conn.close()


def test_a_sink_into_a_renamed_table_keeps_writing_and_sinks_rename(conn):
    conn.execute("CREATE TABLE orders (id INT PRIMARY KEY, qty INT)")
    conn.execute("CREATE TABLE latest (id INT PRIMARY KEY, qty INT)")
    conn.execute("CREATE SINK copy INTO latest AS SELECT id, qty FROM orders WHERE qty > 0")
    conn.execute("INSERT INTO orders VALUES (1, 5), (2, 0)")
    conn.execute("FLUSH")
    conn.execute("ALTER TABLE latest RENAME TO newest")
    conn.execute("ALTER TABLE orders RENAME TO purchases")
    conn.execute("ALTER SINK copy RENAME TO mirror")
    conn.execute("INSERT INTO purchases VALUES (3, 7)")
    conn.execute("FLUSH")
    conn.execute("FLUSH")  # (what the sink staged in the first is applied by the second, if not already)
    assert sorted(conn.execute("SELECT * FROM newest").fetchall()) == [(1, 5), (3, 7)]
    assert conn.execute("SHOW SINKS").fetchall() == [("mirror",)]
    assert "INTO newest AS SELECT id, qty FROM purchases" in conn.wh.get("mirror").sql
    with pytest.raises(IntegrityError, match="mirror"):
        conn.execute("DROP TABLE newest")
    conn.execute("DROP SINK mirror")
    assert [o.name for o in conn.wh.catalog().objects.values()] == ["purchases", "newest"]


def test_renames_that_cannot_be_done_are_refused_by_name(conn):
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE TABLE u (id INT)")
    conn.execute("CREATE MATERIALIZED VIEW v AS SELECT w.id FROM (SELECT id FROM u) AS t JOIN t AS w ON w.id = t.id")
    for sql, message in [
        ("ALTER TABLE t RENAME TO u", 'relation "u" already exists'),
        ("ALTER TABLE v RENAME TO x", '"v" is not a table; use ALTER MATERIALIZED VIEW'),
        ("ALTER MATERIALIZED VIEW nope RENAME TO x", 'materialized view "nope" does not exist'),
        ("ALTER TABLE t RENAME TO x", 'the definition of "v" reads it, and it also uses the name \'t\''),
        ("ALTER TABLE t OWNER TO bob", "not supported: ALTER TABLE ... OWNER TO"),
        ("ALTER VIEW v RENAME TO x", "not supported: ALTER VIEW"),
    ]:
        with pytest.raises(ProgrammingError, match=message.replace("(", r"\(").replace(".", r"\.")):
            conn.execute(sql)
    assert {o.name for o in conn.wh.catalog().objects.values()} == {"t", "u", "v"}
    conn.execute('ALTER TABLE u RENAME TO "Mixed Case"')
    assert conn.wh.get("v").sql.endswith('FROM (SELECT id FROM "Mixed Case") AS t JOIN t AS w ON w.id = t.id')
    conn.execute("""INSERT INTO "Mixed Case" VALUES (1), (2)""")
    conn.execute("INSERT INTO t VALUES (2, 0)")
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM v").fetchall() == [(2,)]


def test_a_project_declaring_the_new_names_finds_the_renamed_objects(tmp_path, warehouse):
    """The Dagster asset key is the object's name: once the SQL files say the new names (the
    definitions as the warehouse rewrote them), deploying creates nothing and the assets are the
    renamed objects, rows and all."""
    from dagster_rw.dagster import DagsterRwTranslator, RwProject
    from dagster_rw.dagster.deploy import deploy

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "shop.sql").write_text("CREATE TABLE orders (id INT PRIMARY KEY, qty INT);\n"
                                     "CREATE MATERIALIZED VIEW total AS SELECT sum(qty) AS n FROM orders;\n")
    conn = dagster_rw.connect(warehouse)
    assert deploy(conn, RwProject(folder, plan_cache=None)) == ["orders", "total"]
    conn.execute("INSERT INTO orders VALUES (1, 2), (2, 3)")
    conn.execute("FLUSH")
    conn.execute("ALTER TABLE orders RENAME TO purchases")
    conn.execute("ALTER MATERIALIZED VIEW total RENAME TO purchased")
    (folder / "shop.sql").write_text(f"{conn.wh.get('purchases').sql};\n{conn.wh.get('purchased').sql};\n")
    project = RwProject(folder, plan_cache=None)
    assert deploy(conn, project) == []
    keys = {DagsterRwTranslator().get_asset_key(project.get(n)).to_user_string() for n in project.objects}
    assert keys == {"purchases", "purchased"}
    assert conn.wh.get("purchased").sql == "CREATE MATERIALIZED VIEW purchased AS SELECT sum(qty) AS n FROM purchases"
    conn.execute("INSERT INTO purchases VALUES (3, 4)")
    conn.execute("FLUSH")
    assert conn.execute("SELECT n FROM purchased").fetchall() == [(9,)]
    conn.close()


column_ops = st.one_of(
    st.tuples(st.just("insert"), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.integers(0, 6)),
    st.tuples(st.just("update"), st.tuples(st.integers(0, 6), st.integers(0, 9))),
    st.tuples(st.just("add"), st.sampled_from(["INT", "VARCHAR", "DOUBLE PRECISION", "INT DEFAULT 7",
                                               "VARCHAR DEFAULT 'd' || 'e'", "DOUBLE PRECISION DEFAULT 2.5"])),
    st.tuples(st.just("drop"), st.integers(0, 5)),
    st.tuples(st.just("flush"), st.none()),
)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(ops=st.lists(column_ops, min_size=3, max_size=12), keyed=st.booleans())
def test_added_and_dropped_columns_match_duckdb(tmp_path_factory, ops, keyed):
    run_columns(str(tmp_path_factory.mktemp("wh")), ops, keyed)


def test_added_and_dropped_columns_match_duckdb_on_spark(tmp_path, spark):
    ops = [("insert", [(1, 1), (2, 2)]), ("flush", None), ("add", "INT DEFAULT 7"), ("insert", [(3, 3), (1, 4)]),
           ("drop", 0), ("update", (2, 5)), ("add", "VARCHAR"), ("insert", [(4, 6)]), ("flush", None)]
    run_columns(str(tmp_path / "wh"), ops, True, engine="spark", spark=spark)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(ops=st.lists(column_ops, min_size=3, max_size=12), keyed=st.booleans())
def test_columns_added_and_dropped_under_readers_match_duckdb(tmp_path_factory, ops, keyed):
    run_columns(str(tmp_path_factory.mktemp("wh")), ops, keyed, readers=True)


def test_columns_added_and_dropped_under_readers_on_spark(tmp_path, spark):
    ops = [("insert", [(1, 1), (2, 2)]), ("flush", None), ("add", "INT DEFAULT 7"), ("insert", [(3, 3), (1, 4)]),
           ("drop", 0), ("update", (2, 5)), ("add", "VARCHAR"), ("insert", [(4, 6)]), ("flush", None)]
    run_columns(str(tmp_path / "wh"), ops, True, engine="spark", spark=spark, readers=True)


# views reading t while its columns change: they name t's first two columns, which stay
READERS = {
    "r_rows": "SELECT id, a FROM t WHERE id > 0",
    "r_groups": "SELECT a % 3 AS g, count(*) AS n, sum(id) AS s FROM t GROUP BY a % 3",
    "r_joined": "SELECT t.id, t.a, u.w FROM t JOIN u ON t.id = u.k",
}
# views with a `*` over t inside their query, created while t has (id, a): they keep those columns
# whatever is added and dropped, their stars written out. {t} is t, and for DuckDB t's first two
# columns under t's name
STAR_READERS = {
    "r_sub": "SELECT * FROM (SELECT * FROM {t} WHERE id > 0) s",
    "r_cte": "WITH c AS (SELECT * FROM {t}) SELECT c.*, u.w FROM c JOIN u ON c.id = u.k",
    "r_union": "SELECT * FROM {t} WHERE id < 3 UNION ALL SELECT t.* FROM {t} WHERE id > 4",
    "r_in": "SELECT * FROM u WHERE k IN (SELECT id FROM (SELECT * FROM {t} WHERE a > 2) q)",
    "r_exists": "SELECT * FROM u WHERE EXISTS (SELECT * FROM {t} WHERE t.id = u.k)",
    "r_mixed": "SELECT * FROM {t} JOIN (SELECT * FROM u) s ON t.id = s.k",
}


def run_columns(path: str, ops, keyed: bool, engine: str = "duckdb", spark=None, readers: bool = False) -> None:
    """ADD COLUMN (its DEFAULT or NULL in the rows there) and DROP COLUMN, between DML of one epoch
    and across epochs; the table, and a view created over it afterwards, equal DuckDB's. The last
    INSERT names the key alone: the other columns take their DEFAULT. With `readers`, views read
    the table (and a join with another) throughout and equal DuckDB's after every FLUSH, and
    dropping a column they read is refused by name."""
    conn = dagster_rw.connect(path, engine=engine, spark=spark)
    oracle = Oracle()
    ddl = f"CREATE TABLE t (id INT{' PRIMARY KEY' if keyed else ''}, a INT DEFAULT 3)"
    conn.execute(ddl)
    oracle.execute(ddl)
    columns = ["id", "a"]  # (an added column holds its position number, cast to its type)
    if readers:
        for sql in ("CREATE TABLE u (k INT PRIMARY KEY, w INT)", "INSERT INTO u VALUES (1, 10), (2, 20), (4, 40)"):
            conn.execute(sql)
            oracle.execute(sql)
        for name, query in READERS.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        for name, query in STAR_READERS.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {query.format(t='t')}")

    def check():
        assert_same(conn.execute("SELECT * FROM t").fetchall(), oracle.rows("SELECT * FROM t"), f"t {columns}")
        for name, query in (READERS.items() if readers else ()):
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(query), f"{name} {columns}")
        for name, query in (STAR_READERS.items() if readers else ()):
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(),
                        oracle.rows(query.format(t="(SELECT id, a FROM t) AS t")), f"{name} {columns}")

    for n, (what, arg) in enumerate(ops):
        if what == "insert":
            for key, value in arg:
                names = ", ".join(columns)
                values = ", ".join(str(key) if c == "id" else f"CAST({value} AS {'VARCHAR' if c.startswith('s') else 'INT'})"
                                   if c != "a" else str(value) for c in columns)
                conn.execute(f"INSERT INTO t ({names}) VALUES ({values})")
                if keyed:
                    oracle.db.execute(f"INSERT OR REPLACE INTO t ({names}) VALUES ({values})")
                else:
                    oracle.execute(f"INSERT INTO t ({names}) VALUES ({values})")
        elif what == "delete":
            conn.execute(f"DELETE FROM t WHERE id = {arg}")
            oracle.execute(f"DELETE FROM t WHERE id = {arg}")
        elif what == "update" and "a" in columns:
            conn.execute(f"UPDATE t SET a = {arg[1]} WHERE id = {arg[0]}")
            oracle.execute(f"UPDATE t SET a = {arg[1]} WHERE id = {arg[0]}")
        elif what == "add":
            name = f"{'s' if arg.startswith('VARCHAR') else 'c'}{n}"
            conn.execute(f"ALTER TABLE t ADD COLUMN {name} {arg}")
            oracle.execute(f"ALTER TABLE t ADD COLUMN {name} {arg}")
            columns.append(name)
        elif what == "drop" and len(columns) > 2:
            kept = 2 if readers else 1  # (the readers read a)
            if kept >= len(columns):
                continue
            name = columns[kept + arg % (len(columns) - kept)]
            conn.execute(f"ALTER TABLE t DROP COLUMN {name}")
            oracle.execute(f"ALTER TABLE t DROP COLUMN {name}")
            columns.remove(name)
        elif what == "flush":
            conn.execute("FLUSH")
            check()
    conn.execute("FLUSH")
    check()
    conn.execute("CREATE MATERIALIZED VIEW v AS SELECT * FROM t WHERE id > 1")
    conn.execute("INSERT INTO t (id) VALUES (5)")
    if keyed:  # the new row replaces the old one whole (its other columns their DEFAULT or NULL)
        oracle.execute("DELETE FROM t WHERE id = 5")
    oracle.execute("INSERT INTO t (id) VALUES (5)")
    conn.execute("FLUSH")
    assert_same(conn.execute("SELECT * FROM v").fetchall(), oracle.rows("SELECT * FROM t WHERE id > 1"), "v")
    # a reader selecting all of t's columns keeps the columns it had, its `*` written out, wherever
    # it is in the query (here in a WITH query and a branch of a UNION ALL)
    kept = ", ".join(columns)
    conn.execute("CREATE MATERIALIZED VIEW w AS WITH c AS (SELECT * FROM t) "
                 "SELECT * FROM (SELECT * FROM c WHERE id > 1) s UNION ALL SELECT t.* FROM t WHERE id <= 1")
    conn.execute("ALTER TABLE t ADD COLUMN late INT DEFAULT 1")
    oracle.execute("ALTER TABLE t ADD COLUMN late INT DEFAULT 1")
    assert "*" not in conn.wh.catalog().get("v").sql
    assert "(SELECT * FROM c WHERE id > 1) s" in conn.wh.catalog().get("w").sql  # (a star over c is kept)
    conn.execute("INSERT INTO t (id) VALUES (7)")  # (the workloads' keys are 0 to 6, and 5 above)
    oracle.execute("INSERT INTO t (id) VALUES (7)")
    conn.execute("FLUSH")
    assert_same(conn.execute("SELECT * FROM v").fetchall(), oracle.rows(f"SELECT {kept} FROM t WHERE id > 1"), "v kept")
    assert_same(conn.execute("SELECT * FROM w").fetchall(), oracle.rows(f"SELECT {kept} FROM t"), "w kept")
    columns.append("late")
    if readers:
        with pytest.raises(ProgrammingError, match=r'DROP COLUMN: "r_\w+" reads .t., and its definition does not plan'):
            conn.execute("ALTER TABLE t DROP COLUMN a")
        check()
    conn.close()


def test_stars_over_the_table_are_written_out_where_they_are(conn):
    """Each `*` over the altered table, in a subquery, a WITH query, a set operation's branch or a
    subquery in WHERE, becomes the columns it stood for, qualified by its FROM item; a `*` over
    other FROM items is kept (as `alias.*` beside the table's columns); the rest of the text stays,
    and a view that plans the same without it keeps its definition."""
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)")
    conn.execute("CREATE TABLE u (k INT PRIMARY KEY, w INT)")
    conn.execute("INSERT INTO t VALUES (1, 5), (2, 6)")
    conn.execute("INSERT INTO u VALUES (1, 10), (3, 30)")
    views = {  # name: (query, as written out)
        "s": ("SELECT * FROM (SELECT * FROM t WHERE id > 0) q",
              "SELECT * FROM (SELECT t.id, t.a FROM t WHERE id > 0) q"),
        "c": ("WITH c AS (SELECT * FROM t WHERE a > 5) SELECT * FROM c",
              "WITH c AS (SELECT t.id, t.a FROM t WHERE a > 5) SELECT * FROM c"),
        "i": ("SELECT * FROM t INTERSECT SELECT x.* FROM t AS x",
              "SELECT t.id, t.a FROM t INTERSECT SELECT x.id, x.a FROM t AS x"),
        "m": ('SELECT *, 1 AS one FROM u LEFT JOIN "t" ON u.k = t.id',
              'SELECT u.*, t.id, t.a, 1 AS one FROM u LEFT JOIN "t" ON u.k = t.id'),
        "e": ("SELECT * FROM u WHERE EXISTS (SELECT * FROM t WHERE t.id = u.k)", None),  # (kept: it plans the same)
    }
    for name, (query, _) in views.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    conn.execute("FLUSH")
    before = {name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall()) for name in views}
    conn.execute("ALTER TABLE t ADD COLUMN b INT DEFAULT 7")
    for name, (query, written) in views.items():
        assert conn.wh.get(name).sql == f"CREATE MATERIALIZED VIEW {name} AS {written or query}"
    conn.execute("ALTER TABLE t DROP COLUMN b")
    conn.execute("FLUSH")
    assert {name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall()) for name in views} == before


@pytest.mark.parametrize("reader, shape", [
    ("CREATE MATERIALIZED VIEW v AS SELECT * FROM (SELECT * FROM t JOIN u USING (k)) q",
     "over a join USING or NATURAL"),
    ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t NATURAL JOIN u", "over a join USING or NATURAL"),
    ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t, (SELECT 1 AS z)", "over t beside a FROM item without an alias"),
    ("CREATE MATERIALIZED VIEW v AS SELECT * EXCEPT (a) FROM t", "with EXCEPT"),
    ("CREATE MATERIALIZED VIEW v AS WITH c AS CHANGELOG FROM t SELECT * FROM c", "in a query with a CHANGELOG"),
    ("CREATE INDEX v ON t (k)", "an index without INCLUDE holds every column of the table"),
])
def test_stars_that_cannot_be_written_out_are_refused_by_name(conn, reader, shape):
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, a INT)")
    conn.execute("CREATE TABLE u (k INT PRIMARY KEY, w INT)")
    conn.execute(reader)
    for alter, what in (("ADD COLUMN b INT", "ADD COLUMN"), ("DROP COLUMN a", "DROP COLUMN")):
        with pytest.raises(ProgrammingError, match=rf'ALTER TABLE t {what} on .t.: the columns of "v", which reads '
                                                   rf"it, would change: .*{shape}"):
            conn.execute(f"ALTER TABLE t {alter}")
    assert [c.name for c in conn.wh.get("t").columns] == ["id", "k", "a"]


def test_a_renamed_source_keeps_its_position_and_reads_each_file_once(tmp_path, conn):
    """A file source's position (the files its epochs took) moves with its name: after the rename
    it reads the new files only, and a view over it keeps counting each record once."""
    from test_file_source import json_lines, posix, write_whole

    files = tmp_path / "in"
    files.mkdir()
    write_whole(str(files / "a.json"), json_lines([{"id": i, "k": i % 2} for i in range(6)]))
    conn.execute(f"CREATE SOURCE s (id INT, k INT) {posix(files)} FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM s GROUP BY k")
    conn.execute("FLUSH")
    conn.execute("ALTER SOURCE s RENAME TO events")
    assert conn.execute("SHOW SOURCES").fetchall() == [("events",)]
    write_whole(str(files / "b.json"), json_lines([{"id": i, "k": 1} for i in range(6, 9)]))
    conn.execute("FLUSH")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM per_k").fetchall()) == [(0, 3), (1, 6)]
    assert conn.wh.get("per_k").sql.endswith("FROM events GROUP BY k")
    with pytest.raises(ProgrammingError, match="use ALTER SOURCE"):
        conn.execute("ALTER TABLE events RENAME TO e2")


def test_defaults_fill_what_an_insert_leaves_out(conn):
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT DEFAULT 5, s VARCHAR DEFAULT 'x' || 'y', "
                 "at TIMESTAMP DEFAULT now())")
    conn.execute("INSERT INTO t (id) VALUES (1)")
    conn.execute("INSERT INTO t VALUES (2, 7)")  # without a column list: the first columns
    conn.execute("INSERT INTO t (id, s) VALUES (3, NULL)")  # a NULL written is kept
    conn.insert("t", pa.table({"id": pa.array([4], pa.int32())}))
    conn.execute("ALTER TABLE t ADD COLUMN z DOUBLE PRECISION DEFAULT 1.5")  # the rows there get it too
    conn.execute("INSERT INTO t (id) VALUES (5)")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT id, n, s, at IS NOT NULL, z FROM t").fetchall()) == [
        (1, 5, "xy", True, 1.5), (2, 7, "xy", True, 1.5), (3, 5, None, True, 1.5), (4, 5, "xy", True, 1.5),
        (5, 5, "xy", True, 1.5)]


@pytest.mark.parametrize("ddl, error", [
    ("CREATE TABLE b (a INT, c INT DEFAULT a + 1)", r"DEFAULT a \+ 1 of b.c"),
    ("CREATE TABLE b (a INT DEFAULT (SELECT 1))", r"DEFAULT \(SELECT 1\) of b.a"),
    ("CREATE TABLE b (a INT DEFAULT read_csv('x'))", r"function read_csv\(unknown\) does not exist"),
    ("CREATE TABLE b (a INT DEFAULT 'zz')", "DEFAULT of b.a: Conversion Error"),
    ("ALTER TABLE t ADD COLUMN q SMALLINT DEFAULT 100000", "DEFAULT of t.q: Conversion Error"),
    ("ALTER TABLE t ADD COLUMN q INT NOT NULL", "NOT NULL in ALTER TABLE t ADD COLUMN"),
])
def test_defaults_that_cannot_be_computed_are_refused_when_declared(conn, ddl, error):
    conn.execute("CREATE TABLE t (id INT)")
    with pytest.raises(dagster_rw.Error, match=error):
        conn.execute(ddl)


def test_another_connection_reads_the_table_in_its_new_columns(tmp_path):
    """A connection that planned the readers before another one dropped and added columns plans
    them again (its plans are keyed by the inputs' columns) and keeps them right."""
    path = str(tmp_path / "wh")
    first = dagster_rw.connect(path, engine="duckdb")
    first.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR)")
    first.execute("CREATE MATERIALIZED VIEW v AS SELECT a % 2 AS g, count(*) AS n, max(id) AS m FROM t GROUP BY a % 2")
    first.execute("INSERT INTO t VALUES (1, 1, 'x'), (2, 2, 'y')")
    first.execute("FLUSH")
    other = dagster_rw.connect(path, engine="duckdb")
    other.execute("ALTER TABLE t DROP COLUMN b")
    other.execute("ALTER TABLE t ADD COLUMN c INT DEFAULT 5")
    other.execute("INSERT INTO t (id, a) VALUES (3, 3)")
    other.execute("DELETE FROM t WHERE id = 2")
    other.close()
    first.execute("FLUSH")  # its plan of v read t's old columns
    assert sorted(first.execute("SELECT * FROM t").fetchall()) == [(1, 1, 5), (3, 3, 5)]
    assert sorted(first.execute("SELECT * FROM v").fetchall()) == [(1, 2, 3)]
