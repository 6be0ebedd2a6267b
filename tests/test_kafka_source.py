"""Kafka sources and tables with a connector, against a real Kafka-protocol broker (Tansu).

Every record produced is ingested exactly once (offsets recorded with each barrier, committed
with each step), bad records land in rw_source_errors with their offsets (a value that does not
fit its column is NULL in a row that is kept, and an error), a bound per partition
turns a backlog into several epochs, and what cannot be done is refused at CREATE.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
import warnings

import pytest

import dagster_rw
from dagster_rw.errors import OperationalError, ProgrammingError

warnings.filterwarnings("ignore")


def new_topic(broker, partitions: int = 3) -> str:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(topic, partitions=partitions)
    return topic


def with_clause(broker, topic: str, **extra) -> str:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.server": broker.bootstrap, **extra}
    return "WITH (" + ", ".join(f"{k} = '{v}'" for k, v in opts.items()) + ")"


def produce_json(broker, topic: str, rows_by_partition: dict[int, list]) -> None:
    for p, rows in rows_by_partition.items():
        broker.produce(topic, [r if isinstance(r, (str, bytes)) else json.dumps(r) for r in rows], partition=p)


def test_source_table_and_view_hold_every_record_once(kafka_broker, conn):
    topic = new_topic(kafka_broker)
    conn.execute(f"CREATE SOURCE s (id INT, k INT, v BIGINT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
    conn.execute(f"CREATE TABLE t (id INT, k INT, v BIGINT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW by_k AS SELECT k, count(*) AS n, sum(v) AS sv FROM s GROUP BY k")
    produce_json(kafka_broker, topic, {p: [{"id": p * 100 + i, "k": i % 3, "v": i} for i in range(20)] for p in range(3)})
    assert conn.pending_inputs() == {"s": 60, "t": 60}
    conn.flush()
    assert conn.pending_inputs() == {}
    produce_json(kafka_broker, topic, {1: [{"id": 999, "k": 7, "v": 5}]})
    assert conn.pending_inputs() == {"s": 1, "t": 1}
    conn.flush()
    conn.flush()  # nothing new: nothing read twice
    ids = sorted(r[0] for r in conn.execute("SELECT id FROM t").fetchall())
    assert ids == sorted([p * 100 + i for p in range(3) for i in range(20)] + [999])
    assert sorted(conn.execute("SELECT k, n, sv FROM by_k").fetchall()) == sorted(
        conn.execute("SELECT k, count(*), sum(v) FROM t GROUP BY k").fetchall())
    # a source keeps no rows, but a batch query reads it (again, from Kafka) up to its committed offsets
    assert sorted(r[0] for r in conn.execute("SELECT id FROM s").fetchall()) == ids
    status = {s["name"]: s for s in conn.status()}
    assert status["s"]["source_end_offsets"] == {"0": 20, "1": 21, "2": 20}
    assert status["t"]["consumer_lag"] == 0 and status["t"]["source_errors"] == 0


def test_view_created_later_backfills_from_the_source(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=2)
    conn.execute(f"CREATE SOURCE s (k INT, v INT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
    produce_json(kafka_broker, topic, {0: [{"k": 1, "v": 1}, {"k": 2, "v": 2}], 1: [{"k": 1, "v": 3}]})
    conn.flush()
    conn.execute("CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS sv FROM s GROUP BY k")
    produce_json(kafka_broker, topic, {1: [{"k": 2, "v": 10}]})
    conn.flush()
    assert sorted(conn.execute("SELECT k, sv FROM m").fetchall()) == [(1, 4), (2, 12)]


def test_bad_records_land_in_rw_source_errors_with_their_offsets(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=2)
    conn.execute(f"CREATE TABLE j (a INT, ts TIMESTAMP, s VARCHAR) {with_clause(kafka_broker, topic)} "
                 "FORMAT PLAIN ENCODE JSON")
    produce_json(kafka_broker, topic, {
        0: [{"a": 1, "ts": "2024-01-01 00:00:00", "s": "x"}, "{not json", {"a": "seven"}, {"a": 2, "s": "y"}],
        1: [{"a": 3000000000}, {"ts": "yesterday"}, "", {"a": 4, "s": "line\nbreak"}],
    })
    conn.flush()
    got = conn.execute("SELECT a, CAST(ts AS VARCHAR), s FROM j").fetchall()
    assert sorted(got, key=repr) == sorted([(1, "2024-01-01 00:00:00", "x"), (None, None, None), (2, None, "y"),
                                            (None, None, None), (None, None, None), (4, None, "line\nbreak")], key=repr)
    errors = conn.execute('SELECT source, topic, "partition", "offset", raw_value, error, epoch '
                          "FROM rw_source_errors ORDER BY 3, 4").fetchall()
    assert [(e[0], e[1], e[2], e[3]) for e in errors] == [("j", topic, 0, 1), ("j", topic, 0, 2),
                                                           ("j", topic, 1, 0), ("j", topic, 1, 1), ("j", topic, 1, 2)]
    assert errors[0][4] == "{not json" and errors[2][4] == '{"a": 3000000000}'
    assert errors[1][5] == 'column "a": cannot read "seven" as integer'
    assert errors[2][5] == 'column "a": cannot read 3000000000 as integer'
    assert errors[3][5] == 'column "ts": cannot read yesterday as timestamp' and errors[4][5] == "empty record"
    assert {e[6] for e in errors} == {conn.status()[0]["epoch"]}
    assert {s["name"]: s for s in conn.status()}["j"]["source_errors"] == 5


def test_csv_source_decodes_lines_and_reports_bad_ones(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=1)
    conn.execute(f"CREATE TABLE c (id INT, name VARCHAR, price NUMERIC(10,2), day DATE) "
                 f"{with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE CSV (without_header = 'true', delimiter = ';')")
    kafka_broker.produce(topic, ["1;apple;1.50;2024-01-02", '2;"pear;green";2;2024-01-03', "x;bad;1;2024-01-01",
                                 "3;short", "4;;;"], partition=0)
    conn.flush()
    got = sorted(conn.execute("SELECT id, name, CAST(price AS VARCHAR), CAST(day AS VARCHAR) FROM c").fetchall(),
                 key=lambda r: (r[0] is not None, r[0] or 0))
    assert got == [(None, "bad", "1.00", "2024-01-01"), (1, "apple", "1.50", "2024-01-02"),
                   (2, "pear;green", "2.00", "2024-01-03"), (4, "", None, None)]
    assert conn.execute('SELECT "offset", error FROM rw_source_errors ORDER BY 1').fetchall() == [
        (2, 'column "id": cannot read x as integer'), (3, "CSV parse error: Expected 4 columns, got 2: 3;short")]


def test_a_bound_per_partition_turns_a_backlog_into_several_epochs(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=2)
    conn.execute(f"CREATE TABLE b (i INT) {with_clause(kafka_broker, topic, **{'epoch.max.records.per.partition': 4})} "
                 "FORMAT PLAIN ENCODE JSON")
    produce_json(kafka_broker, topic, {0: [{"i": i} for i in range(10)], 1: [{"i": 100 + i} for i in range(3)]})
    counts = []
    while conn.pending_inputs():
        conn.flush()
        counts.append(conn.execute("SELECT count(*) FROM b").fetchall()[0][0])
    assert counts == [7, 11, 13]  # 4 + 3, then 4 + 0, then 2 + 0
    assert sorted(r[0] for r in conn.execute("SELECT i FROM b").fetchall()) == list(range(10)) + [100, 101, 102]


def test_startup_mode_latest_reads_only_what_comes_after_create(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=1)
    produce_json(kafka_broker, topic, {0: [{"i": 1}, {"i": 2}]})
    conn.execute(f"CREATE TABLE l (i INT) {with_clause(kafka_broker, topic, **{'scan.startup.mode': 'latest'})} "
                 "FORMAT PLAIN ENCODE JSON")
    produce_json(kafka_broker, topic, {0: [{"i": 3}]})
    conn.flush()
    assert conn.execute("SELECT i FROM l").fetchall() == [(3,)]


def test_a_reconnected_warehouse_continues_without_repeats(kafka_broker, warehouse):
    topic = new_topic(kafka_broker, partitions=2)
    with dagster_rw.connect(warehouse) as c1:
        c1.execute(f"CREATE TABLE r (i INT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
        produce_json(kafka_broker, topic, {0: [{"i": 1}], 1: [{"i": 2}]})
        c1.flush()
    produce_json(kafka_broker, topic, {0: [{"i": 3}]})
    with dagster_rw.connect(warehouse) as c2:
        assert c2.pending_inputs() == {"r": 1}
        c2.flush()
        assert sorted(c2.execute("SELECT i FROM r").fetchall()) == [(1,), (2,), (3,)]


_KILLED_STEP = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    import dagster_rw
    from dagster_rw.runtime import ingest, step

    real_commit = step._commit_output

    def commit_then_maybe_die(wh, obj, m, ctx, delta, start, target, t0, **kw):
        if obj.name == "x":
            print("read", ctx.rows_in, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # after reading, before the manifest commit
        return real_commit(wh, obj, m, ctx, delta, start, target, t0, **kw)

    step._commit_output = commit_then_maybe_die
    conn = dagster_rw.connect({warehouse!r})
    conn.flush()
""")


