"""Continuous mode (runtime/continuous.py, `dagster-rw run`): a long-lived loop cuts a barrier each
interval while inputs have something new and advances every object.

The loop runs in a subprocess as a deployment runs it; rows come from this process. It is killed
with SIGKILL at whatever point it has reached and started again: nothing accepted is lost or
doubled, and the views equal DuckDB's answer. SIGTERM stops it cleanly. In Dagster, each epoch it
commits is one runless materialization per object that advanced, with the step's metadata.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import dagster as dg
import pytest
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.dagster.continuous import EpochReporter
from dagster_rw.runtime import epochs

VIEWS = {
    "by_k": "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
    "total": "SELECT count(*) AS n, sum(v) AS s FROM t",
}
DEADLINE = 120.0  # seconds: a bound on waiting for progress that never comes, not a performance figure


def _schema(conn) -> None:
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    conn.execute("FLUSH")


def _check(conn, rows: list[tuple]) -> None:
    conn.wh.sync()
    assert sorted(conn.execute("SELECT * FROM t").fetchall()) == sorted(rows)
    oracle = Oracle()
    oracle.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    if rows:
        oracle.execute("INSERT INTO t VALUES " + ", ".join(str(r) for r in rows))
    for name, sql in VIEWS.items():
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(sql), name)


def _view_epochs(conn) -> list[int]:
    conn.wh.sync()
    return [conn.wh.manifest(name).epoch for name in VIEWS]


def _wait(what: str, condition) -> None:
    """Wait until `condition()` holds (each check reads the warehouse again)."""
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"continuous mode: {what} did not happen within {DEADLINE:.0f} s")
        time.sleep(0.02)


def _loop(root: str, interval: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dagster_rw.cli", "--warehouse", root, "--engine", "duckdb", "run",
         "--interval", str(interval)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_rows_from_another_process_reach_the_views_at_the_next_tick_and_sigterm_stops_the_loop(tmp_path):
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    loop = _loop(root, 0.05)
    try:
        rows = []
        for i in range(5):
            conn.wh.sync()
            before = epochs.newest_epoch(conn.wh.store)
            row = (i, i % 2, 10 * i)
            conn.execute(f"INSERT INTO t VALUES {row}")
            rows.append(row)
            _wait("the views applying an insert", lambda: min(_view_epochs(conn)) > before)
            # nothing else was pending: the first barrier the loop cut after the insert sealed it
            assert not epochs.unsealed_counts(conn.wh.store)
            _check(conn, rows)
        idle = epochs.newest_epoch(conn.wh.store)
        loop.send_signal(signal.SIGTERM)
        out, _ = loop.communicate(timeout=DEADLINE)
        assert loop.returncode == 0, out
        assert "continuous mode stopped" in out
        conn.wh.sync()
        assert epochs.newest_epoch(conn.wh.store) == idle  # no barrier while nothing was new
    finally:
        if loop.poll() is None:
            loop.kill()


def test_a_loop_killed_at_any_point_and_started_again_loses_and_doubles_nothing(tmp_path):
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    rows: list[tuple] = []
    writing = threading.Event()
    writing.set()

    def writer():
        w = dagster_rw.connect(root, engine="duckdb")
        i = 0
        while writing.is_set():
            batch = [(i + j, (i + j) % 5, i + j) for j in range(3)]
            w.execute("INSERT INTO t VALUES " + ", ".join(str(r) for r in batch))
            rows.extend(batch)  # acknowledged: execute() returned
            i += 3

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for kill in range(4):
            loop = _loop(root, 0.02)
            try:
                start = max(_view_epochs(conn))
                # let it commit a few epochs, then kill it wherever it is (mid-tick, most likely)
                _wait("progress of the loop", lambda: min(_view_epochs(conn)) >= start + 2 + kill)
                time.sleep(0.01 * kill)  # kill at a different point of a tick each time
            except AssertionError:
                loop.kill()
                raise AssertionError(f"the loop said: {loop.communicate()[0][-3000:]}") from None
            finally:
                loop.kill()
                loop.wait()
    finally:
        writing.clear()
        thread.join()
    assert rows
    loop = _loop(root, 0.02)
    try:
        _wait("the last rows reaching the views", lambda: (
            conn.wh.sync() or not epochs.unsealed_counts(conn.wh.store))
            and min(_view_epochs(conn)) >= epochs.newest_epoch(conn.wh.store))
        loop.send_signal(signal.SIGTERM)
        loop.communicate(timeout=DEADLINE)
        assert loop.returncode == 0
    finally:
        if loop.poll() is None:
            loop.kill()
    _check(dagster_rw.connect(root, engine="duckdb"), rows)


def test_each_committed_epoch_is_one_runless_materialization_per_changed_object(tmp_path):
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    conn.execute("CREATE TABLE other (id INT PRIMARY KEY)")
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    conn.execute("CREATE MATERIALIZED VIEW other_count AS SELECT count(*) AS n FROM other")
    conn.execute("FLUSH")
    instance = dg.DagsterInstance.ephemeral()
    reporter = EpochReporter(instance, conn)
    ticks = []

    def on_epoch(tick):
        ticks.append(tick)
        reporter(tick)

    rows = []
    for i in range(3):
        conn.execute(f"INSERT INTO t VALUES ({i}, {i}, {i})")
        rows.append((i, i, i))
        assert conn.run(interval=0.01, on_epoch=on_epoch, max_ticks=1) == 1
    conn.execute("INSERT INTO other VALUES (1)")
    assert conn.run(interval=0.01, on_epoch=on_epoch, max_ticks=1) == 1
    stop = threading.Event()
    stop.set()
    assert conn.run(interval=0.01, stop=stop, on_epoch=on_epoch) == 0  # nothing new: no tick

    assert all(len(t.advanced) == 5 for t in ticks)  # every object moves to each epoch
    assert [sorted(t.changed) for t in ticks] == [["by_k", "t", "total"]] * 3 + [["other", "other_count"]]
    for name in ["t", "by_k", "total", "other", "other_count"]:
        records = instance.fetch_materializations(dg.AssetKey([name]), limit=100).records
        got = sorted(r.asset_materialization.metadata["dagster_rw/epoch"].value for r in records)
        assert got == sorted(t.advanced[name][1] for t in ticks if name in t.changed), name
        assert all(r.run_id == "" for r in records)  # runless
        newest = max(records, key=lambda r: r.storage_id).asset_materialization.metadata
        assert newest["dagster_rw/lag_epochs"].value == 0
        assert newest["dagster/row_count"].value == conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    by_k = max(instance.fetch_materializations(dg.AssetKey(["by_k"]), limit=100).records,
               key=lambda r: r.storage_id).asset_materialization.metadata
    assert by_k["dagster_rw/rows_inserted"].value == 1 and by_k["dagster_rw/engine"].value == "duckdb"
    _check(conn, rows)


@pytest.mark.parametrize("interval", [0, -1])
def test_the_interval_must_be_positive(tmp_path, interval):
    conn = dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb")
    with pytest.raises(ValueError, match="interval"):
        conn.run(interval=interval, max_ticks=1)


def test_sigkill_during_startup_leaves_the_warehouse_readable(tmp_path):
    """A loop killed before its first tick leaves nothing behind that a reader trips on."""
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    conn.execute("INSERT INTO t VALUES (1, 1, 1)")
    loop = _loop(root, 0.05)
    os.kill(loop.pid, signal.SIGKILL)
    loop.wait()
    conn.execute("FLUSH")
    _check(conn, [(1, 1, 1)])


def _project(tmp_path):
    from dagster_rw.dagster import RwProject

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "model.sql").write_text(
        "CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT);\n"
        "CREATE TABLE other (id INT PRIMARY KEY);\n"
        + "".join(f"CREATE MATERIALIZED VIEW {name} AS {sql};\n" for name, sql in VIEWS.items())
        + "CREATE MATERIALIZED VIEW other_count AS SELECT count(*) AS n FROM other;\n")
    return RwProject(folder)


def test_the_continuous_job_logs_each_changed_objects_epoch_as_a_materialization_of_its_run(tmp_path):
    """The long-lived Dagster run of continuous mode, bounded by max_epochs here: it creates the
    project's objects, applies what was staged, and logs one materialization per changed object."""
    from dagster_rw.dagster import RwResource, build_continuous_job, build_rw_assets
    from dagster_rw.dagster.sensor import WAREHOUSE_TAG

    project, root = _project(tmp_path), str(tmp_path / "wh")
    assets = build_rw_assets(project)
    job = build_continuous_job(assets, name="continuous", interval_seconds=0.01)
    rw = RwResource(warehouse=root, engine="duckdb")
    instance = dg.DagsterInstance.ephemeral()
    config = {"ops": {"continuous_loop": {"config": {"max_epochs": 1}}}}
    rows = [(1, 1, 10), (2, 1, 20), (3, 2, 5)]

    def feed():  # as another process would, once the run has created the tables
        with dagster_rw.connect(root, engine="duckdb") as feeder:
            _wait("the run creating the project's objects", lambda: len(feeder.status()) == 5)
            feeder.execute("INSERT INTO t VALUES " + ", ".join(map(str, rows)))

    feeder = threading.Thread(target=feed)
    feeder.start()
    result = job.execute_in_process(run_config=config, resources={"rw": rw}, instance=instance)
    feeder.join()
    assert result.success and result.output_for_node("continuous_loop") == 3
    conn = dagster_rw.connect(root, engine="duckdb")
    events = [e.event_specific_data.materialization for e in result.all_events if e.is_step_materialization]
    assert sorted(m.asset_key.path[-1] for m in events) == ["by_k", "t", "total"]  # other, other_count: unchanged
    conn.wh.sync()
    for m in events:
        name = m.asset_key.path[-1]
        assert m.metadata["dagster_rw/epoch"].value == conn.wh.manifest(name).epoch
        assert m.metadata["dagster_rw/continuous"].value is True
        assert m.metadata["dagster/row_count"].value == conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    assert instance.get_run_by_id(result.run_id).tags[WAREHOUSE_TAG] == root
    _check(conn, rows)


