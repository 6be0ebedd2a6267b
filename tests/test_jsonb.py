"""JSONB columns: each value stored in PostgreSQL's one form, compared with PostgreSQL itself on
random documents; views that keep, compare, group and count jsonb values, against DuckDB on
random workloads and on both paths; and what is refused by name."""
from __future__ import annotations

import json

import psycopg
import pytest
from both_paths import run_on
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_target import PgSchema
from pg_target import connect as pg_connect
from test_differential import _workload_test

import dagster_rw
from dagster_rw import jsonb

# the same documents spelled differently (key order, spacing, a duplicate key): equal as jsonb. The
# oracle's table holds each document's stored form and, beside it, what the views' jsonb operators
# give for it (checked against PostgreSQL by test_oracle_columns_are_postgresqls)
DOCS = ['{"b":[1,2.50],"a":null}', '{ "a" : null, "b" : [1, 2.50], "a": null }',
        '[true, "x\\ty", {"long": 1e2, "k": -0.5}]', 'null']
ORACLE_ROWS = [  # j, j -> 'b', j #>> '{b,1}', jsonb_typeof(j), j @> '{"b": [2.5]}'
    ('{"a": null, "b": [1, 2.50]}', "[1, 2.50]", "2.50", "object", True),
    ('{"a": null, "b": [1, 2.50]}', "[1, 2.50]", "2.50", "object", True),
    ('[true, "x\\ty", {"k": -0.5, "long": 100}]', None, None, "array", False),
    ("null", None, None, "null", False),
]


def _sql(v) -> str:
    return "NULL" if v is None else str(v).upper() if isinstance(v, bool) else "'" + v.replace("'", "''") + "'"


