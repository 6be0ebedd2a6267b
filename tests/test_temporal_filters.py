"""Temporal filters (RisingWave's `WHERE ts > now() - INTERVAL ...`): in a view, now() is the barrier
time of the epoch a step reaches, so rows leave the view (a lower bound) or enter it (an upper
bound) as epochs pass, even epochs that bring no input. Every view equals DuckDB running the same
query with now() replaced by that epoch's time, on both paths; the barriers' times come from the
connection's `clock` option. Shapes the views do not maintain (now() under OR, in a join condition,
in HAVING, compared by =, proctime()) are refused at CREATE by name, naming the view; now()
outside a comparison is refused; a batch SELECT (over a table or a view) may filter by now()."""
from __future__ import annotations

import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw

SCHEMA = "CREATE TABLE events (id INT PRIMARY KEY, ts TIMESTAMP, v INT)"
UTC = datetime.timezone.utc
START = datetime.datetime(2024, 1, 31, tzinfo=UTC)  # (a month's end: intervals of months vary around it)

WORKLOAD_SCHEMA = "CREATE TABLE events (id INT PRIMARY KEY, ts TIMESTAMP, tz TIMESTAMPTZ, v INT)"
VIEWS = {
    "recent": "SELECT * FROM events WHERE ts > now() - INTERVAL '1 day' AND v > 2",
    "delayed": "SELECT id, v FROM events WHERE ts <= now() - INTERVAL '6 hours'",
    "sliding": "SELECT id, ts FROM events WHERE ts BETWEEN now() - INTERVAL '12 hours' AND now() + INTERVAL '1 hour'",
    "shifted": "SELECT id FROM events WHERE ts + INTERVAL '90' MINUTE >= now() AND v IS NOT NULL",
    "per_v": "SELECT v, count(*) AS n FROM events WHERE ts > now() - INTERVAL '1 day' GROUP BY v",
    "two_columns": "SELECT id, v FROM events WHERE now() + INTERVAL '2 hours' > tz AND ts >= now() - INTERVAL '2 days'",
    "by_day": "SELECT id FROM events WHERE ts > date_trunc('day', now()) - INTERVAL '1 month' + INTERVAL '29 days'",
    "joined": "SELECT e.id, f.ts AS fts FROM events e JOIN events f ON e.v = f.id "
              "WHERE e.ts > now() - INTERVAL '1 day' AND f.ts < now()",
}
LATE = "late"  # created after the first flush, from the rows and the time of then
LATE_VIEW = "SELECT id, v FROM events WHERE ts > now() - INTERVAL '3 hours' AND ts < now() + INTERVAL '3 hours'"


def _ts(minutes: int | None) -> str:
    return "NULL" if minutes is None else \
        f"TIMESTAMP '{(START + datetime.timedelta(minutes=minutes)):%Y-%m-%d %H:%M:%S}'"


def _tz(minutes: int | None) -> str:
    return "NULL" if minutes is None else \
        f"TIMESTAMPTZ '{(START + datetime.timedelta(minutes=minutes)):%Y-%m-%d %H:%M:%S}+00'"


def _at(now: datetime.datetime, query: str) -> str:
    """The query as DuckDB runs it at `now`: now() replaced by that time."""
    return query.replace("now()", f"CAST('{now:%Y-%m-%d %H:%M:%S.%f}+00' AS TIMESTAMPTZ)")


minutes = st.one_of(st.none(), st.integers(-3 * 24 * 60, 3 * 24 * 60))
rows = st.lists(st.tuples(st.integers(0, 25), minutes, minutes, st.one_of(st.none(), st.integers(0, 5))),
                min_size=1, max_size=8)
epoch_changes = st.lists(st.one_of(
    st.tuples(st.just("insert"), rows),
    st.tuples(st.just("sql"), st.sampled_from(["DELETE FROM events WHERE id = {n}",
                                               "UPDATE events SET ts = ts + INTERVAL '5 hours' WHERE id = {n}",
                                               "UPDATE events SET v = v + 1 WHERE id = {n}"]), st.integers(0, 25)),
), max_size=3)
# per epoch: the changes before its barrier, and how far time moves (minutes; 0: the same time again)
workloads = st.lists(st.tuples(epoch_changes, st.sampled_from([0, 0, 7, 45, 180, 600, 1500])), min_size=2, max_size=5)


