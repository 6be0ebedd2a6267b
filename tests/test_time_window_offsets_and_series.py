"""TUMBLE and HOP with an offset (RisingWave's optional last argument: every window shifted by it,
window_start = t - (t - offset) mod slide) over a table's view, and generate_series over integers or
timestamps in FROM (constant arguments: a constant relation, read alone or joined with tables).
Each view equals DuckDB's answer over the same base data under inserts, updates and deletes; the
oracle's windows are written independently of the planner's (time_bucket from an origin shifted by
the offset; a HOP as the windows of its slide counted back). Spark: SERIES_AND_OFFSETS_BOTH_PATHS
runs in test_both_paths' one run."""
from __future__ import annotations

import datetime

import pytest
from both_paths import run_on
from test_differential import SCHEMA, _workload_test

import dagster_rw

# a table's rows with a time: 13 minutes per id, shifted by v (0..2.9 hours past midnight)
TIMES = ("SELECT id, k, v, TIMESTAMP '2024-01-01 00:00:00' + id * INTERVAL '13 minutes' "
         "+ COALESCE(v, 0) * INTERVAL '53 seconds' AS ts, "
         "TIMESTAMPTZ '2024-01-01 00:00:00+00' + id * INTERVAL '13 minutes' AS tz FROM t1")
SETUP = [(f"CREATE MATERIALIZED VIEW t1_times AS {TIMES}", f"CREATE VIEW t1_times AS {TIMES}")]


def bucket(size: str, origin: str, column: str = "ts") -> str:
    """DuckDB's window start: buckets of `size` counted from `origin` (the epoch plus the offset)."""
    tz = "TIMESTAMPTZ" if column == "tz" else "TIMESTAMP"
    return f"time_bucket(INTERVAL '{size}', {column}, {tz} '{origin}')"


TIME_WINDOW_OFFSETS = {
    "tumble_offset": (
        "SELECT id, k, window_start, window_end FROM TUMBLE(t1_times, ts, INTERVAL '1 hour', INTERVAL '10 minutes')",
        f"SELECT id, k, {bucket('1 hour', '1970-01-01 00:10:00')}, "
        f"{bucket('1 hour', '1970-01-01 00:10:00')} + INTERVAL '1 hour' FROM t1_times"),
    "tumble_negative_offset_agg": (
        "SELECT k, window_start, count(*) AS n, sum(v) AS sv FROM TUMBLE(t1_times, ts, INTERVAL '30 minutes', "
        "INTERVAL '-7 minutes') GROUP BY k, window_start",
        f"SELECT k, {bucket('30 minutes', '1969-12-31 23:53:00')} AS ws, count(*), sum(v) "
        "FROM t1_times GROUP BY k, ws"),
    # an offset larger than the window: the same windows as its remainder
    "hop_offset_agg": (
        "SELECT window_start, window_end, count(*) AS n, max(v) AS mx FROM HOP(t1_times, ts, "
        "INTERVAL '20 minutes', INTERVAL '1 hour', INTERVAL '65 minutes') GROUP BY window_start, window_end",
        f"SELECT ws, ws + INTERVAL '1 hour', count(*), max(v) FROM (SELECT v, "
        f"{bucket('20 minutes', '1970-01-01 00:05:00')} - i * INTERVAL '20 minutes' AS ws "
        "FROM t1_times, range(0, 3) r(i)) w GROUP BY ws"),
    "hop_offset_tz": (
        "SELECT id, window_start, window_end FROM HOP(t1_times, tz, INTERVAL '30 minutes', INTERVAL '1 hour', "
        "INTERVAL '15 minutes')",
        f"SELECT id, ws, ws + INTERVAL '1 hour' FROM (SELECT id, "
        f"{bucket('30 minutes', '1970-01-01 00:15:00+00', 'tz')} - i * INTERVAL '30 minutes' AS ws "
        "FROM t1_times, range(0, 2) r(i)) w"),
}

def hop_windows(slide: str, count: int, origin: str = "1970-01-01 00:00:00", column: str = "ts") -> str:
    """The oracle's HOP: each row of t1_times once per window holding it, as `ws`."""
    return (f"(SELECT *, {bucket(slide, origin, column)} - i * INTERVAL '{slide}' AS ws "
            f"FROM t1_times, range(0, {count}) r(i)) w")


