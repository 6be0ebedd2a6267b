"""What Dagster adds to a small change: from a sensor tick to the views committed.

The reference project (assets/shop) in a fresh local warehouse, loaded with some rows; then, per
round, a small change (a few orders, one item's price) is accepted through a second connection, the
barrier sensor is ticked, and the run it requests is executed in this process with the in-process
executor (what a run worker does once started). Split into:

- tick:     the sensor's evaluation (listing what is staged, cutting the barrier, choosing assets);
- run start: from launching the run to its step starting (Dagster's run and step bookkeeping);
- refresh:  the objects' own steps (the sum of `dagster_rw/step_seconds`);
- checks and the rest of the step (key, batch-equality and GX checks, events);
- Spark session: small epochs run in-process and start no Spark at all; for steps large enough to
  need it, the cost of starting a local session (measured here once, in a child process) and of
  attaching to a running Spark Connect server are printed too.
- a run worker process: a deployed run starts a new Python process that loads the code location;
  its import cost is measured in a child process.

    python benchmarks/orchestration_overhead.py [rounds]
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import dagster as dg

import dagster_rw
from dagster_rw.dagster import (
    RwProject,
    RwResource,
    build_barrier_sensor,
    build_rw_assets,
)

ROOT = Path(__file__).resolve().parent.parent


def child_seconds(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def event_time(instance, run_id: str, event_type: str) -> float:
    return next(e.timestamp for e in instance.all_logs(run_id)
                if e.dagster_event is not None and e.dagster_event.event_type_value == event_type)


def main(rounds: int = 5) -> None:
    project = RwProject(ROOT / "assets" / "shop")
    assets = build_rw_assets(project)
    sensor = build_barrier_sensor(assets)
    warehouse = tempfile.mkdtemp(prefix="rw-bench-")
    resource = RwResource(warehouse=warehouse)
    rows = {"tick": [], "run_start": [], "refresh": [], "checks_and_rest": [], "total": [],
            "total_no_checks": []}
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        cursor = None
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"rw": resource}) as ctx:
            result = sensor.evaluate_tick(ctx)  # creates the project's objects
        feeder.execute("INSERT INTO items SELECT g, 'item' || g, (g % 97) + 0.5 FROM generate_series(1, 1000) g")
        feeder.execute("INSERT INTO orders SELECT g, 1 + g % 1000, 'c' || (g % 5000), 1 + g % 7, "
                       "TIMESTAMP '2026-11-01 00:00:00' FROM generate_series(1, 100000) g")
        feeder.execute("INSERT INTO info SELECT g, 'cat' || (g % 20) FROM generate_series(1, 1000) g")
        feeder.execute("INSERT INTO visit SELECT g % 1000, 'u' || (g % 3000), g % 600 FROM generate_series(1, 100000) g")
        feeder.flush()
        for r in range(2 * rounds + 1):
            with_checks = r % 2 == 1  # alternate: runs with their checks, and the same runs without
            base = 200_000 + r * 10
            feeder.execute(f"INSERT INTO orders SELECT g, 1 + g % 1000, 'c' || (g % 5000), 2, "
                           f"TIMESTAMP '2026-11-02 00:00:00' FROM generate_series({base}, {base + 9}) g")
            feeder.execute(f"UPDATE items SET price = price + 1 WHERE id = {1 + r}")
            feeder.execute(f"DELETE FROM visit WHERE product = {1 + r} AND length > 100")
            t0 = time.perf_counter()
            with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"rw": resource}) as ctx:
                result = sensor.evaluate_tick(ctx)
            cursor = result.cursor
            t_tick = time.perf_counter() - t0
            (request,) = result.run_requests
            launched = time.time()
            t1 = time.perf_counter()
            selection = dg.AssetSelection.assets(*request.asset_selection)
            run = dg.materialize(assets, selection=selection if with_checks else selection.without_checks(),
                                 resources={"rw": resource}, instance=instance, tags=request.tags)
            t_run = time.perf_counter() - t1
            assert run.success
            step_start = event_time(instance, run.run_id, "STEP_START")
            refresh = sum(float(ev.event_specific_data.materialization.metadata["dagster_rw/step_seconds"].value)
                          for ev in run.get_asset_materialization_events())
            run_start = step_start - launched
            if r == 0:
                continue  # warm-up: first imports (GX) and caches
            if not with_checks:
                rows["total_no_checks"].append(t_tick + t_run)
                continue
            rows["tick"].append(t_tick)
            rows["run_start"].append(run_start)
            rows["refresh"].append(refresh)
            rows["checks_and_rest"].append(t_run - run_start - refresh)
            rows["total"].append(t_tick + t_run)
        n_assets = len(request.asset_selection)
    print(f"orchestration overhead, {rounds} rounds of a small change (10 orders, 1 item, a few visits) "
          f"over 100k orders / 100k visits; {n_assets} assets and their checks per run; median seconds:")
    for k, v in rows.items():
        print(f"  {k:16s} {statistics.median(v):7.3f}   (min {min(v):.3f}, max {max(v):.3f})")
    print("  spark session    0.000   (small epochs run in-process: no Spark job, no session started)")
    spark_cold = child_seconds("from dagster_rw.engine.spark import local_session; local_session().range(1).count()")
    imports = child_seconds("import dagster, dagster_rw.dagster")
    gx = child_seconds("import dagster, dagster_rw.dagster, great_expectations")
    bare = child_seconds("pass")
    print(f"  if a step needs Spark: a cold local session (start + first job) takes {spark_cold:.2f} s in a new process")
    print(f"  a new run worker process would add about {imports - bare:.2f} s of imports (dagster, dagster_rw) "
          f"before its step starts, {gx - bare:.2f} s when the project has GX expectations")


def through_daemon(rounds: int = 3) -> None:
    """The same kind of change through `dagster dev` as deployed: the daemon ticks the sensor (every
    second here), the queued-run coordinator launches a run worker process, the worker runs the step."""
    import shutil
    import socket

    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    tmp = Path(tempfile.mkdtemp(prefix="rw-bench-daemon-"))
    (tmp / "home").mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "home"), "DAGSTER_RW_WAREHOUSE": str(tmp / "wh"),
           "DAGSTER_RW_SENSOR_RUNNING": "1", "DAGSTER_RW_SENSOR_INTERVAL": "1"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(tmp / "dagster.log", "w")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml",
                               "-h", "127.0.0.1", "-p", str(port)], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    figures = {"insert_to_run_requested": [], "launch_and_worker_start": [], "worker_setup": [],
               "refresh": [], "checks_and_rest": [], "insert_to_views_committed": []}
    try:
        instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp / "home")))
        with dagster_rw.connect(str(tmp / "wh")) as feeder:
            deadline = time.time() + 120
            while time.time() < deadline and len(feeder.status()) < 9:  # the first tick creates the objects
                time.sleep(0.5)
            seen = set()
            for r in range(rounds + 1):
                t_insert = time.time()
                feeder.execute(f"INSERT INTO items VALUES ({r}, 'item{r}', {r + 1}.50)")
                feeder.execute(f"INSERT INTO orders VALUES ({100 + r}, {r}, 'c{r}', 2, now())")
                run = None
                while time.time() < t_insert + 120:
                    done = [x for x in instance.get_run_records() if x.dagster_run.run_id not in seen
                            and x.dagster_run.is_finished]
                    if done:
                        run = done[0]
                        break
                    time.sleep(0.2)
                assert run is not None and run.dagster_run.is_success, "no successful run within 120 s"
                seen.add(run.dagster_run.run_id)
                step_start = event_time(instance, run.dagster_run.run_id, "STEP_START")
                refresh = sum(float(e.dagster_event.event_specific_data.materialization.metadata[
                    "dagster_rw/step_seconds"].value) for e in instance.all_logs(run.dagster_run.run_id)
                    if e.dagster_event is not None and e.dagster_event.event_type_value == "ASSET_MATERIALIZATION")
                if r == 0:
                    continue
                figures["insert_to_run_requested"].append(run.create_timestamp.timestamp() - t_insert)
                figures["launch_and_worker_start"].append(run.start_time - run.create_timestamp.timestamp())
                figures["worker_setup"].append(step_start - run.start_time)
                figures["refresh"].append(refresh)
                figures["checks_and_rest"].append(run.end_time - step_start - refresh)
                figures["insert_to_views_committed"].append(run.end_time - t_insert)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"through dagster dev (daemon, sensor every 1 s, a run worker process per run), {rounds} rounds, "
          "median seconds:")
    for k, v in figures.items():
        print(f"  {k:26s} {statistics.median(v):7.3f}   (min {min(v):.3f}, max {max(v):.3f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
    through_daemon(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
