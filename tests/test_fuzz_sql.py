"""Random SQL from a small grammar (expressions, casts, function calls, joins, aggregates, DDL and
DML over a few tables, plus malformed text), one statement per example on one warehouse: every
statement works or raises a dagster_rw.Error subclass, never another exception, and a statement
that fails changes nothing (catalog, staged DML, table and view contents)."""
from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagster_rw
from dagster_rw.errors import Error

SCHEMA = [
    "CREATE TABLE t1 (a INT PRIMARY KEY, b INT, c VARCHAR)",
    "CREATE TABLE t2 (x INT, y DOUBLE PRECISION, z VARCHAR)",
    "INSERT INTO t1 VALUES (1, 10, 'p'), (2, NULL, 'q'), (3, -7, NULL), (4, 2147483647, 'it''s')",
    "INSERT INTO t2 VALUES (1, 1.5, 'p'), (3, -0.0, 'r'), (NULL, NULL, NULL), (4, 1e300, '')",
    "CREATE MATERIALIZED VIEW base AS SELECT b, count(*) AS n FROM t1 GROUP BY b",
    "FLUSH",
]
COLUMNS = {"t1": ["a", "b", "c"], "t2": ["x", "y", "z"]}
TYPES = ["INT", "BIGINT", "SMALLINT", "VARCHAR", "TEXT", "DOUBLE PRECISION", "REAL", "NUMERIC(10, 2)", "BOOLEAN",
         "DATE", "TIMESTAMP", "TIMESTAMPTZ", "INTERVAL", "BYTEA", "INT[]", "JSONB", "NOTATYPE", "DECIMAL(3)"]
FUNCTIONS = ["abs", "lower", "upper", "length", "round", "coalesce", "substr", "greatest", "least", "nullif",
             "concat", "trim", "mod", "power", "sqrt", "ln", "floor", "ceil", "sign", "md5", "repeat", "replace",
             "split_part", "to_char", "date_trunc", "extract_year", "now", "random", "read_csv", "glob", "getenv",
             "read_text", "current_setting", "pg_sleep", "nonexistent_fn", "lpad", "position", "strpos"]
AGGREGATES = ["count", "sum", "min", "max", "avg", "stddev_samp", "string_agg", "bool_and", "array_agg",
              "median", "count_if"]
KEYWORDS = ["SELECT", "FROM", "WHERE", "GROUP", "BY", "(", ")", ",", "'", '"', ";", "*", "JOIN", "ON", "CREATE",
            "TABLE", "VIEW", "MATERIALIZED", "INSERT", "INTO", "VALUES", "DROP", "UPDATE", "SET", "DELETE",
            "CAST", "AS", "::", "t1", "t2", "a", "x", "1", "-", "+", "/", "NULL", "--", "/*", "$1", "\\", "\x00",
            "é", "🙂", "E'\\x00'", "COPY", "ATTACH", "PRAGMA", "SECRET", "SINK", "WITH", "FLUSH", "SHOW", "EXPLAIN"]


def literals():
    return st.one_of(
        st.integers(-2**63 - 5, 2**63 + 5).map(str),
        st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6).map(
            lambda s: "'" + s.replace("'", "''") + "'"),
        st.sampled_from(["NULL", "TRUE", "FALSE", "'NaN'", "'2024-02-30'", "'1 day'", "0", "-0.0", "''",
                         "'12abc'", "9223372036854775808", "1e400", "DATE '2024-01-01'",
                         "INTERVAL '1 hour'", "ARRAY[1, 2]", "'{\"k\": 1}'"]),
    )


def expressions(columns):
    base = st.one_of(literals(), st.sampled_from(columns))

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "||", "=", "<>", "<", ">=", "AND", "OR",
                                              "LIKE", "IS DISTINCT FROM"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(inner, st.sampled_from(TYPES)).map(lambda t: f"CAST({t[0]} AS {t[1]})"),
            st.tuples(inner, st.sampled_from(TYPES)).map(lambda t: f"{t[0]}::{t[1]}"),
            st.tuples(st.sampled_from(FUNCTIONS), st.lists(inner, max_size=3)).map(
                lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(inner, inner, inner).map(lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"),
            inner.map(lambda e: f"NOT {e}"),
            inner.map(lambda e: f"-({e})"),
            inner.map(lambda e: f"{e} IS NULL"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]} IN ({t[1]}, 1)"),
        )

    return st.recursive(base, extend, max_leaves=6)


@st.composite
def selects(draw):
    table = draw(st.sampled_from(["t1", "t2", "base"]))
    cols = {"t1": COLUMNS["t1"], "t2": COLUMNS["t2"], "base": ["b", "n"]}[table]
    kind = draw(st.sampled_from(["plain", "agg", "join"]))
    if kind == "join":
        other = "t2" if table != "t2" else "t1"
        ocols = COLUMNS.get(other, [])
        allcols = [f"l.{c}" for c in cols] + [f"r.{c}" for c in ocols]
        on = draw(expressions(allcols))
        exprs = draw(st.lists(expressions(allcols), min_size=1, max_size=3))
        join = draw(st.sampled_from(["JOIN", "LEFT JOIN", "FULL JOIN", "CROSS JOIN"]))
        on_clause = "" if join == "CROSS JOIN" else f" ON {on}"
        return f"SELECT {', '.join(exprs)} FROM {table} l {join} {other} r{on_clause}"
    exprs = draw(st.lists(expressions(cols), min_size=1, max_size=3))
    where = draw(st.one_of(st.none(), expressions(cols)))
    sql = f"SELECT {', '.join(exprs)}"
    if kind == "agg":
        agg = draw(st.sampled_from(AGGREGATES))
        arg = draw(expressions(cols))
        group = draw(st.sampled_from(cols))
        sql = f"SELECT {group}, {agg}({arg}) FROM {table}"
        sql += f" WHERE {where}" if where else ""
        sql += f" GROUP BY {group}"
        if draw(st.booleans()):
            sql += f" HAVING {draw(expressions(cols))}"
        return sql
    sql += f" FROM {table}" + (f" WHERE {where}" if where else "")
    if draw(st.booleans()):
        sql += f" ORDER BY {draw(st.sampled_from(cols))} LIMIT {draw(st.integers(-1, 3))}"
    return sql