# aggregates over HOP windows, which the planner takes per slide first and then per window
# (rewrites.hop_slices); the oracle counts each row once per window
HOP_SLICES = {
    "hop_slices_all": (
        "SELECT k, window_start, window_end, count(*) AS n, count(v) AS cv, min(v) AS mn, max(v) AS mx, "
        "sum(v) AS sv, sum(CAST(v AS BIGINT) * 3000000000) AS big, sum(CAST(v AS NUMERIC(10,2)) + 0.25) AS dec "
        "FROM HOP(t1_times, ts, INTERVAL '20 minutes', INTERVAL '1 hour') GROUP BY k, window_start, window_end",
        f"SELECT k, ws, ws + INTERVAL '1 hour', count(*), count(v), min(v), max(v), sum(v), "
        f"sum(CAST(v AS BIGINT) * 3000000000), sum(CAST(v AS NUMERIC(10,2)) + 0.25) FROM {hop_windows('20 minutes', 3)} "
        "GROUP BY k, ws"),
    # a filter on the rows, a condition on the windows, the window's end alone, an offset, timestamptz
    "hop_slices_having_tz": (
        "SELECT h.window_end, count(*) * 10 AS n10, max(h.v) - min(h.v) AS spread FROM HOP(t1_times, tz, "
        "INTERVAL '30 minutes', INTERVAL '2 hours', INTERVAL '10 minutes') AS h WHERE h.v IS NULL OR h.v > 1 "
        "GROUP BY h.window_end HAVING count(v) > 1",
        f"SELECT ws + INTERVAL '2 hours', count(*) * 10, max(v) - min(v) FROM "
        f"{hop_windows('30 minutes', 4, '1970-01-01 00:10:00+00', 'tz')} WHERE v IS NULL OR v > 1 "
        "GROUP BY ws HAVING count(v) > 1"),
}

HOURS = "TIMESTAMP '2024-01-01 00:00:00', TIMESTAMP '2024-01-01 03:00:00', INTERVAL '30 minutes'"
SERIES = {
    "series_hours": f"SELECT x FROM generate_series({HOURS}) AS g(x)",
    "series_descending": "SELECT n FROM generate_series(10, 1, -3) g(n)",
    "series_days_tz": "SELECT count(*) AS n, min(d) AS lo, max(d) AS hi FROM generate_series("
                      "TIMESTAMPTZ '2024-01-01 00:00:00+00', TIMESTAMPTZ '2024-01-09 12:00:00+00', "
                      "INTERVAL '1 day') AS g(d)",
    "series_join_table": "SELECT t1.id, g.n FROM t1 JOIN generate_series(1, 3) g(n) ON t1.k = g.n",
    "series_comma_join": "SELECT t1.id, g.n FROM t1, generate_series(0, 4, 2) AS g(n) WHERE t1.v > g.n",
    # each row of the table in the half-hour slots of the series that hold its time
    "series_time_slots": ("SELECT t1_times.id, g.slot FROM t1_times JOIN generate_series("
                          f"{HOURS}) AS g(slot) ON t1_times.ts >= g.slot "
                          "AND t1_times.ts < g.slot + INTERVAL '30 minutes'"),
    # in the select list, a series of timestamps per row (a row's own columns as bounds)
    "series_per_row": "SELECT id, generate_series(ts, ts + INTERVAL '1 hour', INTERVAL '25 minutes') AS x "
                      "FROM t1_times",
}

test_time_window_offsets_match_duckdb = _workload_test(TIME_WINDOW_OFFSETS, setup=SETUP)
test_generate_series_in_from_matches_duckdb = _workload_test(SERIES, setup=SETUP)
test_hop_aggregates_over_slices_match_duckdb = _workload_test(HOP_SLICES, setup=SETUP)

# for test_both_paths' one run on Spark and in-process (its views are created in this order)
SERIES_AND_OFFSETS_BOTH_PATHS = {
    "t1_times": TIMES,
    "tumble_offset_both": TIME_WINDOW_OFFSETS["tumble_offset"],
    "hop_offset_both": TIME_WINDOW_OFFSETS["hop_offset_agg"],
    "hop_slices_both": HOP_SLICES["hop_slices_having_tz"],
    "series_hours_both": SERIES["series_hours"],
    "series_join_both": SERIES["series_join_table"],
    "series_per_row_both": SERIES["series_per_row"],
}


