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
}

DIM = [(0, "zero"), (1, "one"), (2, "two")]

@st.composite
def workloads(draw):
    rounds = draw(st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3),
                                              st.one_of(st.none(), st.integers(-20, 100)),
                                              st.integers(-90, 90), st.integers(0, 9)),
                                    max_size=25), min_size=1, max_size=4))
    bound = draw(st.one_of(st.none(), st.integers(1, 8)))
    late_view = draw(st.booleans())
    return rounds, bound, late_view


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(workloads())
def test_windowed_views_over_a_kafka_source_equal_duckdb(kafka_broker, tmp_path_factory, workload):
    rounds, bound, late_view = workload
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
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name][0]}")
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE ev (k INT, v INT, ts TIMESTAMP)")
    oracle.execute("CREATE TABLE dim (k INT, name VARCHAR)")
    oracle.executemany("INSERT INTO dim VALUES (?, ?)", DIM)
    produced = 0
    for i, batch in enumerate(rounds):
        by_partition: dict[int, list[str]] = {}
        for p, k, v, secs, bad in batch:
            ts = EPOCH0 + datetime.timedelta(seconds=secs, milliseconds=secs * 7 % 1000)
            if bad == 0:  # one record in ten does not decode: it must not count anywhere
                by_partition.setdefault(p, []).append('{"k": "not a number"}')
                continue
            by_partition.setdefault(p, []).append(json.dumps({"k": k, "v": v, "ts": ts.isoformat(sep=" ")}))
            oracle.execute("INSERT INTO ev VALUES (?, ?, ?)", [k, v, ts])
            produced += 1
        for p, values in by_partition.items():
            kafka_broker.produce(topic, values, partition=p)
        while True:  # a bounded source needs several barriers to drain: each is a consistent cut
            conn.flush()
            if not conn.pending_inputs():
                break
        if late_view and i == 0:
            for name in names[2:]:
                conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name][0]}")
        for name in names:
            actual = conn.execute(f"SELECT * FROM {name}").fetchall()
            expected = oracle.sql(VIEWS[name][1]).fetchall()
            assert_same(actual, expected, f"{name} after round {i}")
    assert conn.execute("SELECT count(*) FROM ev").fetchall() == [(produced,)]
    conn.close()