SETUP = [
    ("CREATE TABLE tj (id INT PRIMARY KEY, j JSONB)",
     "CREATE TABLE tj (id INT PRIMARY KEY, j VARCHAR, b VARCHAR, b1 VARCHAR, t VARCHAR, c BOOLEAN)"),
    ("INSERT INTO tj VALUES " + ", ".join(f"({i}, {_sql(d)})" for i, d in enumerate(DOCS)) + f", ({len(DOCS)}, NULL)",
     "INSERT INTO tj VALUES " + ", ".join(f"({i}, {', '.join(_sql(v) for v in row)})" for i, row in enumerate(ORACLE_ROWS))
     + f", ({len(DOCS)}, NULL, NULL, NULL, NULL, NULL)"),
]
VIEWS = {
    "jsonb_joined": ("SELECT t1.id, tj.j FROM t1 JOIN tj ON t1.k = tj.id",
                     "SELECT t1.id, tj.j FROM t1 JOIN tj ON t1.k = tj.id"),
    "jsonb_grouped": ("SELECT tj.j, count(*) AS n, sum(t1.v) AS sv FROM t1 JOIN tj ON t1.k = tj.id GROUP BY tj.j",
                      "SELECT tj.j, count(*) AS n, sum(t1.v) AS sv FROM t1 JOIN tj ON t1.k = tj.id GROUP BY tj.j"),
    "jsonb_compared": ("""SELECT t1.id, t1.v FROM t1 JOIN tj ON t1.k = tj.id WHERE tj.j = '{"b": [1, 2.50], "a": null}'::jsonb""",
                       """SELECT t1.id, t1.v FROM t1 JOIN tj ON t1.k = tj.id WHERE tj.j = '{"a": null, "b": [1, 2.50]}'"""),
    "jsonb_counted": ("SELECT count(tj.j) AS n, count(DISTINCT tj.j) AS d FROM t1 LEFT JOIN tj ON t1.k = tj.id",
                      "SELECT count(tj.j) AS n, count(DISTINCT tj.j) AS d FROM t1 LEFT JOIN tj ON t1.k = tj.id"),
    "jsonb_as_text": ("SELECT t1.id, tj.j::varchar AS t FROM t1 JOIN tj ON t1.k = tj.id WHERE tj.j IS NOT NULL",
                      "SELECT t1.id, tj.j AS t FROM t1 JOIN tj ON t1.k = tj.id WHERE tj.j IS NOT NULL"),
    "jsonb_read": ("SELECT t1.id, tj.j -> 'b' AS b, tj.j #>> '{b,1}' AS b1, jsonb_typeof(tj.j) AS t "
                   "FROM t1 JOIN tj ON t1.k = tj.id",
                   "SELECT t1.id, tj.b, tj.b1, tj.t FROM t1 JOIN tj ON t1.k = tj.id"),
    "jsonb_contained": ("""SELECT t1.id, t1.v FROM t1 JOIN tj ON t1.k = tj.id WHERE tj.j @> '{"b": [2.5]}'::jsonb""",
                        "SELECT t1.id, t1.v FROM t1 JOIN tj ON t1.k = tj.id WHERE tj.c"),
    "jsonb_built": ("SELECT t1.id, jsonb_build_object('v', t1.v, 'j', tj.j, 'b', t1.v > 3) AS o "
                    "FROM t1 JOIN tj ON t1.k = tj.id",
                    """SELECT t1.id, '{"b": ' || coalesce(CASE WHEN t1.v > 3 THEN 'true' WHEN t1.v <= 3 THEN 'false' END,
                       'null') || ', "j": ' || coalesce(tj.j, 'null') || ', "v": ' || coalesce(CAST(t1.v AS VARCHAR), 'null')
                       || '}' AS o FROM t1 JOIN tj ON t1.k = tj.id"""),
    "jsonb_aggregated": ("SELECT t1.k, jsonb_agg(t1.v ORDER BY t1.id) AS a, jsonb_agg(t1.s ORDER BY t1.id) AS s "
                         "FROM t1 GROUP BY t1.k",
                         """SELECT t1.k, '[' || string_agg(coalesce(CAST(t1.v AS VARCHAR), 'null'), ', ' ORDER BY t1.id)
                            || ']' AS a, '[' || string_agg(coalesce('"' || t1.s || '"', 'null'), ', ' ORDER BY t1.id)
                            || ']' AS s FROM t1 GROUP BY t1.k"""),
    "jsonb_elements": ("SELECT t1.id, jsonb_array_elements_text(tj.j -> 'b') AS e FROM t1 JOIN tj ON t1.k = tj.id",
                       "SELECT t1.id, unnest(CASE WHEN tj.b IS NOT NULL THEN ['1', '2.50'] END) AS e "
                       "FROM t1 JOIN tj ON t1.k = tj.id"),
    "jsonb_read_functions": ("SELECT t1.id, jsonb_array_length(tj.j -> 'b') AS n, "
                             "jsonb_extract_path_text(tj.j, 'b', '1') AS b1 FROM t1 JOIN tj ON t1.k = tj.id",
                             "SELECT t1.id, CASE WHEN tj.b IS NOT NULL THEN 2 END AS n, tj.b1 "
                             "FROM t1 JOIN tj ON t1.k = tj.id"),
    "jsonb_keys": ("SELECT t1.id, jsonb_object_keys(tj.j) AS key FROM t1 JOIN tj ON t1.k = tj.id",
                   "SELECT t1.id, unnest(CASE WHEN tj.t = 'object' THEN ['a', 'b'] END) AS key "
                   "FROM t1 JOIN tj ON t1.k = tj.id"),
    "jsonb_by_member": ("SELECT tj.j #>> '{b,1}' AS b1, count(*) AS n, max(t1.v) AS m FROM t1 JOIN tj ON t1.k = tj.id "
                        "GROUP BY tj.j #>> '{b,1}'",
                        "SELECT tj.b1, count(*) AS n, max(t1.v) AS m FROM t1 JOIN tj ON t1.k = tj.id GROUP BY tj.b1"),
}


