"""Windowed and joined views over a Kafka source equal DuckDB's answer over the same events.

Random events (hypothesis) are produced to random partitions in rounds, with bad records mixed
in, a random bound per partition and barriers after each round; after every flush each view must
equal the oracle query, which DuckDB runs over the events ingested so far. The oracle's windows
are written independently of the planner's: time_bucket for TUMBLE, a series of starts for HOP.
"""
from __future__ import annotations

import datetime
import json
import uuid
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same

import duckdb

import dagster_rw

warnings.filterwarnings("ignore")

EPOCH0 = datetime.datetime(2024, 3, 1, 12, 0, 0)

VIEWS = {
    "tumble_agg": (
        "SELECT k, window_start, window_end, count(*) AS n, sum(v) AS sv, max(v) AS mx "
        "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY k, window_start, window_end",
        "SELECT k, time_bucket(INTERVAL '10 seconds', ts, TIMESTAMP '1970-01-01') AS ws, "
        "time_bucket(INTERVAL '10 seconds', ts, TIMESTAMP '1970-01-01') + INTERVAL '10 seconds' AS we, "
        "count(*), sum(v), max(v) FROM ev GROUP BY ALL"),
    "hop_agg": (
        "SELECT window_start, window_end, count(*) AS n, min(v) AS mn FROM HOP(ev, ts, INTERVAL '5' SECOND, "
        "INTERVAL '15' SECOND) WHERE k <> 3 GROUP BY window_start, window_end",
        "SELECT ws, ws + INTERVAL '15 seconds', count(*), min(v) FROM ("
        "  SELECT *, time_bucket(INTERVAL '5 seconds', ts, TIMESTAMP '1970-01-01') - i * INTERVAL '5 seconds' AS ws"
        "  FROM ev, range(0, 3) r(i)) WHERE k <> 3 GROUP BY ALL"),
    "hop_rows": (
        "SELECT k, v, window_start FROM HOP(ev, ts, INTERVAL '20' SECOND, INTERVAL '40' SECOND) WHERE v > 0",
        "SELECT k, v, time_bucket(INTERVAL '20 seconds', ts, TIMESTAMP '1970-01-01') - i * INTERVAL '20 seconds' "
        "FROM ev, range(0, 2) r(i) WHERE v > 0"),
    "window_join_dim": (
        "SELECT d.name, t.window_start, count(*) AS n, sum(t.v) AS sv FROM TUMBLE(ev, ts, INTERVAL '30' SECOND) t "
        "JOIN dim d ON t.k = d.k GROUP BY d.name, t.window_start",
        "SELECT d.name, time_bucket(INTERVAL '30 seconds', ts, TIMESTAMP '1970-01-01'), count(*), sum(v) "
        "FROM ev JOIN dim d ON ev.k = d.k GROUP BY ALL"),
    "filter_project": (
        "SELECT k, v * 2 AS v2, ts FROM ev WHERE v IS NULL OR v < 50",
        "SELECT k, v * 2, ts FROM ev WHERE v IS NULL OR v < 50"),
    # CREATE TABLE ... AS SELECT keeps inserting the stream query's rows into a table
    "table_as_select": (
        "SELECT ev.k, ev.v + 1 AS v1, d.name, ev.ts FROM ev JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() d "
        "ON ev.k = d.k WHERE ev.v > 10",
        "SELECT ev.k, ev.v + 1, d.name, ev.ts FROM ev JOIN dim d ON ev.k = d.k WHERE ev.v > 10"),
}


def create(conn, name: str) -> None:
    kind = "TABLE" if name.startswith("table_") else "MATERIALIZED VIEW"
    conn.execute(f"CREATE {kind} {name} AS {VIEWS[name][0]}")

DIM = [(0, "zero"), (1, "one"), (2, "two")]

