"""Tables with WATERMARK FOR: EMIT ON WINDOW CLOSE views over their rows and over TUMBLE windows,
against DuckDB over the rows the watermark admitted (late rows are dropped, as RisingWave does)."""
from __future__ import annotations

import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw

BASE = datetime.datetime(2024, 5, 6, 16, 0)
DELAY = datetime.timedelta(minutes=5)
VIEWS = {
    "rows_closed": "SELECT tm, foo FROM t WHERE foo > 0",
    "hour_max": "SELECT window_start, max(foo) AS top, count(*) AS n FROM tumble(t, tm, INTERVAL '1 hour') "
                "GROUP BY window_start",
}

# batches of rows (minutes after BASE, possibly NULL; a value), each followed by a FLUSH or not
batches = st.lists(st.tuples(
    st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 300)), st.integers(-2, 9)), min_size=1, max_size=5),
    st.booleans()), min_size=1, max_size=8)


def _ts(minutes):
    return None if minutes is None else BASE + datetime.timedelta(minutes=minutes)


def _lit(v):
    return "NULL" if v is None else (f"TIMESTAMP '{v}'" if isinstance(v, datetime.datetime) else str(v))


def _window_end(tm):
    return tm.replace(minute=0, second=0, microsecond=0) + datetime.timedelta(hours=1)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=batches, create_after=st.integers(0, 3))
def test_emit_on_window_close_over_a_table_equals_duckdb_over_the_admitted_rows(tmp_path_factory, batches,
                                                                                create_after):
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb")
    conn.execute("CREATE TABLE t (tm TIMESTAMP, foo INT, WATERMARK FOR tm AS tm - INTERVAL '5 minutes') APPEND ONLY")
    oracle = Oracle()
    oracle.execute("CREATE TABLE for_rows (tm TIMESTAMP, foo INT)")
    oracle.execute("CREATE TABLE for_windows (tm TIMESTAMP, foo INT)")
    created = False
    watermark = None  # the table's: the newest event time applied, minus the delay
    pending: list = []  # rows staged since the last FLUSH (the next epoch)
    for i, (rows, flush) in enumerate(batches):
        if i >= create_after and not created and not pending:
            for name, q in VIEWS.items():
                conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q} EMIT ON WINDOW CLOSE")
            created = True
        pending.extend((_ts(m), v) for m, v in rows)
        conn.execute("INSERT INTO t VALUES " + ", ".join(f"({_lit(_ts(m))}, {_lit(v)})" for m, v in rows))
        if not flush and i < len(batches) - 1:
            continue
        conn.execute("FLUSH")
        # a view starts from the table's rows as they are; after that, a step drops the rows
        # behind the watermark of the epoch before (rows), or in windows it closed (windows)
        for tm, foo in pending:
            if tm is None:
                continue
            values = f"({_lit(tm)}, {_lit(foo)})"
            if not created or watermark is None or tm >= watermark:
                oracle.execute(f"INSERT INTO for_rows VALUES {values}")
            if not created or watermark is None or _window_end(tm) > watermark:
                oracle.execute(f"INSERT INTO for_windows VALUES {values}")
        times = [tm for tm, _ in pending if tm is not None]
        if times:
            watermark = max(times) - DELAY if watermark is None else max(watermark, max(times) - DELAY)
        pending = []
        if created:
            wm = _lit(watermark) if watermark is not None else "TIMESTAMP '1970-01-01'"
            assert_same(conn.execute("SELECT * FROM rows_closed").fetchall(),
                        oracle.rows(f"SELECT tm, foo FROM for_rows WHERE foo > 0 AND tm < {wm}"), "rows_closed")
            assert_same(conn.execute("SELECT * FROM hour_max").fetchall(),
                        oracle.rows("SELECT time_bucket(INTERVAL '1 hour', tm) AS ws, max(foo), count(*) "
                                    f"FROM for_windows GROUP BY ws HAVING ws + INTERVAL '1 hour' <= {wm}"),
                        "hour_max")
    conn.close()