def _changed(doc: str) -> tuple:
    """What the view jsonb_changed's operators give for one of DOCS (dagster_rw.jsonb's functions;
    checked against PostgreSQL by test_changed_oracle_is_postgresqls)."""
    d = jsonb.normalize(doc)
    return (jsonb.concat(d, '["x"]'), jsonb.delete_key(d, "a"), jsonb.delete_path(d, '["b", "0"]'),
            jsonb.exists(d, "a"), jsonb.exists_any(d, '["b", "z"]'),
            jsonb.insert(d, json.dumps({"path": ["b", "1"], "after": True}), '"y"'), jsonb.pretty(d))


CHANGED_SQL = ("""(j || '["x"]')::text""", "(j - 'a')::text", "(j #- '{b,0}')::text", "j ? 'a'", "j ?| ARRAY['b', 'z']",
               """jsonb_insert(j, '{b,1}', '"y"', true)::text""", "jsonb_pretty(j)")
VIEWS["jsonb_changed"] = (
    """SELECT t1.id, tj.j || '["x"]' AS c, tj.j - 'a' AS d, tj.j #- '{b,0}' AS p, tj.j ? 'a' AS e,
       tj.j ?| ARRAY['b', 'z'] AS ea, jsonb_insert(tj.j, '{b,1}', '"y"', true) AS ins, jsonb_pretty(tj.j) AS pr,
       jsonb_build_array(t1.v, t1.s) AS arr, to_jsonb(t1.v) AS tv, tj.j || to_jsonb(t1.s) AS cs
       FROM t1 JOIN tj ON t1.k = tj.id""",
    """SELECT t1.id, x.c, x.d, x.p, x.e, x.ea, x.ins, x.pr,
       '[' || coalesce(CAST(t1.v AS VARCHAR), 'null') || ', ' || coalesce('"' || t1.s || '"', 'null') || ']' AS arr,
       CAST(t1.v AS VARCHAR) AS tv, CASE t1.s WHEN 'a' THEN x.ca WHEN 'b' THEN x.cb WHEN 'c' THEN x.cc END AS cs
       FROM t1 JOIN tj ON t1.k = tj.id LEFT JOIN (VALUES """
    + ", ".join(f"({i}, {', '.join(_sql(v) for v in _changed(d))}, "
                + ", ".join(_sql(jsonb.concat(jsonb.normalize(d), json.dumps(s))) for s in "abc") + ")"
                for i, d in enumerate(DOCS))
    + ") AS x(id, c, d, p, e, ea, ins, pr, ca, cb, cc) ON x.id = tj.id")

test_jsonb_views_match_duckdb = _workload_test(VIEWS, setup=SETUP)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_jsonb_views_on_both_paths(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS, setup=SETUP)


# -- the stored form is PostgreSQL's ---------------------------------------------------------------

_numbers = st.one_of(
    st.integers(-10**20, 10**20).map(str),
    st.decimals(min_value=-10**15, max_value=10**15, allow_nan=False, allow_infinity=False).map(lambda d: format(d, "f")),
    st.tuples(st.integers(-999, 999), st.integers(0, 3), st.integers(-4, 4)).map(
        lambda t: f"{t[0]}.{'0' * t[1]}5e{t[2]}"),
)
_strings = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


def _document(leaves, keys=_strings):
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(keys, inner), max_size=4).map(
            lambda kvs: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in kvs) + "}"),
    ), max_leaves=12)


_leaves = st.one_of(st.just("null"), st.just("true"), st.just("false"), _numbers, _strings.map(json.dumps))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(_document(_leaves), min_size=1, max_size=20))
def test_stored_form_is_postgresqls_text(texts):
    pg = _postgres()
    try:
        for text in texts:
            try:
                theirs = pg.execute("SELECT %s::jsonb::text", (text,)).fetchone()[0]
            except psycopg.errors.DataError:  # (a \u0000 in a string)
                with pytest.raises(dagster_rw.DataError, match="invalid input syntax for type json"):
                    jsonb.normalize(text)
                continue
            assert jsonb.normalize(text) == theirs, text
    finally:
        pg.close()