@st.composite
def workloads(draw):
    rounds = draw(st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3),
                                              st.one_of(st.none(), st.integers(-20, 100)),
                                              st.integers(-90, 90), st.integers(0, 9)),
                                    max_size=25), min_size=1, max_size=4))
    bound = draw(st.one_of(st.none(), st.integers(1, 8)))
    late_view = draw(st.booleans())
    # barriers cut before the flush of a round, with nothing refreshed in between: the source and
    # the views then catch up several epochs in one step
    early_barriers = draw(st.lists(st.integers(0, 2), min_size=len(rounds), max_size=len(rounds)))
    return rounds, bound, late_view, early_barriers


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(workloads())
def test_windowed_views_over_a_kafka_source_equal_duckdb(kafka_broker, tmp_path_factory, workload):
    rounds, bound, late_view, early_barriers = workload
    topic = f"w-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=3)
    bound_opt = f", epoch.max.records.per.partition = '{bound}'" if bound else ""
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
    conn.execute(f"CREATE SOURCE ev (k INT, v INT, ts TIMESTAMP) WITH (connector = 'kafka', topic = '{topic}', "
                 f"properties.bootstrap.server = '{kafka_broker.bootstrap}'{bound_opt}) FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE TABLE dim (k INT PRIMARY KEY, name VARCHAR)")
    conn.execute("INSERT INTO dim VALUES " + ", ".join(f"({k}, '{n}')" for k, n in DIM))
    names = list(VIEWS)
    early = names if not late_view else names[:2]
    for name in early:
        create(conn, name)
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE ev (k INT, v INT, ts TIMESTAMP)")
    oracle.execute("CREATE TABLE dim (k INT, name VARCHAR)")
    oracle.executemany("INSERT INTO dim VALUES (?, ?)", DIM)
    produced = 0
    for i, batch in enumerate(rounds):
        by_partition: dict[int, list[str]] = {}
        for p, k, v, secs, bad in batch:
            ts = EPOCH0 + datetime.timedelta(seconds=secs, milliseconds=secs * 7 % 1000)
            if bad == 0:  # one record in ten is not a JSON document: it must not count anywhere
                by_partition.setdefault(p, []).append('{"k": 1, "v":')
                continue
            if bad == 1:  # one in ten has a value that does not fit its column: kept, NULL there
                by_partition.setdefault(p, []).append(json.dumps({"k": "not a number", "v": v,
                                                                  "ts": ts.isoformat(sep=" ")}))
                k = None
            else:
                by_partition.setdefault(p, []).append(json.dumps({"k": k, "v": v, "ts": ts.isoformat(sep=" ")}))
            oracle.execute("INSERT INTO ev VALUES (?, ?, ?)", [k, v, ts])
            produced += 1
        for p, values in by_partition.items():
            kafka_broker.produce(topic, values, partition=p)
        for _ in range(early_barriers[i]):
            conn.barrier()
        while True:  # a bounded source needs several barriers to drain: each is a consistent cut
            conn.flush()
            if not conn.pending_inputs():
                break
        if late_view and i == 0:
            for name in names[2:]:
                create(conn, name)
        for name in names:
            actual = conn.execute(f"SELECT * FROM {name}").fetchall()
            expected = oracle.sql(VIEWS[name][1]).fetchall()
            assert_same(actual, expected, f"{name} after round {i}")
    assert conn.execute("SELECT count(*) FROM ev").fetchall() == [(produced,)]
    conn.close()


EOWC_VIEWS = {
    "tumble_close": (
        "SELECT window_start, k, count(*) AS n, sum(v) AS sv, max(v) AS mx, count(DISTINCT v) AS dv "
        "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start, k EMIT ON WINDOW CLOSE",
        10, 10, "SELECT ws, k, count(*), sum(v), max(v), count(DISTINCT v) FROM acc GROUP BY ws, k"),
    "hop_close": (
        "SELECT window_end, count(*) AS n, min(v) AS mn, avg(v) AS av FROM HOP(ev, ts, INTERVAL '5' SECOND, "
        "INTERVAL '15' SECOND) WHERE k <> 2 GROUP BY window_end EMIT ON WINDOW CLOSE",
        5, 15, "SELECT we, count(*), min(v), avg(v) FROM acc WHERE k <> 2 GROUP BY we"),
}


