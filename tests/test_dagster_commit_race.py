"""A Dagster run that loses a commit race to another writer steps again on what that writer committed.

The run's asset step refreshes each object on its own connection while another process FLUSHes in
a loop. When the FLUSH commits an object between the step's plan and its commit, the step's
commit is refused (CommitConflict); the step reads the warehouse again and plans anew from the
FLUSH's commit, up to `flush_conflict_retries` times, and only then fails. The tables hold
exactly the acknowledged rows, the views equal DuckDB's answer, and no lost attempt leaves a file.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import dagster as dg
import pytest
from leftovers import unexplained_files
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.dagster import RwProject, RwResource, build_rw_assets, deploy
from dagster_rw.errors import CommitConflict
from dagster_rw.storage import manifest as manifests

TABLES = {"acct": "CREATE TABLE acct (id INT PRIMARY KEY, w INT, v INT)",
          "ev": "CREATE TABLE ev (w INT, amt INT)"}
VIEWS = {"by_w": "SELECT w, count(*) AS n, sum(v) AS sv FROM acct GROUP BY w",
         "ev_by_w": "SELECT w, count(*) AS n, sum(amt) AS total FROM ev GROUP BY w"}
OBJECTS = [*TABLES, *VIEWS]

# the other process: on each request (a file `<requests>/<k>`), inserts into both tables, FLUSHes
# (committing every object), inserts again and cuts a barrier (so a step that loses to this FLUSH
# still has something to apply); then answers (`<requests>/<k>.done`). Each acknowledged statement
# is a line of its log, written once execute() returned.
FLUSHER = textwrap.dedent('''
    import os, sys, time
    import dagster_rw

    warehouse, log_path, requests, stop = sys.argv[1:5]
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    k, i = 0, 0
    with open(log_path, "a") as log:
        while not os.path.exists(stop):
            if not os.path.exists(os.path.join(requests, str(k))):
                time.sleep(0.005)
                continue
            for statement in ("insert", "FLUSH", "insert", "barrier"):
                if statement == "insert":
                    for sql in (f"INSERT INTO acct VALUES ({i}, {i % 3}, {i})",
                                f"INSERT INTO ev VALUES ({i % 4}, {i})"):
                        conn.execute(sql)
                        log.write(sql + "\\n")
                    i += 1
                elif statement == "FLUSH":
                    conn.execute("FLUSH")
                else:
                    conn.barrier()
            log.flush()
            open(os.path.join(requests, f"{k}.done"), "w").close()
            k += 1
    conn.close()
''')


def _project(tmp_path) -> RwProject:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "race.sql").write_text("\n".join(
        [f"{ddl};" for ddl in TABLES.values()]
        + [f"CREATE MATERIALIZED VIEW {name} AS {sql};" for name, sql in VIEWS.items()]))
    return RwProject(folder)


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _check_against_duckdb(warehouse: str, acked: list[str]) -> None:
    oracle = Oracle()
    for sql in [*TABLES.values(), *acked]:
        oracle.execute(sql)
    for name, sql in VIEWS.items():
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    conn.execute("FLUSH")
    assert len({s["epoch"] for s in conn.status()}) == 1
    for name in OBJECTS:  # the tables: exactly the acknowledged rows, none lost or doubled
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)
    conn.close()
    leftovers = unexplained_files(warehouse)
    assert not leftovers, f"files no manifest or log state explains: {leftovers[:10]}"


def _conflict_retries(instance, run) -> dict[str, int]:
    """Per object, how often the run's step stepped it again after losing a commit race (from
    the ending event of each object's refresh)."""
    out = {}
    for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = record.dagster_event.engine_event_data
        if (data.marker_end or "").startswith("refresh ") and "dagster_rw/conflict_retries" in data.metadata:
            out[data.marker_end.removeprefix("refresh ")] = data.metadata["dagster_rw/conflict_retries"].value
    return out