@st.composite
def statements(draw):
    kind = draw(st.sampled_from(["select", "select", "view", "insert", "update", "delete", "ddl", "garbage",
                                 "mangled", "flush"]))
    if kind == "select":
        return draw(selects())
    if kind == "view":
        name = draw(st.sampled_from(["v1", "v2", "v3", "base"]))
        return f"CREATE MATERIALIZED VIEW {name} AS {draw(selects())}"
    if kind == "insert":
        table = draw(st.sampled_from(["t1", "t2"]))
        rows = draw(st.lists(st.lists(literals(), min_size=2, max_size=4), min_size=1, max_size=3))
        return f"INSERT INTO {table} VALUES " + ", ".join("(" + ", ".join(r) + ")" for r in rows)
    if kind == "update":
        table = draw(st.sampled_from(["t1", "t2"]))
        cols = COLUMNS[table]
        return (f"UPDATE {table} SET {draw(st.sampled_from(cols))} = {draw(expressions(cols))} "
                f"WHERE {draw(expressions(cols))}")
    if kind == "delete":
        table = draw(st.sampled_from(["t1", "t2"]))
        return f"DELETE FROM {table} WHERE {draw(expressions(COLUMNS[table]))}"
    if kind == "ddl":
        return draw(st.sampled_from([
            "DROP MATERIALIZED VIEW v1", "DROP MATERIALIZED VIEW IF EXISTS v2", "DROP TABLE t1", "DROP TABLE nope",
            "CREATE TABLE t1 (a INT)", "CREATE TABLE w (a INT, a INT)", "CREATE TABLE w2 (a NOTATYPE)",
            "CREATE TABLE w3 (a INT PRIMARY KEY, PRIMARY KEY (a))", "DROP MATERIALIZED VIEW base",
            "CREATE TABLE \"\" (a INT)", "CREATE TABLE " + "x" * 70 + " (a INT)", "SHOW TABLES", "SHOW NOPE",
            "DESCRIBE t1", "DESCRIBE nope", "EXPLAIN SELECT 1", "SET implicit_flush = 'maybe'", "SET nope = 1",
            "CREATE SINK s FROM nope WITH (connector = 'file')", "DROP SINK nope", "DROP SECRET nope",
            "CREATE SECRET s AS 'x'", "SHOW CREATE SINK nope", "CREATE FUNCTION f(int) RETURNS int AS 'select $1'",
            "COPY t1 TO '/tmp/x'", "ATTACH '/tmp/x.db'", "SELECT * FROM read_csv('/etc/passwd')",
        ]))
    if kind == "garbage":
        return " ".join(draw(st.lists(st.sampled_from(KEYWORDS), min_size=1, max_size=12)))
    if kind == "mangled":  # a valid statement cut short or with a character dropped
        sql = draw(selects())
        cut = draw(st.integers(0, len(sql)))
        return sql[:cut] if draw(st.booleans()) else sql[:cut] + sql[cut + 1:]
    return "FLUSH"


def snapshot(conn) -> tuple:
    """What a failed statement must leave as it was: the catalog's objects and functions, staged
    DML, every table's and view's rows. (Staged DML is flushed first: a CREATE MATERIALIZED VIEW
    seals what was accepted before it, as RisingWave's barrier does, even when its back-fill fails.
    A CREATE taken back leaves a newer catalog version with the same contents.)"""
    wh = conn.wh
    if conn.pending_inputs():
        conn.execute("FLUSH")
    cat = wh.catalog(reload=True)
    objects = sorted((o.name, o.kind, o.sql) for o in cat.objects.values())
    contents = {}
    for name, kind, _ in objects:
        if kind != "sink":
            contents[name] = collections.Counter(map(repr, conn.execute(f"SELECT * FROM {name}").fetchall()))
    return objects, sorted(cat.functions), conn.pending_inputs(), contents


OUTCOMES: collections.Counter = collections.Counter()


def test_random_statements_work_or_fail_cleanly_and_a_failure_changes_nothing(tmp_path_factory):
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("fuzz") / "wh"))
    for sql in SCHEMA:
        conn.execute(sql)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(statements())
    def run(sql):
        before = snapshot(conn)
        try:
            conn.execute(sql).fetchall() if sql.lstrip().upper().startswith(("SELECT", "SHOW", "DESCRIBE", "EXPLAIN")) \
                else conn.execute(sql)
        except Error as e:
            OUTCOMES[type(e).__name__] += 1
            assert snapshot(conn) == before, f"{sql!r} failed ({e}) but changed the warehouse"
            return
        except Exception as e:  # noqa: BLE001 - the point: nothing but dagster_rw errors
            pytest.fail(f"{sql!r} raised {type(e).__module__}.{type(e).__name__}: {e}")
        OUTCOMES["ok"] += 1

    try:
        run()
    finally:
        conn.close()
        print(f"\nfuzz outcomes: {dict(OUTCOMES)}")
    assert OUTCOMES["ok"] > 10 and sum(v for k, v in OUTCOMES.items() if k != "ok") > 10
