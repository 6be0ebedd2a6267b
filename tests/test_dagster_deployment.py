"""The reference deployment as Dagster's own tools load it: `dagster definitions validate`, and the
webserver's GraphQL API listing every object of the SQL project as an asset with its dependencies."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kafka_broker import free_port

import dagster_rw
from dagster_rw.dagster import RwProject

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_RW_WAREHOUSE": str(tmp_path / "wh")}


def _cli(name: str) -> list[str]:
    """A console script run by this interpreter (so a venv or --system-site-packages install both work)."""
    module = {"dagster": "dagster", "dagster-rw": "dagster_rw.cli"}[name]
    return [sys.executable, "-m", module]


@pytest.mark.parametrize("spark_env", [
    {},  # the embedded session
    {"DAGSTER_RW_SPARK_CONFIG": json.dumps({"spark.master": "spark://spark-master:7077"})},  # dagster-pyspark's
], ids=["embedded", "pyspark_resource"])
def test_definitions_validate(tmp_path, spark_env):
    out = subprocess.run([*_cli("dagster"), "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                         env={**_env(tmp_path), **spark_env}, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "All code locations passed validation" in out.stdout + out.stderr


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """`dagster dev -w workspace.yaml` (webserver and daemon), the barrier sensor on, ticking every second."""
    tmp_path = tmp_path_factory.mktemp("dagster_dev")
    port = free_port()
    env = {**_env(tmp_path), "DAGSTER_RW_SENSOR_RUNNING": "1", "DAGSTER_RW_SENSOR_INTERVAL": "1"}
    log_path = tmp_path / "dagster.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*_cli("dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield {"port": port, "warehouse": env["DAGSTER_RW_WAREHOUSE"], "home": env["DAGSTER_HOME"],
               "log": log_path, "proc": proc}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait(predicate, what: str, server: dict, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server["proc"].poll() is None, server["log"].read_text()[-3000:]
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout}s; log: {server['log'].read_text()[-3000:]}")


def test_webserver_shows_every_object_with_its_lineage(dagster_dev):
    query = "{ assetNodes { assetKey { path } dependencyKeys { path } groupName kinds } }"

    def nodes():
        try:
            return (_graphql(dagster_dev["port"], query).get("data") or {}).get("assetNodes")
        except OSError:
            return None

    listed = _wait(nodes, "the webserver listed no assets", dagster_dev)
    got = {n["assetKey"]["path"][-1]: {d["path"][-1] for d in n["dependencyKeys"]} for n in listed}
    project = RwProject(ROOT / "assets" / "shop")
    assert got == {name: set(obj.deps) for name, obj in project.objects.items()}
    assert got["order_lines"] == {"orders", "items"} and got["longest_visit"] == {"visit", "info"}
    kinds = {n["assetKey"]["path"][-1]: set(n["kinds"]) for n in listed}
    # the default resource runs steps in-process (engine 'auto', no Spark configured)
    assert kinds["orders"] == {"sql", "table", "duckdb"} and kinds["order_lines"] == {"sql", "view", "duckdb"}
    assert {n["groupName"] for n in listed} == {"shop"}


def test_daemon_runs_the_sensor_and_its_runs(dagster_dev):
    """Rows inserted from another process reach the views through the daemon's sensor and a run."""
    with dagster_rw.connect(dagster_dev["warehouse"]) as feeder:
        _wait(lambda: len(feeder.status()) == 9, "the sensor's first tick did not create the objects", dagster_dev)
        cli = [*_cli("dagster-rw"), "--warehouse", dagster_dev["warehouse"], "sql"]
        subprocess.run(cli + ["INSERT INTO items VALUES (1, 'pen', 2.50), (2, 'ink', 7.00)"], check=True)
        subprocess.run(cli + ["INSERT INTO orders VALUES (101, 1, 'ann', 3, now()), (102, 2, 'bob', 1, now())"],
                       check=True)
        subprocess.run(cli + ["UPDATE orders SET item_id = 2 WHERE id = 101"], check=True)

        def lines():
            feeder.wh.sync()
            rows = feeder.execute("SELECT order_id, item, amount FROM order_lines").fetchall()
            return rows if len(rows) == 2 else None

        rows = _wait(lines, "order_lines did not reach the inserted rows", dagster_dev)
        assert sorted((r[0], r[1], float(r[2])) for r in rows) == [(101, "ink", 21.0), (102, "ink", 7.0)]
        epoch = {r["name"]: r for r in feeder.status()}["order_lines"]["epoch"]
    tag = json.dumps({"key": "dagster_rw/epoch", "value": str(epoch)}).replace('"key"', "key").replace('"value"', "value")
    query = "{ runsOrError(filter: {tags: [" + tag + "]}) { ... on Runs { results { status } } } }"

    def finished():
        runs = _graphql(dagster_dev["port"], query)["data"]["runsOrError"]["results"]
        return runs if runs and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs) else None

    runs = _wait(finished, f"the run of epoch {epoch} did not finish", dagster_dev)
    assert [r["status"] for r in runs] == ["SUCCESS"]


