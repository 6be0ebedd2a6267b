"""Nested values in sources: a JSON record's arrays (array columns), objects (struct columns) and
any JSON value (jsonb columns), from Kafka and from files (JSON lines, Parquet), in a source and in a
table fed by one.

Each decoded row equals what PostgreSQL reads from the same record (an array's elements, a
struct's fields, a jsonb member's text), on random records; views over the rows equal DuckDB's
answer over the rows expected, on both paths. A nested value with a part that does not fit its type
is NULL whole and an error naming the column, as RisingWave rejects it; a jsonb member is any JSON
value, NULL when absent or JSON null."""
from __future__ import annotations

import json
import re
import uuid

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same
from pg_target import connect as pg_connect
from test_jsonb import _document, _leaves

import dagster_rw
from dagster_rw.sources.decode import RecordDecoder
from dagster_rw.storage.catalog import Column

DECLARED = "(id INT, tags VARCHAR[], u STRUCT<a INT, b VARCHAR, c DOUBLE PRECISION[]>, j JSONB)"
COLUMNS = [Column("id", "integer"), Column("tags", "varchar[]"),
           Column("u", "struct<a integer, b varchar, c double precision[]>"), Column("j", "jsonb")]
ARROW = pa.schema([("id", pa.int32()), ("tags", pa.list_(pa.string())),
                   ("u", pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", pa.list_(pa.float64()))])),
                   ("j", pa.string())])

# what PostgreSQL reads from a record r: the oracle of the decoding
PG_READ = """
SELECT (r->>'id')::int,
       CASE WHEN jsonb_typeof(r->'tags') = 'array' THEN
            ARRAY(SELECT x FROM jsonb_array_elements_text(r->'tags') WITH ORDINALITY e(x, n) ORDER BY n) END,
       jsonb_typeof(r->'u') = 'object', (r->'u'->>'a')::int, r->'u'->>'b',
       CASE WHEN jsonb_typeof(r->'u'->'c') = 'array' THEN
            ARRAY(SELECT x::float8 FROM jsonb_array_elements_text(r->'u'->'c') WITH ORDINALITY e(x, n) ORDER BY n) END,
       CASE WHEN jsonb_typeof(r->'j') <> 'null' THEN (r->'j')::text END
FROM (SELECT %s::jsonb AS r) q"""


def _postgres():
    try:
        return pg_connect()
    except psycopg.OperationalError as e:
        pytest.skip(f"no PostgreSQL server ({str(e).splitlines()[0]})")


def pg_row(pg, record: str) -> dict:
    """The row PostgreSQL reads from `record`."""
    i, tags, is_object, a, b, c, j = pg.execute(PG_READ, (record,)).fetchone()
    return {"id": i, "tags": tags, "u": {"a": a, "b": b, "c": c} if is_object else None, "j": j}


# -- random records: decoded as PostgreSQL reads them ---------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"), max_size=5)
_struct = st.fixed_dictionaries({}, optional={
    "a": st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)), "b": st.one_of(st.none(), _text),
    "c": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-9, 9), st.sampled_from([0.5, -2.25])),
                                       max_size=3)),
    "other": st.integers()})  # a field the struct does not declare: ignored


@st.composite
def records(draw) -> list[str]:
    """A record's fields, each as `"name": value` text, in random order."""
    fields = [f'"id": {draw(st.integers(-2**31, 2**31 - 1))}']
    if draw(st.booleans()):
        fields.append(f'"tags": {json.dumps(draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), _text), max_size=3))))}')
    if draw(st.booleans()):
        fields.append(f'"u": {json.dumps(draw(st.one_of(st.none(), _struct)))}')
    if draw(st.integers(0, 3)):
        fields.append(f'"j": {draw(_document(_leaves))}')
    return draw(st.permutations(fields))


def _record(fields: list[str]) -> str:
    return "{" + ", ".join(fields) + "}"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(records(), min_size=1, max_size=12))
