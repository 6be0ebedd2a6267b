"""A value that does not fit its column, in a Kafka or file source and in a table fed by one (JSON
and CSV): the row is kept with NULL in that field, whether a view reads the field or not, and the
value is an error in rw_source_errors naming the column and the value, at the record's position.
A record that is not a document is rejected whole. Views over the rows equal DuckDB's answer over
the rows expected."""
from __future__ import annotations

import datetime
import json
import uuid
import warnings

import duckdb
import pyarrow as pa
import pytest
from oracle import assert_same

warnings.filterwarnings("ignore")

COLUMNS = "(id INT, k INT, v BIGINT, note VARCHAR, day DATE)"
ARROW = pa.schema([("id", pa.int32()), ("k", pa.int32()), ("v", pa.int64()), ("note", pa.string()),
                   ("day", pa.date32())])
DAY = datetime.date(2024, 1, 1)
GOOD = [(i, i % 3, i * 10, f"n{i}", DAY + datetime.timedelta(days=i)) for i in range(9)]

# (record as written, the row expected or None when rejected, the errors expected as (column, value))
JSON_RECORDS = [({"id": i, "k": k, "v": v, "note": n, "day": d.isoformat()}, (i, k, v, n, d), [])
                for i, k, v, n, d in GOOD] + [
    ({"id": 20, "k": 1, "v": "lots", "note": "x", "day": "2024-02-01"},  # a field the source's view reads
     (20, 1, None, "x", datetime.date(2024, 2, 1)), [("v", '"lots"')]),
    ({"id": 21, "k": 2, "v": 7, "note": "y", "day": "someday"},  # one no view of the source reads
     (21, 2, 7, "y", None), [("day", "someday")]),
    ({"id": 22, "k": 0, "v": 1, "note": {"nested": 1}, "day": "2024-02-02"},
     (22, 0, 1, None, datetime.date(2024, 2, 2)), [("note", '{"nested": 1}')]),
    ({"id": 23, "k": 1, "v": 2.5, "day": 20240203}, (23, 1, None, None, None), [("v", "2.5"), ("day", "20240203")]),
    ("{broken", None, []),
    ({"id": 24, "k": 2, "v": 4, "note": "z", "day": "2024-02-04"}, (24, 2, 4, "z", datetime.date(2024, 2, 4)), []),
]
CSV_RECORDS = [(f"{i},{k},{v},{n},{d.isoformat()}", (i, k, v, n, d), []) for i, k, v, n, d in GOOD] + [
    ("20,1,lots,x,2024-02-01", (20, 1, None, "x", datetime.date(2024, 2, 1)), [("v", "lots")]),
    ("21,2,7,y,someday", (21, 2, 7, "y", None), [("day", "someday")]),
    ("x22,0,1,z,2024-02-02", (None, 0, 1, "z", datetime.date(2024, 2, 2)), [("id", "x22")]),
    ("23,1,2x,,20240203", (23, 1, None, "", None), [("v", "2x"), ("day", "20240203")]),
    ("1,2", None, []),  # a line of the wrong shape
    ("24,2,4,w,2024-02-04", (24, 2, 4, "w", datetime.date(2024, 2, 4)), []),
]
TYPES = {"id": "integer", "k": "integer", "v": "bigint", "note": "varchar", "day": "date"}
SOURCE_VIEW = "SELECT k, count(*) AS n, sum(v) AS sv, count(v) AS cv FROM {} GROUP BY k"  # reads k and v
TABLE_VIEW = "SELECT k, count(*) AS n, count(day) AS nd, max(note) AS mn, sum(v) AS sv, count(id) AS ni FROM {} GROUP BY k"


def records(encode: str):
    out = []
    for raw, row, bad in JSON_RECORDS if encode == "json" else CSV_RECORDS:
        out.append((raw if isinstance(raw, str) else json.dumps(raw), row, bad))
    return out