def test_offsets_shift_the_windows_as_risingwave(conn):
    conn.execute("CREATE TABLE ev (id INT PRIMARY KEY, ts TIMESTAMP)")
    conn.execute("CREATE MATERIALIZED VIEW w AS SELECT id, window_start, window_end "
                 "FROM TUMBLE(ev, ts, INTERVAL '5' MINUTE, INTERVAL '2' MINUTE)")
    conn.execute("INSERT INTO ev VALUES (1, TIMESTAMP '2020-06-20 12:23:40'), (2, TIMESTAMP '2020-06-20 12:21:40')")
    conn.execute("FLUSH")
    t = datetime.datetime
    assert sorted(conn.execute("SELECT * FROM w").fetchall()) == [
        (1, t(2020, 6, 20, 12, 22), t(2020, 6, 20, 12, 27)), (2, t(2020, 6, 20, 12, 17), t(2020, 6, 20, 12, 22))]
    # a batch SELECT aligns its windows as the view does
    assert sorted(conn.execute("SELECT id, window_start FROM TUMBLE(ev, ts, INTERVAL '5' MINUTE, "
                               "INTERVAL '2' MINUTE)").fetchall()) == [(1, t(2020, 6, 20, 12, 22)),
                                                                       (2, t(2020, 6, 20, 12, 17))]


def test_a_series_in_from_is_named_as_postgresql_names_it(conn):
    conn.execute("CREATE MATERIALIZED VIEW a AS SELECT * FROM generate_series(1, 2)")
    conn.execute("CREATE MATERIALIZED VIEW b AS SELECT * FROM generate_series(1, 2) g")
    conn.execute("CREATE MATERIALIZED VIEW c AS SELECT g.x FROM generate_series(1, 2) AS g(x)")
    conn.execute("FLUSH")
    for view, column in [("a", "generate_series"), ("b", "g"), ("c", "x")]:
        cur = conn.execute(f"SELECT * FROM {view}")
        assert [d[0] for d in cur.description] == [column]
        assert sorted(cur.fetchall()) == [(1,), (2,)]


@pytest.mark.parametrize("query, error", [
    ("SELECT * FROM TUMBLE(t1_times, ts, INTERVAL '1 hour', INTERVAL '1 month')", "TUMBLE offset in months"),
    ("SELECT * FROM TUMBLE(t1_times, ts, INTERVAL '1 hour', 5)", "TUMBLE offset that is not an INTERVAL"),
    ("SELECT * FROM t1, t1_times, generate_series(1, t1.v) g(n)", "generate_series\\(\\) in FROM over columns"),
    ("SELECT * FROM generate_series(1, 3) WITH ORDINALITY g(n, i)", "WITH ORDINALITY"),
    ("SELECT * FROM generate_series(TIMESTAMP '2024-01-01', TIMESTAMP '2024-02-01', INTERVAL '1 month') g",
     "GENERATE_SERIES step in months"),
    ("SELECT * FROM generate_series(DATE '2024-01-01', TIMESTAMP '2024-02-01', INTERVAL '1 day') g",
     "generate_series over date and timestamp"),
    ("SELECT * FROM generate_series(TIMESTAMP '2024-01-01', TIMESTAMP '2024-02-01') g", "needs an INTERVAL step"),
    ("SELECT * FROM generate_series(1, 3, 0) g", "step size cannot equal zero"),
    ("SELECT * FROM generate_series(1, 3) g(a, b)", "returns one column, 2 aliases"),
    ("SELECT * FROM unnest(ARRAY[1, 2]) u", "UNNEST"),
])
def test_unsupported_series_and_window_shapes_are_refused_at_create_by_name(conn, query, error):
    conn.execute(SCHEMA[0])
    conn.execute(f"CREATE MATERIALIZED VIEW t1_times AS {TIMES}")
    with pytest.raises(dagster_rw.Error, match=error) as e:
        conn.execute(f"CREATE MATERIALIZED VIEW bad AS {query}")
    assert "'bad'" in str(e.value)


def test_series_and_offsets_of_the_both_paths_run_in_process(tmp_path):
    run_on(str(tmp_path), None, "duckdb", SERIES_AND_OFFSETS_BOTH_PATHS)