def run_workload(conn, clock: list[float], workload, label: str, views=VIEWS) -> None:
    """Every view equals DuckDB at every epoch's time, one view created after the first epoch."""
    oracle = Oracle()
    oracle.db.execute("SET TimeZone = 'UTC'")
    now = START
    clock[0] = now.timestamp()
    conn.execute(WORKLOAD_SCHEMA)
    oracle.execute(WORKLOAD_SCHEMA)
    views = dict(views)
    for name, q in views.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    for i, (changes, moved) in enumerate(workload):
        for change in changes:
            if change[0] == "insert":
                values = ", ".join(f"({k}, {_ts(a)}, {_tz(b)}, {'NULL' if v is None else v})"
                                   for k, a, b, v in dict((r[0], r) for r in change[1]).values())
                conn.execute(f"INSERT INTO events VALUES {values}")
                oracle.upsert("events", values)
            else:
                sql = change[1].format(n=change[2])
                conn.execute(sql)
                oracle.execute(sql)
        now += datetime.timedelta(minutes=moved)
        clock[0] = now.timestamp()
        conn.execute("FLUSH")
        if i == 0:
            conn.execute(f"CREATE MATERIALIZED VIEW {LATE} AS {LATE_VIEW}")
            views[LATE] = LATE_VIEW
        for name, q in views.items():
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(_at(now, q)),
                        f"{name} at epoch {i} ({now}, {label})")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads)
def test_views_with_temporal_filters_equal_duckdb_at_every_epochs_time(tmp_path_factory, workload):
    clock = [0.0]
    with dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb", clock=lambda: clock[0]) as conn:
        run_workload(conn, clock, workload, "in-process")


# on Spark (each step pays fixed jobs): a lower bound with another predicate, a sliding window, two
# filters on two columns (TIMESTAMP and TIMESTAMPTZ) one over the other, and the view created late
SPARK_VIEWS = ("recent", "sliding", "two_columns")
SPARK_WORKLOAD = [
    ([("insert", [(1, -30, -30, 3), (2, -600, 100, 4), (3, 60, -2000, 5), (4, None, 5, 1), (5, -1500, 0, 3),
                  (6, 200, -100, None), (7, -2000, -2000, 4)])], 0),
    ([("sql", "DELETE FROM events WHERE id = {n}", 5), ("insert", [(8, 90, 90, 3), (1, -10, -10, 4)])], 180),
    ([("sql", "UPDATE events SET ts = ts + INTERVAL '5 hours' WHERE id = {n}", 2)], 600),
]


@pytest.mark.spark
@pytest.mark.timeout(1200)  # under a heavy load of the machine, past the 600 s default
def test_views_with_temporal_filters_equal_duckdb_at_every_epochs_time_on_spark(tmp_path, spark):
    clock = [0.0]
    with dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine="spark", clock=lambda: clock[0]) as conn:
        run_workload(conn, clock, SPARK_WORKLOAD, "spark", {name: VIEWS[name] for name in SPARK_VIEWS})
        assert {s["engine"] for s in conn.status() if s["kind"] == "materialized_view"} == {"spark"}


def _state_rows(conn, view: str, table: str) -> int:
    """The rows of a view's state table `table` (after compaction: live rows only)."""
    conn.compact(view)
    state = conn.wh.manifest(view).state
    (name,) = [n for n in state if n.endswith(f".{table}")]
    return sum(f.rows for f in state[name])