@st.composite
def late_workloads(draw):
    """Rounds of events whose times mostly move forward, with some arriving late."""
    rounds, clock = [], 0
    for _ in range(draw(st.integers(1, 5))):
        batch = []
        for _ in range(draw(st.integers(0, 12))):
            clock += draw(st.integers(0, 6))
            secs = clock - draw(st.sampled_from([0, 0, 0, 3, 9, 25]))  # some late, some very late
            batch.append((draw(st.integers(0, 2)), draw(st.integers(0, 3)),
                          draw(st.one_of(st.none(), st.integers(-5, 40))), secs))
        rounds.append(batch)
    return rounds, draw(st.sampled_from([0, 4, 12]))


def _window_pairs(secs: int, slide: int, size: int):
    start = secs - secs % slide
    return [(start - i * slide, start - i * slide + size) for i in range(size // slide)]


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(late_workloads())
def test_emit_on_window_close_equals_duckdb_over_the_windows_the_watermark_closed(
        kafka_broker, tmp_path_factory, workload):
    rounds, delay = workload
    topic = f"c-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=3)
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
    conn.execute(f"CREATE SOURCE ev (k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '{delay}' SECOND) "
                 f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = "
                 f"'{kafka_broker.bootstrap}') FORMAT PLAIN ENCODE JSON")
    for name, (sql, *_rest) in EOWC_VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    oracles = {name: duckdb.connect() for name in EOWC_VIEWS}
    for db in oracles.values():
        db.execute("CREATE TABLE acc (k INT, v INT, ws TIMESTAMP, we TIMESTAMP)")
    watermark = None  # seconds from EPOCH0, as the source derives it: max event time - delay
    emitted: dict[str, list] = {name: [] for name in EOWC_VIEWS}
    for i, batch in enumerate(rounds):
        by_partition: dict[int, list[str]] = {}
        for p, k, v, secs in batch:
            ts = EPOCH0 + datetime.timedelta(seconds=secs)
            by_partition.setdefault(p, []).append(json.dumps({"k": k, "v": v, "ts": ts.isoformat(sep=" ")}))
            for name, (_sql, slide, size, _q) in EOWC_VIEWS.items():
                for ws, we in _window_pairs(secs, slide, size):
                    if watermark is None or we > watermark:  # a window that closed earlier ignores it
                        oracles[name].execute("INSERT INTO acc VALUES (?, ?, ?, ?)", [
                            k, v, EPOCH0 + datetime.timedelta(seconds=ws), EPOCH0 + datetime.timedelta(seconds=we)])
        for p, values in by_partition.items():
            kafka_broker.produce(topic, values, partition=p)
        if batch:
            top = max(secs for *_x, secs in batch) - delay
            watermark = top if watermark is None else max(watermark, top)
        conn.flush()
        for name, (_sql, _slide, _size, query) in EOWC_VIEWS.items():
            db = oracles[name]
            if watermark is not None:
                closed_before = {r[0] for r in emitted[name]}
                wm_ts = EPOCH0 + datetime.timedelta(seconds=watermark)
                rows = db.sql(f"SELECT * FROM ({query}) WHERE "
                              f"{'ws' if name == 'tumble_close' else 'we'} IS NOT NULL").fetchall()
                closing = [r for r in rows if (r[0] + datetime.timedelta(seconds=10) if name == "tumble_close"
                                               else r[0]) <= wm_ts and r[0] not in closed_before]
                emitted[name].extend(closing)
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), emitted[name], f"{name} after round {i}")
    conn.close()


