"""TUMBLE and HOP in batch SELECTs equal DuckDB's windows (time_bucket, a series of starts) over the same rows."""
from __future__ import annotations

import datetime

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same

import dagster_rw

T0 = datetime.datetime(2026, 11, 22, 8, 0, 0)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-3600, 3600)), max_size=40))
def test_batch_tumble_and_hop(tmp_path_factory, rows):
    data = [(k, T0 + datetime.timedelta(seconds=s)) for k, s in rows]
    db = duckdb.connect()
    db.execute("CREATE TABLE ev (k INT, ts TIMESTAMP)")
    if data:
        db.executemany("INSERT INTO ev VALUES (?, ?)", data)
    with dagster_rw.connect(str(tmp_path_factory.mktemp("wh"))) as conn:
        conn.execute("CREATE TABLE ev (k INT, ts TIMESTAMP)")
        if data:
            conn.execute("INSERT INTO ev VALUES " + ", ".join(f"({k}, TIMESTAMP '{t}')" for k, t in data))
        conn.flush()
        got = conn.execute("SELECT k, window_start, window_end, count(*) FROM TUMBLE(ev, ts, INTERVAL '7' MINUTE) "
                           "GROUP BY k, window_start, window_end").fetchall()
        want = db.sql("SELECT k, time_bucket(INTERVAL '7 minutes', ts, TIMESTAMP '1970-01-01') AS ws, "
                      "ws + INTERVAL '7 minutes', count(*) FROM ev GROUP BY ALL").fetchall()
        assert_same(got, want, "tumble")
        got = conn.execute("SELECT window_start, count(*) FROM HOP(ev, ts, INTERVAL '10' MINUTE, INTERVAL '30' MINUTE) w "
                           "WHERE w.k > 0 GROUP BY window_start").fetchall()
        want = db.sql("SELECT time_bucket(INTERVAL '10 minutes', ts, TIMESTAMP '1970-01-01') - i * INTERVAL '10 minutes', "
                      "count(*) FROM ev, range(0, 3) r(i) WHERE k > 0 GROUP BY ALL").fetchall()
        assert_same(got, want, "hop")