def test_nested_fields_decode_as_postgresql_reads_them(recs):
    """Arrays, structs and jsonb members of random records (jsonb: random documents, numbers with
    their digits, duplicate keys) against PostgreSQL's reading of each record; decoded one by one,
    as one Arrow array, and as a file's lines alike. A jsonb member PostgreSQL cannot hold (a
    \\u0000 in a string) is NULL and an error naming the column."""
    pg = _postgres()
    try:
        want, errors = [], []
        for at, fields in enumerate(recs):
            try:
                want.append(pg_row(pg, _record(fields)))
            except psycopg.errors.DataError:  # PostgreSQL cannot read the jsonb member: read the rest
                pg.rollback()
                want.append(pg_row(pg, _record([f for f in fields if not f.startswith('"j"')])))
                errors.append(at)
    finally:
        pg.close()
    values = [_record(fields).encode() for fields in recs]
    lines, _ = RecordDecoder(COLUMNS, "json").decode_lines(b"\n".join(values) + b"\n")
    for decoded in (RecordDecoder(COLUMNS, "json").decode(values),
                    RecordDecoder(COLUMNS, "json").decode_array(pa.array(values, pa.binary())), lines):
        assert list(decoded.good) == list(range(len(recs)))
        assert decoded.rows.to_pylist() == want
        assert [at for at, cause in decoded.errors] == errors
        assert all(cause.startswith('column "j": cannot read ') for _, cause in decoded.errors)


# -- end to end: Kafka and files, a source and a table, views on both paths -----------------------

# (a record's fields, the columns whose values do not fit: NULL and an error each)
RECORDS = [
    (['"id": 1', '"tags": ["a", "b"]', '"u": {"a": 1, "b": "x", "c": [1.5, 2]}', '"j": {"k": "v", "n": [1, 2.50]}'], set()),
    (['"id": 2', '"tags": []', '"u": {"a": 1, "c": []}', '"j": {"n": 1, "k": 7, "n": 2}'], set()),  # a duplicate key: the last wins
    (['"id": 3', '"u": {"a": 2, "b": "y", "zz": 5}', '"j": [1, {"k": "in an array"}]'], set()),
    (['"id": 4', '"tags": null', '"u": null', '"j": null'], set()),  # JSON null: NULL in every column
    (['"id": 5', '"tags": ["c", null]', '"j": "just text"'], set()),
    (['"id": 6', '"u": {"a": 2, "b": "z"}', '"j": {"k": "w", "deep": {"x": [true, false, null]}}'], set()),
    (['"id": 7', '"tags": "not an array"', '"u": {"a": 3}', '"j": 1e2'], {"tags"}),
    (['"id": 8', '"tags": [1, "mixed"]', '"u": {"a": "three"}', '"j": {"k": "q"}'], {"tags", "u"}),
    (['"id": 9', '"u": {"a": 4, "c": ["x"]}', '"j": {"k": "\\u0000"}'], {"u", "j"}),
    ('{broken', None),  # not a document: rejected whole
    (['"id": 10', '"tags": ["d"]', '"u": {"a": 4, "b": "q", "c": [-0.5]}', '"j": {"k": "v"}'], set()),
]
VIEWS = {
    "nested_kept": "SELECT id, tags, u, j FROM {}",
    "by_field": "SELECT (u).a AS a, count(*) AS n, count(j) AS nj, max((u).b) AS mb FROM {} GROUP BY (u).a",
    "tag_rows": "SELECT id, unnest(tags) AS tag FROM {}",
    "member": ("SELECT id, j ->> 'k' AS k, (u).c AS c FROM {} WHERE j IS NOT NULL",
               "SELECT id, json_extract_string(j, '$.k') AS k, u.c AS c FROM {} WHERE j IS NOT NULL"),
}


def record_text(fields) -> str:
    return fields if isinstance(fields, str) else _record(fields)


def expected_rows() -> list[dict]:
    pg = _postgres()
    try:
        return [pg_row(pg, _record([f for f in fields if f.split('"')[1] not in bad]))
                for fields, bad in RECORDS if bad is not None]
    finally:
        pg.close()