def test_exactly_once_when_killed_between_reading_and_committing(kafka_broker, warehouse, tmp_path):
    topic = new_topic(kafka_broker)
    with dagster_rw.connect(warehouse) as c:
        c.execute(f"CREATE TABLE x (i INT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
        c.execute("CREATE MATERIALIZED VIEW xs AS SELECT count(*) AS n, count(DISTINCT i) AS d FROM x")
        produce_json(kafka_broker, topic, {p: [{"i": p * 1000 + i} for i in range(50)] for p in range(3)})
        c.flush()  # 150 records committed
    produce_json(kafka_broker, topic, {p: [{"i": p * 1000 + 50 + i} for i in range(30)] for p in range(3)})
    script = tmp_path / "killed.py"
    root = os.path.dirname(os.path.dirname(os.path.abspath(dagster_rw.__file__)))
    script.write_text(_KILLED_STEP.format(root=root, warehouse=warehouse))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "read 90" in proc.stdout  # it had read the new records when it died
    produce_json(kafka_broker, topic, {0: [{"i": 5000}]})
    with dagster_rw.connect(warehouse) as c:
        c.flush()
        c.flush()
        expected = 150 + 90 + 1
        assert c.execute("SELECT count(*), count(DISTINCT i) FROM x").fetchall() == [(expected, expected)]
        assert c.execute("SELECT n, d FROM xs").fetchall() == [(expected, expected)]


@pytest.mark.parametrize("sql, construct", [
    ("CREATE SOURCE w (a INT, ts TIMESTAMP, WATERMARK FOR ts AS ts + INTERVAL '5' SECOND) {with} "
     "FORMAT PLAIN ENCODE JSON", "watermark expression"),
    ("CREATE SOURCE w (a INT, ts TIMESTAMP, WATERMARK FOR a AS a - 5) {with} FORMAT PLAIN ENCODE JSON",
     "WATERMARK on 'a' of type integer"),
    ("CREATE SOURCE w (a INT) {with} FORMAT UPSERT ENCODE JSON", "FORMAT UPSERT"),
    ("CREATE SOURCE w (a INT) {with} FORMAT PLAIN ENCODE AVRO", "ENCODE AVRO"),
    ("CREATE SOURCE w (a INT PRIMARY KEY) {with} FORMAT PLAIN ENCODE JSON", "primary key"),
    ("CREATE SOURCE w (a INT) WITH (connector = 'kafka', topic = 'q', properties.bootstrap.server = 'h:1', "
     "properties.group.id = 'g') FORMAT PLAIN ENCODE JSON", "properties.group.id"),
    ("CREATE SOURCE w (a INT) WITH (connector = 'kinesis', topic = 'q') FORMAT PLAIN ENCODE JSON", "kinesis"),
    ("CREATE SOURCE w (a INT) {with} FORMAT PLAIN ENCODE CSV (without_header = 'false')", "header"),
])
def test_unsupported_source_definitions_are_refused_at_create(kafka_broker, conn, sql, construct):
    topic = new_topic(kafka_broker, partitions=1)
    with pytest.raises(ProgrammingError, match=construct):
        conn.execute(sql.format(**{"with": with_clause(kafka_broker, topic)}))
    assert conn.execute("SHOW SOURCES").fetchall() == []


def test_stream_constructs_that_cannot_be_maintained_are_refused(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=1)
    conn.execute(f"CREATE SOURCE s (k INT, ts TIMESTAMP) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
    with pytest.raises(ProgrammingError, match="EMIT ON WINDOW CLOSE without window_start"):
        # s has no WATERMARK: its windows never close
        conn.execute("CREATE MATERIALIZED VIEW e AS SELECT window_start, count(*) FROM TUMBLE(s, ts, INTERVAL '1' MINUTE) "
                     "GROUP BY window_start EMIT ON WINDOW CLOSE")
    with pytest.raises(ProgrammingError, match="FOR SYSTEM_TIME"):
        conn.execute("CREATE MATERIALIZED VIEW e AS SELECT s.k, d.name FROM s FULL JOIN d FOR SYSTEM_TIME AS OF "
                     "PROCTIME() ON s.k = d.k")
    with pytest.raises(ProgrammingError, match="update or delete its rows"):
        conn.execute("CREATE TABLE e AS SELECT k, count(*) AS n FROM s GROUP BY k")  # not EMIT ON WINDOW CLOSE
    conn.execute("CREATE TABLE positive AS SELECT k FROM s WHERE k > 0")
    with pytest.raises(ProgrammingError, match="AS SELECT query"):
        conn.execute("INSERT INTO positive VALUES (1)")
    with pytest.raises(ProgrammingError, match="months"):
        conn.execute("CREATE MATERIALIZED VIEW e AS SELECT * FROM TUMBLE(s, ts, INTERVAL '1' MONTH)")
    with pytest.raises(ProgrammingError, match="multiple of its slide"):
        conn.execute("CREATE MATERIALIZED VIEW e AS SELECT * FROM HOP(s, ts, INTERVAL '2' SECOND, INTERVAL '5' SECOND)")
    with pytest.raises(ProgrammingError, match="needs a timestamp"):
        conn.execute("CREATE MATERIALIZED VIEW e AS SELECT * FROM TUMBLE(s, k, INTERVAL '1' SECOND)")
    with pytest.raises(ProgrammingError, match="source"):
        conn.execute("INSERT INTO s VALUES (1, NULL)")
    # a plain join between a stream and a table stays the regular incremental join
    conn.execute("CREATE MATERIALIZED VIEW j AS SELECT s.k, d.name FROM s JOIN d ON s.k = d.k")
    assert conn.execute("SHOW SOURCES").fetchall() == [("s",)]


def test_dml_into_a_table_with_a_connector_is_refused(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=1)
    conn.execute(f"CREATE TABLE t (k INT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON")
    with pytest.raises(ProgrammingError, match="connector"):
        conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(ProgrammingError, match="APPEND ONLY"):
        conn.execute("DELETE FROM t")


def test_a_source_dropped_and_created_again_starts_from_its_own_start(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=1)
    ddl = f"CREATE TABLE again (i INT) {with_clause(kafka_broker, topic)} FORMAT PLAIN ENCODE JSON"
    conn.execute(ddl)
    produce_json(kafka_broker, topic, {0: [{"i": 1}, {"i": 2}]})
    conn.flush()
    conn.execute("DROP TABLE again")
    conn.execute(ddl)  # earliest again: the epochs of the first table do not carry over
    conn.flush()
    assert sorted(conn.execute("SELECT i FROM again").fetchall()) == [(1,), (2,)]


def test_a_source_starting_at_the_beginning_can_be_defined_while_kafka_is_down(kafka_broker, conn):
    topic = new_topic(kafka_broker, partitions=2)
    produce_json(kafka_broker, topic, {0: [{"i": 1}], 1: [{"i": 2}]})
    down = f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '127.0.0.1:1')"
    conn.execute(f"CREATE SOURCE offline (i INT) {down} FORMAT PLAIN ENCODE JSON")
    assert conn.pending_inputs() == {}  # nothing can be known of it yet, and nothing blocks
    # 'latest' needs Kafka at CREATE: it means the end of each partition at that moment
    with pytest.raises(OperationalError, match="127.0.0.1:1"):
        conn.execute(f"CREATE SOURCE later (i INT) {down[:-1]}, scan.startup.mode = 'latest') FORMAT PLAIN ENCODE JSON")