def _run_status(port: int, run_id: str) -> str:
    query = '{ runOrError(runId: "%s") { ... on Run { status } } }' % run_id
    return _graphql(port, query)["data"]["runOrError"]["status"]


def test_a_continuous_run_applies_inserts_and_terminating_it_hands_back_to_the_sensor(dagster_dev):
    """The continuous job launched as from the Launchpad: rows inserted from another process reach
    the views through its loop, its run logs their materializations, the barrier sensor requests no
    run meanwhile; terminating the run stops the loop and the sensor applies the next rows."""
    from dagster import DagsterEventType, DagsterInstance, RunsFilter
    from dagster._core.instance.ref import InstanceRef

    from dagster_rw.dagster.sensor import continuous_runs

    port, warehouse = dagster_dev["port"], dagster_dev["warehouse"]
    launch = ('mutation { launchRun(executionParams: {selector: {repositoryLocationName: "dagster_rw_reference", '
              'repositoryName: "__repository__", jobName: "shop_continuous"}}) { __typename '
              '... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }')
    launched = _graphql(port, launch)["data"]["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    with DagsterInstance.from_ref(InstanceRef.from_dir(dagster_dev["home"])) as instance, \
            dagster_rw.connect(warehouse) as feeder:
        _wait(lambda: [r for r in continuous_runs(instance, warehouse) if r.run_id == run_id],
              "the continuous run did not start its loop", dagster_dev)
        feeder.execute("INSERT INTO items VALUES (3, 'pad', 1.25)")

        def applied():
            feeder.wh.sync()
            return feeder.execute("SELECT name FROM items WHERE id = 3").fetchall() and \
                feeder.wh.manifest("items").epoch

        epoch = _wait(applied, "the continuous run did not apply the insert", dagster_dev)

        def logged():
            records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
            return {r.event_log_entry.dagster_event.asset_key.path[-1]:
                    r.event_log_entry.dagster_event.event_specific_data.materialization.metadata["dagster_rw/epoch"].value
                    for r in records}

        assert _wait(lambda: logged().get("items") == epoch and logged(), "the run logged no materialization",
                     dagster_dev)
        assert not instance.get_runs(filters=RunsFilter(tags={"dagster_rw/epoch": str(epoch)}))

        terminate = 'mutation { terminateRun(runId: "%s") { __typename } }' % run_id
        assert _graphql(port, terminate)["data"]["terminateRun"]["__typename"] == "TerminateRunSuccess"
        _wait(lambda: _run_status(port, run_id) == "CANCELED", "the continuous run did not stop", dagster_dev)
        messages = [entry.user_message for entry in instance.all_logs(run_id)]
        assert any("continuous mode stopped" in m for m in messages)

        feeder.execute("INSERT INTO items VALUES (4, 'cap', 0.75)")  # the barrier sensor's again

        def by_the_sensor():
            feeder.wh.sync()
            if not feeder.execute("SELECT name FROM items WHERE id = 4").fetchall():
                return None
            runs = instance.get_runs(filters=RunsFilter(
                tags={"dagster_rw/epoch": str(feeder.wh.manifest("items").epoch)}))
            return runs if runs and all(r.is_finished for r in runs) else None

        assert [r.status.value for r in _wait(by_the_sensor, "the sensor did not take over", dagster_dev)] \
            == ["SUCCESS"]


def test_instance_of_the_reference_deployment(tmp_path):
    """dagster.yaml, read as `dagster dev` reads it from the folder it runs in (storage elsewhere)."""
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    with DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path), config_dir=str(ROOT))) as instance:
        coordinator = instance.run_coordinator
        assert type(coordinator).__name__ == "QueuedRunCoordinator"
        assert coordinator.dequeue_interval_seconds == 1 and coordinator.dequeue_use_threads
        assert coordinator.get_run_queue_config().max_concurrent_runs == 2
        assert instance.get_settings("sensors") == {"use_threads": True, "num_workers": 2}
        launcher = instance.run_launcher
        assert type(launcher).__name__ == "WarmRunLauncher" and launcher.supports_check_run_worker_health
        assert launcher.preload_modules == ["dagster_rw.dagster"]
        assert instance.run_monitoring_enabled and instance.run_monitoring_start_timeout_seconds == 180
        assert not instance.telemetry_enabled