def test_fixed_documents_against_postgresql():
    docs = ['{"b":1,"a":2,"b":3}', '{"aaa":1,"b":2,"cc":3}', '[1e2, 1.50, -0, 0.000, 1E-3, 12345678901234567890]',
            '"tab\\there \\u00e9 \\u0001 \\/"', '{"": {}, " ": []}', '  null ']
    pg = _postgres()
    try:
        for text in docs:
            assert jsonb.normalize(text) == pg.execute("SELECT %s::jsonb::text", (text,)).fetchone()[0], text
    finally:
        pg.close()


def test_oracle_columns_are_postgresqls():
    pg = _postgres()
    try:
        for doc, row in zip(DOCS, ORACLE_ROWS):
            theirs = pg.execute("""SELECT j::text, (j -> 'b')::text, j #>> '{b,1}', jsonb_typeof(j), j @> '{"b": [2.5]}'
                                   FROM (SELECT %s::jsonb AS j) d""", (doc,)).fetchone()
            assert tuple(theirs) == row, doc
    finally:
        pg.close()


_keys = st.sampled_from(["a", "b", "", "long key", "é"])
_paths = st.lists(st.one_of(_keys, st.integers(-3, 3).map(str)), max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(st.tuples(_document(_leaves), _document(_leaves), st.one_of(_keys, st.integers(-3, 3)), _paths),
                     min_size=1, max_size=10))
def test_operators_are_postgresqls(docs):
    pg = _postgres()
    try:
        for doc, other, key, path in docs:
            try:
                pg.execute("SELECT %s::jsonb, %s::jsonb", (doc, other))
            except psycopg.errors.DataError:  # (a \u0000 in a string)
                continue
            array = "{" + ",".join(f'"{p}"' for p in path) + "}"
            theirs = pg.execute(
                "SELECT (d -> %s)::text, d ->> %s, (d #> %s)::text, d #>> %s, d @> o, jsonb_typeof(d) "
                "FROM (SELECT %s::jsonb AS d, %s::jsonb AS o) x", (key, key, array, array, doc, other)).fetchone()
            d, o, k = jsonb.normalize(doc), jsonb.normalize(other), json.dumps(key)
            ours = (jsonb.get(d, k), jsonb.get_text(d, k), jsonb.path(d, array), jsonb.path_text(d, array),
                    jsonb.contains(d, o), jsonb.typeof(d))
            assert ours == tuple(theirs), (doc, other, key, path)
            keys = [str(p) for p in path]
            theirs = pg.execute(
                "SELECT jsonb_extract_path(d, VARIADIC %s)::text, jsonb_extract_path_text(d, VARIADIC %s), "
                "jsonb_strip_nulls(d)::text, CASE WHEN jsonb_typeof(d) = 'array' THEN jsonb_array_length(d) END, "
                "CASE WHEN jsonb_typeof(d) = 'object' THEN ARRAY(SELECT jsonb_object_keys(d)) END "
                "FROM (SELECT %s::jsonb AS d) x", (keys, keys, doc)).fetchone()
            ours = (jsonb.extract_path(d, json.dumps(keys)), jsonb.extract_path_text(d, json.dumps(keys)),
                    jsonb.strip_nulls(d), jsonb.array_length(d), jsonb.object_keys(d))
            assert ours == tuple(theirs), (doc, keys)
            if jsonb.typeof(d) == "array":
                elements = pg.execute("SELECT array_agg(e::text ORDER BY n), array_agg(t ORDER BY n) FROM "
                                      "jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS x(e, n), "
                                      "jsonb_array_elements_text(%s::jsonb) WITH ORDINALITY AS y(t, m) WHERE n = m",
                                      (doc, doc)).fetchone()
                assert (jsonb.elements(d), jsonb.elements_text(d)) == (elements[0] or [], elements[1] or []), doc
    finally:
        pg.close()


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(st.tuples(_document(_leaves), _paths, _document(_leaves), st.booleans()), min_size=1, max_size=10))
def test_jsonb_set_is_postgresqls(docs):
    """jsonb_set(doc, path, new, create_if_missing) against PostgreSQL's on random documents and
    paths; where PostgreSQL fails (a scalar document, a step into an array that is not an
    integer), ours gives NULL."""
    pg = _postgres()
    try:
        for doc, path, new, create in docs:
            try:
                pg.execute("SELECT %s::jsonb, %s::jsonb", (doc, new))
            except psycopg.errors.DataError:  # (a \u0000 in a string)
                pg.rollback()
                continue
            array = "{" + ",".join(f'"{p}"' for p in path) + "}"
            try:
                theirs = pg.execute("SELECT jsonb_set(%s::jsonb, %s, %s::jsonb, %s)::text",
                                    (doc, array, new, create)).fetchone()[0]
            except (psycopg.errors.InvalidParameterValue, psycopg.errors.InvalidTextRepresentation):
                pg.rollback()
                theirs = None
            spec = json.dumps({"path": path, "create": create})
            assert jsonb.set_path(jsonb.normalize(doc), spec, jsonb.normalize(new)) == theirs, (doc, path, new, create)
    finally:
        pg.close()