def test_while_continuous_mode_runs_the_barrier_sensor_waits_and_a_second_run_is_refused(tmp_path):
    from dagster_rw.dagster import RwResource, build_barrier_sensor, build_continuous_job, build_rw_assets
    from dagster_rw.dagster.sensor import WAREHOUSE_TAG

    project, root = _project(tmp_path), str(tmp_path / "wh")
    assets = build_rw_assets(project)
    job = build_continuous_job(assets, name="continuous", interval_seconds=0.01)
    sensor = build_barrier_sensor(assets)
    rw = RwResource(warehouse=root, engine="duckdb")
    instance = dg.DagsterInstance.ephemeral()
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    conn.execute("INSERT INTO t VALUES (1, 1, 1)")
    running = instance.create_run_for_job(job, tags={WAREHOUSE_TAG: root}, status=dg.DagsterRunStatus.STARTED)

    with dg.build_sensor_context(instance=instance, resources={"rw": rw}) as context:
        skipped = sensor.evaluate_tick(context)
    assert not skipped.run_requests and running.run_id in skipped.skip_message
    conn.wh.sync()
    assert epochs.unsealed_counts(conn.wh.store)  # no barrier was cut

    config = {"ops": {"continuous_loop": {"config": {"max_epochs": 1}}}}
    refused = job.execute_in_process(run_config=config, resources={"rw": rw}, instance=instance,
                                     raise_on_error=False)
    assert not refused.success
    assert f"already runs over {root} in run {running.run_id}" in str(refused.failure_data_for_node("continuous_loop"))

    instance.report_run_canceled(running)
    with dg.build_sensor_context(instance=instance, resources={"rw": rw}) as context:
        requested = sensor.evaluate_tick(context)
    assert [r.tags["dagster_rw/epoch"] for r in requested.run_requests] == ["2"]  # the sensor's turn again


def test_the_continuous_sensor_keeps_one_run_going_but_not_after_a_user_stopped_it(tmp_path):
    from dagster_rw.dagster import build_continuous_job, build_continuous_sensor, build_rw_assets

    job = build_continuous_job(build_rw_assets(_project(tmp_path)), name="continuous")
    sensor = build_continuous_sensor(job, retry_after_seconds=3600)
    instance = dg.DagsterInstance.ephemeral()

    def tick():
        with dg.build_sensor_context(instance=instance) as context:
            return sensor.evaluate_tick(context)

    assert len(tick().run_requests) == 1  # none runs: start one
    run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    assert not tick().run_requests
    instance.report_run_failed(run)
    waiting = tick()
    assert not waiting.run_requests and "failed" in waiting.skip_message
    ended = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    instance.report_run_canceled(ended)  # terminated by a user: continuous mode stays off
    stopped = tick()
    assert not stopped.run_requests and "terminated" in stopped.skip_message
    instance.report_run_failed(instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED))
    sensor = build_continuous_sensor(job, retry_after_seconds=0)  # launched by hand again, then it failed
    assert len(tick().run_requests) == 1