@pytest.mark.timeout(180)
def test_a_run_losing_commit_races_to_another_process_steps_again_and_succeeds(tmp_path, monkeypatch):
    """Each object's first commit in the run is held while the other process FLUSHes (committing
    that object at a newer epoch) and seals more: the held commit is certain to lose. The step
    reads the warehouse again and plans from the FLUSH's commit; the run succeeds."""
    warehouse = str(tmp_path / "wh")
    project = _project(tmp_path)
    with dagster_rw.connect(warehouse, engine="duckdb") as setup:
        deploy(setup, project)
        acked = ["INSERT INTO acct VALUES (-1, 0, 5)", "INSERT INTO ev VALUES (0, 5)"]
        for sql in acked:
            setup.execute(sql)
        setup.barrier()  # sealed, as by the barrier sensor: the run has something to apply
    log, requests, stop = tmp_path / "flusher.log", tmp_path / "requests", tmp_path / "stop"
    requests.mkdir()
    script = tmp_path / "flusher.py"
    script.write_text(FLUSHER)
    err = open(tmp_path / "flusher.stderr", "w")
    flusher = subprocess.Popen([sys.executable, str(script), warehouse, str(log), str(requests), str(stop)],
                               stdout=subprocess.DEVNULL, stderr=err)
    real = manifests.publish
    held: list[str] = []

    def publish(store, versions, what, extra=None):
        name = versions[0].object
        if name not in held:
            held.append(name)
            k = len(held) - 1
            (requests / str(k)).touch()
            deadline = time.monotonic() + 60
            while not (requests / f"{k}.done").exists():
                assert flusher.poll() is None, open(tmp_path / "flusher.stderr").read()[-3000:]
                assert time.monotonic() < deadline, "the other process did not FLUSH"
                time.sleep(0.005)
        return real(store, versions, what, extra)

    try:
        monkeypatch.setattr(manifests, "publish", publish)
        with dg.instance_for_test() as instance:
            run = dg.materialize(build_rw_assets(project),
                                 resources={"rw": RwResource(warehouse=warehouse, engine="duckdb")},
                                 instance=instance, raise_on_error=False)
            retried = _conflict_retries(instance, run)
        monkeypatch.setattr(manifests, "publish", real)
    finally:
        stop.touch()
        try:
            flusher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            flusher.kill()
    failures = [e.event_specific_data.error.message for e in run.all_events if e.is_step_failure]
    assert run.success, failures
    assert flusher.returncode == 0, open(tmp_path / "flusher.stderr").read()[-3000:]
    # every commit the run attempted first lost to the other process's FLUSH: the tables', and a
    # view's (a view whose inputs the FLUSH left with nothing new for it commits nothing)
    assert set(TABLES) <= set(held) and set(held) & set(VIEWS), held
    assert retried == {name: 1 for name in held}, retried
    materialized = {e.asset_key.path[-1] for e in run.get_asset_materialization_events()}
    assert materialized == set(OBJECTS)
    _check_against_duckdb(warehouse, acked + [line for line in _lines(log) if line.startswith("INSERT")])


def test_a_run_that_keeps_losing_fails_after_the_bounded_retries(tmp_path, monkeypatch):
    """Another writer commits the table before every one of the run's attempts: the step tries
    1 + flush_conflict_retries times, then fails with CommitConflict, leaving nothing behind."""
    warehouse = str(tmp_path / "wh")
    project = _project(tmp_path)
    other = dagster_rw.connect(warehouse, engine="duckdb")
    deploy(other, project)
    other.execute("INSERT INTO acct VALUES (1, 1, 1)")
    other.barrier()  # sealed: the run's step has something to apply
    acked = ["INSERT INTO acct VALUES (1, 1, 1)"]
    real = manifests.publish
    attempts = []

    def publish(store, versions, what, extra=None):
        if store is not other.wh.store and versions[0].object == "acct":
            attempts.append(what)
            other.execute("FLUSH")  # commits acct before this attempt does
            sql = f"INSERT INTO acct VALUES ({len(attempts) + 1}, 2, 2)"
            other.execute(sql)
            other.barrier()  # and seals more, so the next attempt has something to commit
            acked.append(sql)
        return real(store, versions, what, extra)

    monkeypatch.setattr(manifests, "publish", publish)
    resource = RwResource(warehouse=warehouse, engine="duckdb", warehouse_options={"flush_conflict_retries": "2"})
    with dg.instance_for_test() as instance:
        run = dg.materialize(build_rw_assets(project), resources={"rw": resource}, instance=instance,
                             raise_on_error=False)
    monkeypatch.setattr(manifests, "publish", real)
    assert not run.success
    errors = [e.event_specific_data.error for e in run.all_events if e.is_step_failure]
    cause = errors[0].cause or errors[0]
    assert cause.cls_name == CommitConflict.__name__ and "commit of 'acct'" in cause.message, cause
    assert len(attempts) == 3  # the first attempt and two retries
    other.close()
    _check_against_duckdb(warehouse, acked)