def check(conn, encode: str, recs, positions, where: str) -> None:
    """Source s and table t hold every row expected (NULL in each bad field); the views over them
    equal DuckDB's over those rows; t's errors name every bad value, s's those of the fields it
    decodes (k and v), and each rejected record is an error of both, at its position."""
    rows = [row for _, row, _ in recs if row is not None]
    oracle = duckdb.connect()
    expected = pa.Table.from_pylist([dict(zip(ARROW.names, r)) for r in rows], schema=ARROW)
    oracle.register("e", expected)
    assert_same(conn.execute("SELECT id, k, v, note, day FROM t").fetchall(), rows, f"t, {where}")
    assert_same(conn.execute("SELECT id, k, v, note, day FROM s").fetchall(), rows, f"s, {where}")
    assert_same(conn.execute("SELECT k, n, sv, cv FROM ms").fetchall(),
                oracle.sql(SOURCE_VIEW.format("e")).fetchall(), f"ms, {where}")
    assert_same(conn.execute("SELECT k, n, nd, mn, sv, ni FROM mt").fetchall(),
                oracle.sql(TABLE_VIEW.format("e")).fetchall(), f"mt, {where}")
    got = conn.execute('SELECT source, "offset", raw_value, error FROM rw_source_errors').fetchall()
    for source, decoded in (("t", set(TYPES)), ("s", {"k", "v"})):
        want = sorted((pos, raw, f'column "{c}": cannot read {value} as {TYPES[c]}')
                      for (raw, row, bad), pos in zip(recs, positions) for c, value in bad if c in decoded)
        mine = sorted((o, raw, e) for s, o, raw, e in got if s == source)
        rejected = [(pos, raw) for (raw, row, _), pos in zip(recs, positions) if row is None]
        assert [m for m in mine if m[2].startswith("column ")] == want, (source, where, mine)
        assert [(o, raw) for o, raw, e in mine if not e.startswith("column ")] == rejected, (source, where, mine)


def create(conn, connector: str, encode: str) -> None:
    tail = "FORMAT PLAIN ENCODE JSON" if encode == "json" else \
        "FORMAT PLAIN ENCODE CSV (without_header = 'true', delimiter = ',')"
    conn.execute(f"CREATE SOURCE s {COLUMNS} {connector} {tail}")
    conn.execute(f"CREATE TABLE t {COLUMNS} {connector} {tail}")
    conn.execute(f"CREATE MATERIALIZED VIEW ms AS {SOURCE_VIEW.format('s')}")
    conn.execute(f"CREATE MATERIALIZED VIEW mt AS {TABLE_VIEW.format('t')}")


@pytest.mark.parametrize("encode", ["json", "csv"])
def test_kafka_rows_with_a_bad_value_are_kept_with_null_and_the_value_is_an_error(kafka_broker, conn, encode):
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=1)
    create(conn, f"WITH (connector = 'kafka', topic = '{topic}', "
                 f"properties.bootstrap.server = '{kafka_broker.bootstrap}')", encode)
    recs = records(encode)
    kafka_broker.produce(topic, [raw for raw, _, _ in recs], partition=0)
    conn.flush()
    conn.flush()  # nothing new: nothing read twice
    check(conn, encode, recs, list(range(len(recs))), f"kafka {encode}")
    assert {s["name"]: s for s in conn.status()}["t"]["source_errors"] == \
        sum(len(bad) + (row is None) for _, row, bad in recs)
    # a later epoch's errors, the errors' files merged: each bad value stays one error
    before = conn.execute("SELECT * FROM rw_source_errors WHERE source = 't'").fetchall()
    kafka_broker.produce(topic, [recs[-3][0]], partition=0)  # the record with two bad values, again
    conn.flush()
    assert conn.wh.compact("t") > 0
    after = conn.execute("SELECT * FROM rw_source_errors WHERE source = 't'").fetchall()
    epoch = {s["name"]: s for s in conn.status()}["t"]["epoch"]
    assert sorted(after, key=repr) == sorted(before + [(*e[:3], len(recs), *e[4:6], epoch)
                                                       for e in before if e[3] == len(recs) - 3], key=repr)


@pytest.mark.parametrize("encode", ["json", "csv"])
def test_file_rows_with_a_bad_value_are_kept_with_null_and_the_value_is_an_error(tmp_path, conn, encode):
    folder = tmp_path / "in"
    folder.mkdir()
    recs = records(encode)
    data = "".join(raw + "\n" for raw, _, _ in recs).encode()
    (folder / f"a.{encode}").write_bytes(data)
    positions, at = [], 0
    for raw, _, _ in recs:
        positions.append(at)
        at += len(raw.encode()) + 1
    create(conn, f"WITH (connector = 'posix_fs', posix_fs.root = '{folder}', match_pattern = '*.{encode}')", encode)
    conn.flush()
    conn.flush()
    check(conn, encode, recs, positions, f"file {encode}")
    topics = {r[0] for r in conn.execute("SELECT topic FROM rw_source_errors").fetchall()}
    assert topics == {f"a.{encode}"}
