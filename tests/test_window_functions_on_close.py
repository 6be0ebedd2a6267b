"""EMIT ON WINDOW CLOSE over window functions ordered by event time: each row is emitted once the
watermark passes it, with its window functions' values over the rows before it, and never
retracted. The oracle: DuckDB's window functions over the rows the watermark has passed (rows
behind the watermark of the epoch before theirs are late and never emitted), on random rounds of
events, each round one epoch."""
from __future__ import annotations

import datetime

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same

import dagster_rw

T0 = datetime.datetime(2024, 3, 1, 12, 0, 0)
DELAY = datetime.timedelta(seconds=5)
TABLE = "CREATE TABLE ev (id INT, k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"

VIEWS = {
    "on_close_ranks": "SELECT id, k, ts, row_number() OVER (PARTITION BY k ORDER BY ts, id) AS rn, "
                      "rank() OVER (PARTITION BY k ORDER BY ts) AS rk, "
                      "dense_rank() OVER (ORDER BY ts) AS dr FROM ev",
    "on_close_offsets": "SELECT id, lag(v, 1, -1) OVER (PARTITION BY k ORDER BY ts, id) AS pv, "
                        "sum(v) OVER (PARTITION BY k ORDER BY ts, id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s3, "
                        "count(*) OVER (PARTITION BY k ORDER BY ts) AS c FROM ev",
    "on_close_values": "SELECT id, k, first_value(v) OVER (PARTITION BY k ORDER BY ts, id) AS fv, "
                       "max(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING "
                       "AND CURRENT ROW) AS mx FROM ev WHERE v IS NULL OR v > -3",
}

event = st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(-5, 20)), st.integers(-20, 30))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(rounds=st.lists(st.lists(event, min_size=1, max_size=6), min_size=1, max_size=6))
def test_window_functions_emitted_on_close_equal_duckdb_over_the_rows_the_watermark_passed(tmp_path_factory, rounds):
    check_rounds(dagster_rw.connect(str(tmp_path_factory.mktemp("wh"))), rounds)


@pytest.mark.spark
def test_window_functions_emitted_on_close_on_spark(tmp_path, spark):
    rounds = [[(0, 3, 0), (1, 7, 2), (0, None, 4), (2, 1, -3)],
              [(0, 9, 1), (0, 2, -8), (1, 5, 12), (2, 4, 7)],
              [(1, 6, 3), (0, 1, 25), (2, 8, 9)]]
    check_rounds(dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine="spark"), rounds, engine="spark")


def check_rounds(conn, rounds, engine: str | None = None) -> None:
    """Each round of (k, v, seconds from the round's clock) inserted and flushed; every view then
    equals DuckDB's window functions over the rows the watermark has passed."""
    conn.execute(TABLE)
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql} EMIT ON WINDOW CLOSE")
    oracle = duckdb.connect()
    oracle.execute("CREATE TABLE ev (id INT, k INT, v INT, ts TIMESTAMP)")
    watermark, next_id = None, 0
    for r, events in enumerate(rounds):
        clock = T0 + datetime.timedelta(seconds=10 * r)
        rows = []
        for k, v, offset in events:
            rows.append((next_id, k, v, clock + datetime.timedelta(seconds=offset)))
            next_id += 1
        conn.execute("INSERT INTO ev VALUES " + ", ".join(
            f"({i}, {k}, {'NULL' if v is None else v}, '{ts}')" for i, k, v, ts in rows))
        conn.execute("FLUSH")
        # not late: at or after the watermark of the epoch before; the watermark then moves on
        kept = [row for row in rows if watermark is None or row[3] >= watermark]
        newest = max(row[3] for row in rows) - DELAY
        watermark = newest if watermark is None else max(watermark, newest)
        if kept:
            oracle.executemany("INSERT INTO ev VALUES (?, ?, ?, ?)", kept)
        for name, sql in VIEWS.items():
            expected = oracle.sql(f"WITH ev AS (SELECT * FROM main.ev WHERE ts < TIMESTAMP '{watermark}') {sql}")
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), expected.fetchall(), f"{name} round {r}")
    if engine is not None:
        assert {s["engine"] for s in conn.status() if s["name"] in VIEWS} == {engine}
    conn.close()


def test_a_row_is_emitted_once_its_time_has_passed_and_never_amended(conn):
    conn.execute(TABLE)
    conn.execute("CREATE MATERIALIZED VIEW running AS SELECT id, sum(v) OVER (PARTITION BY k ORDER BY ts) AS total, "
                 "lag(id) OVER (PARTITION BY k ORDER BY ts) AS before FROM ev EMIT ON WINDOW CLOSE")
    conn.execute("INSERT INTO ev VALUES (1, 0, 10, '2024-03-01 12:00:00'), (2, 0, 20, '2024-03-01 12:00:03')")
    conn.execute("FLUSH")  # the watermark is 11:59:58: nothing is behind it
    assert conn.execute("SELECT * FROM running").fetchall() == []
    conn.execute("INSERT INTO ev VALUES (3, 0, 5, '2024-03-01 12:00:01'), (4, 0, 1, '2024-03-01 12:00:09')")
    conn.execute("FLUSH")  # the watermark is 12:00:04
    assert sorted(conn.execute("SELECT * FROM running").fetchall()) == [(1, 10, None), (2, 35, 3), (3, 15, 1)]
    conn.execute("INSERT INTO ev VALUES (5, 0, 100, '2024-03-01 12:00:02'), (6, 0, 2, '2024-03-01 12:01:00')")
    conn.execute("FLUSH")  # 12:00:02 is late; 12:00:09 is passed
    assert sorted(conn.execute("SELECT * FROM running").fetchall()) == \
        [(1, 10, None), (2, 35, 3), (3, 15, 1), (4, 36, 2)]


@pytest.mark.parametrize("select, construct", [
    ("SELECT id, lead(v) OVER (PARTITION BY k ORDER BY ts) AS nv FROM ev", "lead"),
    ("SELECT id, sum(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS s FROM ev",
     "FOLLOWING with EMIT ON WINDOW CLOSE"),
    ("SELECT id, row_number() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM ev", "does not start with the event time"),
    ("SELECT id, row_number() OVER (PARTITION BY k ORDER BY v, ts) AS rn FROM ev", "does not start with the event time"),
    ("SELECT id, row_number() OVER (ORDER BY ts) AS rn FROM t", "does not start with the event time"),
])
def test_window_functions_that_cannot_close_are_refused_by_name(conn, select, construct):
    conn.execute(TABLE)
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP)")
    with pytest.raises(dagster_rw.Error, match=construct):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {select} EMIT ON WINDOW CLOSE")