def check(conn, rows: list[dict], positions: list, where: str, source_view: bool = True) -> None:
    oracle = duckdb.connect()
    oracle.register("e", pa.Table.from_pylist(rows, schema=ARROW))
    assert_same(conn.execute("SELECT id, tags, u, j FROM t").fetchall(),
                [tuple(r.values()) for r in rows], f"t, {where}")
    for name, q in VIEWS.items():
        ours, theirs = (q, q) if isinstance(q, str) else q
        for obj in ("t", "s") if source_view else ("t",):
            assert_same(conn.execute(f"SELECT * FROM {obj}_{name}").fetchall(),
                        oracle.sql(theirs.format("e")).fetchall(), f"{obj}_{name}, {where}")
    errors = sorted((o, e) for s, o, e in conn.execute('SELECT source, "offset", error FROM rw_source_errors').fetchall()
                    if s == "t")
    want = sorted((pos, c) for (_, bad), pos in zip(RECORDS, positions) for c in bad or ())
    assert sorted((o, re.match(r'column "(\w+)": cannot read ', e).group(1)) for o, e in errors
                  if e.startswith("column ")) == want, (where, errors)
    rejected = [pos for (_, bad), pos in zip(RECORDS, positions) if bad is None]
    assert [o for o, e in errors if not e.startswith("column ")] == rejected, (where, errors)


def create(conn, connector: str, tail: str = "FORMAT PLAIN ENCODE JSON") -> None:
    conn.execute(f"CREATE SOURCE s {DECLARED} {connector} {tail}")
    conn.execute(f"CREATE TABLE t {DECLARED} {connector} {tail}")
    for name, q in VIEWS.items():
        ours = q if isinstance(q, str) else q[0]
        for obj in ("s", "t"):
            conn.execute(f"CREATE MATERIALIZED VIEW {obj}_{name} AS {ours.format(obj)}")


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_kafka_records_with_nested_values(tmp_path, kafka_broker, spark, engine):
    topic = f"n-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=1)
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine=engine)
    create(conn, f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{kafka_broker.bootstrap}')")
    rows = expected_rows()
    kafka_broker.produce(topic, [record_text(fields) for fields, _ in RECORDS[:6]], partition=0)
    conn.flush()
    kafka_broker.produce(topic, [record_text(fields) for fields, _ in RECORDS[6:]], partition=0)
    conn.flush()
    check(conn, rows, list(range(len(RECORDS))), f"kafka on {engine}")
    assert {s["name"]: s["engine"] for s in conn.status()}["t_by_field"] == engine


def test_json_lines_and_parquet_files_with_nested_values(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    data = "".join(record_text(fields) + "\n" for fields, _ in RECORDS).encode()
    (folder / "a.json").write_bytes(data)
    positions, at = [], 0
    for fields, _ in RECORDS:
        positions.append(at)
        at += len(record_text(fields).encode()) + 1
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    create(conn, f"WITH (connector = 'posix_fs', posix_fs.root = '{folder}', match_pattern = '*.json')")
    conn.flush()
    check(conn, expected_rows(), positions, "json lines")

    # Parquet: typed nested columns, and jsonb from a text column (normalized as PostgreSQL does)
    pfolder = tmp_path / "pq"
    pfolder.mkdir()
    good = [record_text(fields) for fields, bad in RECORDS if bad == set()]
    docs = [json.loads(r) for r in good]
    j_texts = [next((f[len('"j": '):] for f in fields if f.startswith('"j": ')), None)  # as written: 2.50 stays 2.50
               for fields, bad in RECORDS if bad == set()]
    pq.write_table(pa.table({
        "id": pa.array([d["id"] for d in docs], pa.int64()),
        "tags": pa.array([d.get("tags") for d in docs], pa.list_(pa.string())),
        "u": pa.array([d.get("u") and {k: d["u"].get(k) for k in ("a", "b", "c")} for d in docs],
                      pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.list_(pa.float64()))])),
        "j": pa.array([None if d.get("j") is None else text for d, text in zip(docs, j_texts)], pa.string()),
    }), pfolder / "a.parquet")
    pconn = dagster_rw.connect(str(tmp_path / "pwh"))
    create(pconn, f"WITH (connector = 'posix_fs', posix_fs.root = '{pfolder}', match_pattern = '*.parquet')",
           "FORMAT PLAIN ENCODE PARQUET")
    pconn.flush()
    pg = _postgres()
    try:
        rows = [pg_row(pg, r) for r in good]
    finally:
        pg.close()
    oracle = duckdb.connect()
    oracle.register("e", pa.Table.from_pylist(rows, schema=ARROW))
    assert_same(pconn.execute("SELECT id, tags, u, j FROM t").fetchall(), [tuple(r.values()) for r in rows], "parquet")
    for name, q in VIEWS.items():
        theirs = q if isinstance(q, str) else q[1]
        assert_same(pconn.execute(f"SELECT * FROM s_{name}").fetchall(), oracle.sql(theirs.format("e")).fetchall(),
                    f"s_{name}, parquet")