def _pg_value(pg, sql: str, params=()):
    """One value PostgreSQL computes, or None where it fails the query on the value (as a view gives
    NULL there)."""
    try:
        return pg.execute(sql, params).fetchone()[0]
    except (psycopg.errors.InvalidParameterValue, psycopg.errors.InvalidTextRepresentation):
        return None


_some_keys = st.one_of(_keys, _strings, st.sampled_from(["0", "1", "-1"]))


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(st.tuples(_document(_leaves, _some_keys), _document(_leaves, _some_keys), _some_keys,
                               st.integers(-4, 4), st.lists(st.one_of(st.none(), _some_keys), max_size=3), _paths,
                               st.booleans(), _strings),
                     min_size=1, max_size=10))
def test_changing_operators_are_postgresqls(docs):
    """`||`, `-` (a key, an index, keys), `#-`, `?`, `?|`, `?&`, jsonb_insert, jsonb_pretty,
    to_jsonb and jsonb_build_array against PostgreSQL's on random documents (keys drawn so that
    they are often there); where PostgreSQL fails (a scalar document, a member jsonb_insert would
    replace, a step into an array that is not an integer), ours gives NULL."""
    pg = _postgres()
    try:
        for doc, other, key, index, keys, path, after, text in docs:
            try:
                pg.execute("SELECT %s::jsonb, %s::jsonb, %s::text", (doc, other, text))
            except psycopg.errors.DataError:  # (a \u0000 in a string)
                continue
            d, o = jsonb.normalize(doc), jsonb.normalize(other)
            array = "{" + ",".join('"' + p.replace('"', '\\"') + '"' for p in path) + "}"
            args = {"d": doc, "o": other, "k": key, "i": index, "ks": keys, "p": array, "a": after, "t": text}
            for sql, ours in [
                ("(%(d)s::jsonb || %(o)s::jsonb)::text", jsonb.concat(d, o)),
                ("(%(d)s::jsonb - %(k)s::text)::text", jsonb.delete_key(d, key)),
                ("(%(d)s::jsonb - %(i)s::int)::text", jsonb.delete_index(d, index)),
                ("(%(d)s::jsonb - %(ks)s::text[])::text", jsonb.delete_keys(d, json.dumps(keys))),
                ("(%(d)s::jsonb #- %(p)s::text[])::text", jsonb.delete_path(d, json.dumps(path))),
                ("%(d)s::jsonb ? %(k)s::text", jsonb.exists(d, key)),
                ("%(d)s::jsonb ?| %(ks)s::text[]", jsonb.exists_any(d, json.dumps(keys))),
                ("%(d)s::jsonb ?& %(ks)s::text[]", jsonb.exists_all(d, json.dumps(keys))),
                ("jsonb_insert(%(d)s::jsonb, %(p)s::text[], %(o)s::jsonb, %(a)s)::text",
                 jsonb.insert(d, json.dumps({"path": path, "after": after}), o)),
                ("jsonb_pretty(%(d)s::jsonb)", jsonb.pretty(d)),
                ("to_jsonb(%(t)s::text)::text", jsonb.value(jsonb.string(text))),
                ("to_jsonb(%(i)s::int)::text", jsonb.value(str(index))),
                ("jsonb_build_array(%(t)s::text, %(d)s::jsonb, %(i)s::int, NULL::int, %(a)s)::text",
                 jsonb.build_array([jsonb.string(text), d, str(index), None, "true" if after else "false"])),
            ]:
                assert ours == _pg_value(pg, "SELECT " + sql, args), (sql, args)
    finally:
        pg.close()