def test_a_closed_window_is_emitted_once_and_leaves_no_state(kafka_broker, conn):
    topic = f"d-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=1)
    conn.execute(f"CREATE SOURCE ev (k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) "
                 f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = "
                 f"'{kafka_broker.bootstrap}') FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW w AS SELECT window_start, count(*) AS n, sum(v) AS sv "
                 "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE")

    def send(*events):
        kafka_broker.produce(topic, [json.dumps({"k": 1, "v": v, "ts": f"2024-03-01 12:00:{s:02d}"})
                                     for v, s in events], partition=0)
        conn.flush()
        return sorted((r[0].second, r[1], r[2]) for r in conn.execute("SELECT * FROM w").fetchall())

    assert send((1, 1), (2, 5)) == []  # watermark 12:00:03
    assert send((4, 11)) == []  # watermark 12:00:09: [00, 10) still open
    assert send((8, 12), (16, 7)) == [(0, 3, 19)]  # watermark 12:00:10 closes it; :07 came in time
    assert send((32, 3), (64, 35)) == [(0, 3, 19), (10, 2, 12)]  # :03 is late, ignored; [20, 30) had no rows
    conn.compact()
    state = {s["name"]: s for s in conn.status()}["w"]
    # the two emitted rows, the one row of the open window [30, 40), and that window: the five rows of
    # the closed windows are gone from the buffer
    assert state["state_rows"] == 2 + 1 + 1


@st.composite
def lookup_workloads(draw):
    """Rounds of stream events and, before each barrier, changes to the dimension."""
    rounds = []
    for _ in range(draw(st.integers(1, 4))):
        events = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(-5, 20)), max_size=10))
        changes = draw(st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.sampled_from("abcde"))),
                                max_size=3))
        rounds.append((events, changes))
    return rounds


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(lookup_workloads())
def test_temporal_join_sees_the_dimension_as_of_each_epoch_and_never_retracts(
        kafka_broker, tmp_path_factory, rounds):
    topic = f"l-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=3)
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
    conn.execute(f"CREATE SOURCE ev (k INT, v INT) WITH (connector = 'kafka', topic = '{topic}', "
                 f"properties.bootstrap.server = '{kafka_broker.bootstrap}') FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE TABLE dim (k INT PRIMARY KEY, name VARCHAR)")
    conn.execute("CREATE MATERIALIZED VIEW inner_lookup AS SELECT ev.k, ev.v, dim.name FROM ev "
                 "JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() ON ev.k = dim.k WHERE ev.v >= 0")
    conn.execute("CREATE MATERIALIZED VIEW left_lookup_agg AS SELECT d.name, count(*) AS n, sum(e.v) AS sv FROM ev e "
                 "LEFT JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON e.k = d.k GROUP BY d.name")
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE joined (k INT, v INT, name VARCHAR, matched BOOLEAN)")
    dim: dict[int, str] = {}
    for i, (events, changes) in enumerate(rounds):
        for k, name in changes:
            if name is None:
                conn.execute(f"DELETE FROM dim WHERE k = {k}")
                dim.pop(k, None)
            else:
                conn.execute(f"DELETE FROM dim WHERE k = {k}")
                conn.execute(f"INSERT INTO dim VALUES ({k}, '{name}')")
                dim[k] = name
        by_partition: dict[int, list[str]] = {}
        for p, k, v in events:
            by_partition.setdefault(p, []).append(json.dumps({"k": k, "v": v}))
            # the dimension as of this epoch (its DML is sealed by the same barrier)
            oracle.execute("INSERT INTO joined VALUES (?, ?, ?, ?)", [k, v, dim.get(k), k in dim])
        for p, values in by_partition.items():
            kafka_broker.produce(topic, values, partition=p)
        conn.flush()
        assert_same(conn.execute("SELECT * FROM inner_lookup").fetchall(),
                    oracle.sql("SELECT k, v, name FROM joined WHERE matched AND v >= 0").fetchall(),
                    f"inner_lookup after round {i}")
        assert_same(conn.execute("SELECT * FROM left_lookup_agg").fetchall(),
                    oracle.sql("SELECT name, count(*), sum(v) FROM joined GROUP BY name").fetchall(),
                    f"left_lookup_agg after round {i}")
    conn.close()