def test_a_lower_bound_forgets_the_rows_it_expired_and_an_idle_epoch_expires_them(tmp_path):
    clock = [START.timestamp()]
    with dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb", clock=lambda: clock[0]) as conn:
        conn.execute(SCHEMA)
        conn.execute("CREATE MATERIALIZED VIEW recent AS SELECT id FROM events WHERE ts > now() - INTERVAL '1 hour'")
        conn.execute("CREATE MATERIALIZED VIEW everything AS SELECT id FROM events")
        # one row per 10 minutes, from 50 minutes ago to 40 minutes ahead
        conn.execute("INSERT INTO events VALUES " + ", ".join(f"({i}, {_ts(10 * i - 50)}, {i})" for i in range(10)))
        conn.execute("FLUSH")
        assert _state_rows(conn, "recent", "rows") == 10
        before = conn.wh.manifest("everything").epoch

        clock[0] += 35 * 60  # no input: time alone expires ids 0, 1 and 2 (older than an hour by then)
        conn.execute("FLUSH")
        m = conn.wh.manifest("recent")
        assert m.epoch > before and m.stats["rows_deleted"] == 3
        assert sorted(r[0] for r in conn.execute("SELECT id FROM recent").fetchall()) == list(range(3, 10))
        assert _state_rows(conn, "recent", "rows") == 7  # the expired rows are gone from the state
        idle = conn.wh.manifest("everything")  # (a view without one moves on without a step)
        assert idle.epoch == m.epoch and idle.stats["rows_in"] == 0 and idle.stats["rows_deleted"] == 0

        clock[0] += 2 * 3600  # every row expired
        conn.execute("FLUSH")
        assert conn.execute("SELECT count(*) FROM recent").fetchall() == [(0,)]
        assert _state_rows(conn, "recent", "rows") == 0
        assert conn.execute("SELECT count(*) FROM everything").fetchall() == [(10,)]


def test_upper_bounds_alone_keep_only_the_rows_still_to_enter(tmp_path):
    clock = [START.timestamp()]
    with dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb", clock=lambda: clock[0]) as conn:
        conn.execute(SCHEMA)
        conn.execute("CREATE MATERIALIZED VIEW due AS SELECT id FROM events WHERE ts <= now()")
        conn.execute("INSERT INTO events VALUES " + ", ".join(f"({i}, {_ts(10 * i - 50)}, {i})" for i in range(10)))
        conn.execute("FLUSH")
        assert sorted(r[0] for r in conn.execute("SELECT id FROM due").fetchall()) == list(range(6))
        assert _state_rows(conn, "due", "rows") == 4  # ids 6..9, not yet due
        clock[0] += 20 * 60
        conn.execute("FLUSH")
        assert sorted(r[0] for r in conn.execute("SELECT id FROM due").fetchall()) == list(range(8))
        assert _state_rows(conn, "due", "rows") == 2


def test_a_view_lagging_several_epochs_catches_up_to_its_target_epochs_time(tmp_path):
    clock = [START.timestamp()]
    with dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb", clock=lambda: clock[0]) as conn:
        conn.execute(SCHEMA)
        conn.execute("CREATE MATERIALIZED VIEW sliding AS SELECT id FROM events "
                     "WHERE ts > now() - INTERVAL '1 hour' AND ts <= now()")
        for minute in (0, 30, 60):  # three epochs, the view left behind: at each a row 10 minutes ahead
            conn.execute(f"INSERT INTO events VALUES ({minute}, {_ts(minute + 10)}, 1)")
            clock[0] = (START + datetime.timedelta(minutes=minute)).timestamp()
            conn.barrier()
            conn.refresh("events")
        assert {s["name"]: s for s in conn.status()}["sliding"]["lag_epochs"] == 3
        conn.refresh("sliding")  # one step, at the newest epoch's time (minute 60): the rows at 10 and 40
        assert sorted(conn.execute("SELECT id FROM sliding").fetchall()) == [(0,), (30,)]


def test_now_never_moves_back_when_the_clock_does(tmp_path):
    clock = [START.timestamp()]
    with dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb", clock=lambda: clock[0]) as conn:
        conn.execute(SCHEMA)
        conn.execute("CREATE MATERIALIZED VIEW recent AS SELECT id FROM events WHERE ts > now() - INTERVAL '1 hour'")
        conn.execute(f"INSERT INTO events VALUES (1, {_ts(-50)}, 1), (2, {_ts(0)}, 2)")
        clock[0] += 30 * 60
        conn.execute("FLUSH")
        assert conn.execute("SELECT id FROM recent").fetchall() == [(2,)]
        clock[0] -= 3600  # a barrier recording an earlier time: the view keeps the later one
        conn.execute(f"INSERT INTO events VALUES (3, {_ts(-45)}, 3)")
        conn.execute("FLUSH")
        assert conn.execute("SELECT id FROM recent").fetchall() == [(2,)]