def test_changed_oracle_is_postgresqls():
    pg = _postgres()
    try:
        for doc in DOCS:
            theirs = tuple(_pg_value(pg, f"SELECT {sql} FROM (SELECT %s::jsonb AS j) d", (doc,)) for sql in CHANGED_SQL)
            assert theirs == _changed(doc), doc
    finally:
        pg.close()


def _postgres():
    import psycopg

    try:
        return pg_connect()
    except psycopg.OperationalError as e:
        pytest.skip(f"no PostgreSQL server ({str(e).splitlines()[0]})")


# -- values in and out, and what is refused ---------------------------------------------------------

def test_insert_update_and_select_keep_the_stored_form(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE tj (id INT PRIMARY KEY, j JSONB, s VARCHAR)")
    conn.execute("""INSERT INTO tj VALUES (1, '{"b":1,"a":2}', '{"z": 0, "y": [1,2]}')""")
    conn.execute("FLUSH")
    conn.execute("INSERT INTO tj SELECT 2, s::jsonb, s FROM tj")
    conn.execute("""UPDATE tj SET j = '{"d":1,  "c":2.0}' WHERE id = 1""")
    conn.execute("FLUSH")
    rows = conn.execute("SELECT id, j FROM tj ORDER BY id").fetchall()
    assert rows == [(1, '{"c": 2.0, "d": 1}'), (2, '{"y": [1, 2], "z": 0}')]
    assert conn.execute("""SELECT id FROM tj WHERE j = '{ "z":0, "y":[1, 2] }'::jsonb""").fetchall() == [(2,)]
    assert conn.execute("DESCRIBE tj").fetchall()[1][:2] == ("j", "jsonb")
    with pytest.raises(dagster_rw.DataError, match=r"invalid input syntax for type json in column 'j' of 'tj'"):
        conn.execute("INSERT INTO tj VALUES (3, '{a: 1}', NULL)")
    conn.execute("FLUSH")
    assert conn.execute("SELECT count(*) FROM tj").fetchall() == [(2,)]  # nothing accepted was lost


@pytest.mark.parametrize("query, refused", [
    ("SELECT j -> s AS x FROM tj", "a jsonb member or element chosen by an expression"),
    ("SELECT j #> s AS x FROM tj", "a jsonb path that is not a constant"),
    ("SELECT j #> 'a,b' AS x FROM tj", "malformed array literal"),
    ("SELECT s::jsonb AS x FROM tj", "casts of non-constant text to jsonb"),
    ("SELECT jsonb_array_elements(j) AS x, jsonb_array_elements(j) AS y FROM tj",
     "more than one set-returning function"),
    ("SELECT jsonb_build_object('d', current_date) AS x FROM tj", "a value of type date in a jsonb built by a view"),
    ("SELECT j #- s AS x FROM tj", "a jsonb path that is not a constant"),
    ("SELECT j ?| ARRAY[s] AS x FROM tj", "an array of keys that is not a constant"),
    ("SELECT j - 1.5 AS x FROM tj", "jsonb minus what is not text, an integer or a constant text array"),
    ("SELECT jsonb_insert(j, s, '1') AS x FROM tj", "jsonb_insert.*: a jsonb path that is not a constant"),
    ("SELECT jsonb_insert(j, '{a}', '1', id > 1) AS x FROM tj", "insert_after that is not a constant"),
    ("SELECT jsonb_path_query(j, '$.a') AS x FROM tj", r"function jsonb_path_query\(jsonb, unknown\) does not exist"),
])
def test_what_views_do_not_compute_yet_is_refused_by_name(tmp_path, query, refused):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE tj (id INT PRIMARY KEY, j JSONB, s VARCHAR)")
    with pytest.raises(dagster_rw.Error, match=refused):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    assert "v" not in [r[0] for r in conn.execute("SHOW MATERIALIZED VIEWS").fetchall()]


# -- building jsonb: compared with PostgreSQL on random rows, inserted and deleted ----------------------

BUILT = {
    "built_object": "SELECT id, jsonb_build_object('s', s, 'id', id, 'j', j, 'b', b, 'd', d) AS o FROM tb",
    "built_agg": "SELECT k, jsonb_agg(s ORDER BY id) AS a, jsonb_agg(j ORDER BY id DESC) AS aj, "
                 "jsonb_object_agg(id, d) AS m, jsonb_object_agg(s || id, j) AS mj FROM tb WHERE s IS NOT NULL GROUP BY k",
    "built_global": "SELECT jsonb_agg(jsonb_build_object('id', id, 'b', b) ORDER BY id) AS a FROM tb",
    "read_functions": "SELECT id, CASE WHEN jsonb_typeof(j) = 'array' THEN jsonb_array_length(j) END AS al, "
                      "jsonb_extract_path(j, 'a', '0') AS a0, jsonb_extract_path_text(j, 'b') AS b, "
                      "jsonb_strip_nulls(j) AS sn FROM tb",
    "read_keys": "SELECT id, jsonb_object_keys(j) AS key FROM tb WHERE jsonb_typeof(j) = 'object'",
    "set_members": "SELECT id, jsonb_set(j, '{a}', jsonb_build_object('id', id, 's', s)) AS sa, "
                   "jsonb_set(j, '{b,0}', '[1, \"x\"]'::jsonb, false) AS sb FROM tb WHERE jsonb_typeof(j) = 'object'",
    # (each operator where PostgreSQL computes it: on scalars, and paths into arrays, it fails the query)
    "changed": "SELECT id, j || jsonb_build_array(s, id) AS c, j || to_jsonb(s) AS cs, "
               "CASE WHEN jsonb_typeof(j) IN ('object', 'array') THEN j - s END AS ds, "
               "CASE WHEN jsonb_typeof(j) = 'array' THEN j - k END AS di, "
               "CASE WHEN jsonb_typeof(j) = 'object' THEN j #- '{a,0}' END AS dp, "
               "j ? 'a' AS e, j ? s AS es, j ?| ARRAY['a', 'b'] AS ea, j ?& '{a,b}' AS el, "
               "CASE WHEN jsonb_typeof(j -> 'a') = 'array' THEN jsonb_insert(j, '{a,0}', to_jsonb(d), true) END "
               "AS ins, "
               "jsonb_pretty(j) AS p, jsonb_build_array(id, s, j, b, d) AS arr, to_jsonb(s) AS ts, "
               "to_jsonb(d) AS td, to_jsonb(b) AS tb FROM tb",
    "changed_agg": "SELECT k, jsonb_agg(j - 'a' ORDER BY id) AS a, count(CASE WHEN j ? 'b' THEN 1 END) AS n "
                   "FROM tb WHERE jsonb_typeof(j) = 'object' GROUP BY k",
}
_row = st.tuples(st.integers(0, 6), st.integers(0, 2), st.one_of(st.none(), _strings),
                 st.one_of(st.none(), _document(_leaves)), st.one_of(st.none(), st.booleans()),
                 st.one_of(st.none(), st.decimals(min_value=-999, max_value=999, places=2)))
_change = st.one_of(st.tuples(st.just("insert"), _row), st.tuples(st.just("delete"), st.integers(0, 6)),
                    st.tuples(st.just("flush")))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(changes=st.lists(_change, min_size=2, max_size=10))
def test_built_jsonb_matches_postgresql(tmp_path_factory, changes):
    pg = PgSchema()
    try:
        conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
        ddl = "CREATE TABLE {}tb (id INT PRIMARY KEY, k INT, s VARCHAR, j JSONB, b BOOLEAN, d NUMERIC(6,2))"
        conn.execute(ddl.format(""))
        pg.admin.execute(ddl.format(f'"{pg.name}".'))
        from psycopg.types.string import TextLoader

        pg.admin.adapters.register_loader("jsonb", TextLoader)  # jsonb as its text, as dagster-rw gives it
        for name, q in BUILT.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        for change in changes + [("flush",)]:
            if change[0] == "insert":
                i, k, s, j, b, d = change[1]
                try:
                    pg.admin.execute(f'INSERT INTO "{pg.name}".tb VALUES (%s, %s, %s, %s::jsonb, %s, %s) ON CONFLICT (id) '
                                     "DO UPDATE SET k = EXCLUDED.k, s = EXCLUDED.s, j = EXCLUDED.j, b = EXCLUDED.b, "
                                     "d = EXCLUDED.d", (i, k, s, j, b, d))
                except psycopg.errors.DataError:  # (a \\u0000 PostgreSQL's text cannot hold)
                    continue
                values = ", ".join("NULL" if v is None else str(v).upper() if isinstance(v, bool)
                                   else "'" + str(v).replace("'", "''") + "'" for v in (s, j, b, d))
                conn.execute(f"INSERT INTO tb VALUES ({i}, {k}, {values})")
            elif change[0] == "delete":
                conn.execute(f"DELETE FROM tb WHERE id = {change[1]}")
                pg.admin.execute(f'DELETE FROM "{pg.name}".tb WHERE id = %s', (change[1],))
            else:
                conn.execute("FLUSH")
                for name, q in BUILT.items():
                    ours = sorted(map(repr, conn.execute(f"SELECT * FROM {name}").fetchall()))
                    pg_q = q.replace("FROM tb", f'FROM "{pg.name}".tb')
                    theirs = sorted(map(repr, pg.admin.execute(pg_q).fetchall()))
                    assert ours == theirs, name
        conn.close()
    finally:
        pg.drop()


BATCH_ROWS = [(1, 0, "a", '{"a": [1, 2], "b": null}', True, "1.50"), (2, 1, "b", '["a", "b", 1]', False, "-2.00"),
              (3, 2, None, '"a"', None, None), (4, 0, "x", None, True, "0.00"),
              (5, 1, "a", '{"b": {"a": 1}, "a": {}}', False, "3.25")] + [
    (10 + i, i % 3, "b", d, None, "1.00") for i, d in enumerate(DOCS)]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_batch_select_is_postgresqls_on_both_paths(tmp_path, spark, engine):
    """The changing operators, jsonb_insert, jsonb_build_array, to_jsonb and jsonb_pretty in a
    SELECT (run by Spark on the Spark path) give PostgreSQL's rows for the same query."""
    pg = PgSchema()
    try:
        conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine)
        ddl = "CREATE TABLE {}tb (id INT PRIMARY KEY, k INT, s VARCHAR, j JSONB, b BOOLEAN, d NUMERIC(6,2))"
        conn.execute(ddl.format(""))
        pg.admin.execute(ddl.format(f'"{pg.name}".'))
        from psycopg.types.string import TextLoader

        pg.admin.adapters.register_loader("jsonb", TextLoader)
        rows = [", ".join(str(v) if isinstance(v, int) and not isinstance(v, bool) else _sql(v) for v in row)
                for row in BATCH_ROWS]
        conn.execute("INSERT INTO tb VALUES " + ", ".join(f"({r})" for r in rows))
        conn.execute("FLUSH")
        pg.admin.cursor().executemany(f'INSERT INTO "{pg.name}".tb VALUES (%s, %s, %s, %s::jsonb, %s, %s)', BATCH_ROWS)
        query = BUILT["changed"] + " ORDER BY id"
        ours = conn.execute(query).fetchall()
        assert ours == pg.admin.execute(query.replace("FROM tb", f'FROM "{pg.name}".tb')).fetchall()
        conn.close()
    finally:
        pg.drop()