@pytest.mark.parametrize("declared, encode, refused", [
    ("(id INT, p STRUCT<a INT>)", "CSV (without_header = 'true', delimiter = ',')", "column 'p' of type struct<a integer> in ENCODE CSV"),
    ("(id INT, j JSONB[])", "JSON", "column 'j' of type jsonb[]"),
    ("(id INT, p STRUCT<a JSONB>)", "JSON", "column 'p' of type struct<a jsonb>"),
    ("(id INT, p STRUCT<a INTERVAL>)", "JSON", "column 'p' of type struct<a interval> in ENCODE JSON"),
])
def test_what_a_source_cannot_carry_is_refused_by_name(tmp_path, declared, encode, refused):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    (tmp_path / "in").mkdir()
    with pytest.raises(dagster_rw.ProgrammingError, match=refused.replace("[", r"\[").replace("]", r"\]")):
        conn.execute(f"CREATE SOURCE s {declared} WITH (connector = 'posix_fs', match_pattern = '*.x', "
                     f"posix_fs.root = '{tmp_path / 'in'}') FORMAT PLAIN ENCODE {encode}")
    assert "s" not in [r[0] for r in conn.execute("SHOW SOURCES").fetchall()]


def test_a_csv_field_read_as_jsonb_is_normalized_or_an_error():
    decoded = RecordDecoder([Column("id", "integer"), Column("j", "jsonb")], "csv").decode(
        [b'1,"{""b"": 1.50, ""a"": [true]}"', b"2,", b"3,{not json", b'4,"""text"""'])
    assert decoded.rows.to_pylist() == [{"id": 1, "j": '{"a": [true], "b": 1.50}'}, {"id": 2, "j": None},
                                        {"id": 3, "j": None}, {"id": 4, "j": '"text"'}]
    assert decoded.errors == [(2, 'column "j": cannot read {not json as jsonb')]


def test_a_typed_parquet_value_read_as_jsonb_is_its_json_text():
    """A Parquet struct or list column declared jsonb: the value written as JSON, keys sorted as
    jsonb sorts them, numbers as NUMERIC prints them, a date as its text."""
    import datetime

    table = pa.table({"j": pa.array([{"bb": 1.5, "a": [1, None]}, None], pa.struct([("bb", pa.float64()),
                                                                                  ("a", pa.list_(pa.int64()))])),
                      "d": pa.array([[datetime.date(2024, 1, 2)], []], pa.list_(pa.date32()))})
    decoded = RecordDecoder([Column("j", "jsonb"), Column("d", "jsonb")], "parquet").decode_table(table)
    assert decoded.rows.to_pylist() == [{"j": '{"a": [1, null], "bb": 1.5}', "d": '["2024-01-02"]'},
                                        {"j": None, "d": "[]"}]