def test_explain_shows_the_temporal_filter_and_its_state(conn):
    conn.execute(SCHEMA)
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN CREATE MATERIALIZED VIEW w AS SELECT id FROM events "
        "WHERE v > 1 AND ts BETWEEN now() - INTERVAL '1 hour' AND now()").fetchall())
    assert "StreamTemporalFilter { condition: ts >= NOW() - INTERVAL '1 HOUR' AND ts <= NOW()" in plan
    assert "until a lower bound expires them" in plan


def test_a_table_as_select_takes_a_delay_but_not_a_lower_bound(conn):
    conn.execute("CREATE TABLE clicks (id INT, ts TIMESTAMP) APPEND ONLY")
    conn.execute("CREATE TABLE settled AS SELECT id FROM clicks WHERE ts < now() - INTERVAL '5 minutes'")
    with pytest.raises(dagster_rw.ProgrammingError, match="can update or delete its rows"):
        conn.execute("CREATE TABLE fresh AS SELECT id FROM clicks WHERE ts > now() - INTERVAL '5 minutes'")


@pytest.mark.parametrize("query, place", [
    ("SELECT count(*) FROM events WHERE ts > proctime() - INTERVAL '1 day'",
     "proctime() is the time a row is processed"),
    ("SELECT id FROM events WHERE v > 1 OR ts BETWEEN now() - INTERVAL '1 day' AND now()", "under OR"),
    ("SELECT e.id FROM events e JOIN events f ON e.id = f.id AND f.ts > now() - INTERVAL '5 minutes'",
     "in a join condition"),
    ("SELECT v, count(*) FROM events GROUP BY v HAVING max(ts) > now() - INTERVAL '1 day'", "in HAVING"),
    ("SELECT id FROM events WHERE ts = now()", "by ="),
    ("SELECT id FROM events WHERE ts > INTERVAL '1 day' - now()", "now() plus or minus a constant"),
])
def test_temporal_filters_in_other_shapes_are_refused_at_create_naming_the_view_and_the_shape(conn, query, place):
    conn.execute(SCHEMA)
    with pytest.raises(dagster_rw.ProgrammingError, match=r"not supported in 'recent': temporal filters \(") as e:
        conn.execute(f"CREATE MATERIALIZED VIEW recent AS {query}")
    assert place in str(e.value) and "SELECT over the view" in str(e.value)
    assert "recent" not in [r[0] for r in conn.execute("SHOW MATERIALIZED VIEWS").fetchall()]


def test_a_now_side_that_is_not_a_time_is_refused(conn):
    conn.execute(SCHEMA)
    with pytest.raises(dagster_rw.ProgrammingError, match=r"not supported in 'recent': a temporal filter whose now\(\) "
                                                          r"side .* is not a time"):
        conn.execute("CREATE MATERIALIZED VIEW recent AS SELECT id FROM events WHERE ts > now() + 1")
    with pytest.raises(dagster_rw.ProgrammingError, match=r"a temporal filter comparing integer \(v\) with now\(\)"):
        conn.execute("CREATE MATERIALIZED VIEW recent AS SELECT id FROM events WHERE v > now() - INTERVAL '1 day'")


def test_now_outside_a_filter_is_refused_and_random_stays_non_deterministic(conn):
    conn.execute(SCHEMA)
    with pytest.raises(dagster_rw.ProgrammingError, match=r"now\(\) in a view \(its value would be the time"):
        conn.execute("CREATE MATERIALIZED VIEW stamped AS SELECT id, now() AS seen FROM events")
    with pytest.raises(dagster_rw.ProgrammingError, match=r"the non-deterministic function random\(\)"):
        conn.execute("CREATE MATERIALIZED VIEW noisy AS SELECT id FROM events WHERE v > random()")


def test_a_select_over_the_view_filters_by_now(conn):
    conn.execute(SCHEMA)
    conn.execute("CREATE MATERIALIZED VIEW all_events AS SELECT id, ts FROM events")
    conn.execute("INSERT INTO events VALUES (1, TIMESTAMP '2000-01-01 00:00:00', 1), (2, TIMESTAMP '2999-01-01 00:00:00', 2)")
    conn.execute("FLUSH")
    assert conn.execute("SELECT id FROM all_events WHERE ts > now() - INTERVAL '1 hour'").fetchall() == [(2,)]
    assert conn.execute("SELECT id FROM events WHERE ts > now() - INTERVAL '1 hour'").fetchall() == [(2,)]
