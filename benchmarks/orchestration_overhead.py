"""What Dagster adds to a small change: from a sensor tick to the views committed, in one process,
then from an INSERT to every view committed through a real `dagster dev`.

In one process: the reference project (assets/shop) in a fresh local warehouse, loaded with some
rows; then, per round, a small change (a few orders, one item's price) is accepted through a second
connection, the barrier sensor is ticked, and the run it requests is executed in this process with
the in-process executor (what a run worker does once started). Split into:

- tick:     the sensor's evaluation (listing what is staged, cutting the barrier, choosing assets);
- run start: from launching the run to its step starting (Dagster's run and step bookkeeping);
- refresh:  the objects' own steps (the sum of `dagster_rw/step_seconds`);
- checks and the rest of the step (key, batch-equality and GX checks, events);
- Spark session: small epochs run in-process and start no Spark at all; for steps large enough to
  need it, the cost of starting a local session (measured here once, in a child process) and of
  attaching to a running Spark Connect server are printed too.
- a run worker process: a deployed run starts a new Python process that loads the code location;
  its import cost is measured in a child process.

Through `dagster dev` (`through_dagster_dev`): the reference deployment as shipped (its dagster.yaml,
sensor and run launcher), a change into every table at a random moment, INSERT to every view
committed and to the run finished, median and p90, split at the sensor's tick that requested the run
and at the run's own events: the tick's start (the daemon's sensor loop), the run created (the tick),
PIPELINE_STARTING (Dagster's planned events and the run queue), the worker's "Started process"
event (the run launcher and the worker's process), STEP_START (the code location, the job, the run's
events), every view committed (the steps). `--root` runs another copy of the deployment (e.g. an
older commit, `git archive`d) with its own dagster_rw, one after the other in the same invocation.
With RW_BENCH_KEEP_LOG=PREFIX, each deployment's log and DAGSTER_HOME (its runs and events) are kept
as PREFIX.<folder> and PREFIX.<folder>.home.

    python benchmarks/orchestration_overhead.py [--rounds 5] [--changes 10] [--root DIR ...]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import dagster as dg
from _common import percentile

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


VIEW_STAGES = ("insert_to_tick_start", "tick_to_run_requested", "requested_to_launch", "launch_to_worker_started",
               "worker_to_step_start", "step_start_to_views_committed", "insert_to_views_committed",
               "insert_to_run_finished")
CONTINUOUS_STAGES = ("insert_to_views_committed", "insert_to_materializations_recorded")


def event_times(instance, run_id: str) -> dict[str, float]:
    """The first time of each event type of a run, and of its worker's "Started process" event."""
    times: dict[str, float] = {}
    for e in instance.all_logs(run_id):
        if e.dagster_event is None:
            continue
        kind = e.dagster_event.event_type_value
        if kind == "ENGINE_EVENT" and (e.dagster_event.message or "").startswith("Started process"):
            kind = "WORKER_STARTED"
        times.setdefault(kind, e.timestamp)
    return times


def requesting_tick(instance, run_id: str, after: float):
    """The barrier sensor's tick that requested `run_id`."""
    from dagster._core.scheduler.instigation import InstigatorType

    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, after=after - 10):
            if run_id in tick.run_ids:
                return tick
    return None


def launch_continuous(port: int) -> str | None:
    """Launch the deployment's continuous job through the webserver's GraphQL API, as the Launchpad
    does; None when it launched, else what stands in the way (the webserver or the code location
    still starting)."""
    import json
    import urllib.error
    import urllib.request

    mutation = ('mutation { launchRun(executionParams: {selector: {repositoryLocationName: "dagster_rw_reference", '
                'repositoryName: "__repository__", jobName: "shop_continuous"}}) { __typename '
                '... on PythonError { message } } }')
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": mutation}).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
    except (urllib.error.URLError, ConnectionError) as e:
        return str(e)
    launched = (answer.get("data") or {}).get("launchRun") or {}
    return None if launched.get("__typename") == "LaunchRunSuccess" else json.dumps(answer)[:500]


def through_dagster_dev(root: Path, changes: int = 10, seed: int = 7, continuous: bool = False
                        ) -> dict[str, list[float]]:
    """INSERT to every view committed through a real `dagster dev` of the reference deployment in
    `root` (its workspace.yaml, definitions and dagster.yaml, its dagster_rw first on the path): the
    daemon ticks the barrier sensor, the run coordinator and launcher start a run worker process,
    the worker's step applies the epoch. Per change, one row into each of the four tables (so every
    view has something to apply), at a random moment (seeded) of the daemon's 5-second sensor loop;
    the first change is a warm-up. "Committed" is read from the warehouse's log, polled every 20 ms.

    With `continuous`, the deployment's continuous job applies the epochs instead, launched over the
    webserver's GraphQL API as the Launchpad launches it (the barrier sensor is off): per change,
    INSERT to every view committed, and to the materialization of every view it changed recorded in
    the instance by that run."""
    import random
    import shutil
    import socket

    from dagster._core.instance.ref import InstanceRef

    project = RwProject(root / "assets" / "shop")
    views = [n for n, o in project.objects.items() if o.kind == "materialized_view"]
    tmp = Path(tempfile.mkdtemp(prefix="rw-bench-dev-"))
    home, warehouse = tmp / "home", str(tmp / "wh")
    home.mkdir()
    shutil.copy(root / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_RW_WAREHOUSE": warehouse,
           **({} if continuous else {"DAGSTER_RW_SENSOR_RUNNING": "1"}),
           "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("DAGSTER_RW_SENSOR_INTERVAL", None)  # the deployment's own
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as deployed: run workers load compiled modules
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # the instance's storage is created here, before `dagster dev` starts: two processes creating
    # it at once race in its migrations
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    log = open(tmp / "dagster.log", "w")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml",
                               "-h", "127.0.0.1", "-p", str(port)], cwd=root, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    figures: dict[str, list[float]] = {k: [] for k in (CONTINUOUS_STAGES if continuous else VIEW_STAGES)}
    rng = random.Random(seed)
    try:
        with dagster_rw.connect(warehouse) as feeder:
            wh = feeder.wh

            def committed() -> dict[str, int]:
                wh.sync()
                return {v: wh.manifest(v).epoch if wh.manifest(v).exists else -1 for v in views}

            def recorded(epoch: int) -> bool:
                """The materialization of every view the epoch changed is in the instance."""
                for view in views:
                    stats = wh.manifest(view).stats
                    if not (stats.get("rows_inserted") or stats.get("rows_deleted")):
                        continue  # its rows did not change: nothing is recorded for it
                    event = instance.get_latest_materialization_event(dg.AssetKey([view]))
                    if event is None or event.asset_materialization.metadata["dagster_rw/epoch"].value < epoch:
                        return False
                return True

            deadline = time.time() + 300
            while continuous and (why := launch_continuous(port)) is not None:
                assert server.poll() is None and time.time() < deadline, \
                    f"{why}\n{(tmp / 'dagster.log').read_text()[-3000:]}"
                time.sleep(0.5)
            while min(committed().values()) < 0:  # the first tick (or continuous run) creates the objects
                assert server.poll() is None and time.time() < deadline, (tmp / "dagster.log").read_text()[-3000:]
                time.sleep(0.5)
            for r in range(changes + 1):
                while not continuous and [x for x in instance.get_runs() if not x.is_finished]:
                    time.sleep(0.1)  # the last change's run ends
                time.sleep(rng.uniform(0, 5))
                before = max(committed().values())
                t_insert = time.time()
                feeder.execute(f"INSERT INTO orders VALUES ({1000 + r}, {r}, 'c{r}', 2, now())")
                feeder.execute(f"INSERT INTO items VALUES ({r}, 'item{r}', {r + 1}.50)")
                feeder.execute(f"INSERT INTO visit VALUES ({r}, 'u{r}', {10 + r})")
                feeder.execute(f"INSERT INTO info VALUES ({r}, 'cat{r % 3}')")
                while True:
                    now = committed()
                    if min(now.values()) > before:
                        t_views = time.time()
                        break
                    assert time.time() < t_insert + 120, f"views not committed within 120 s: {now}"
                    time.sleep(0.02)
                if continuous:
                    while not recorded(min(now.values())):
                        assert time.time() < t_insert + 120, "materializations not recorded within 120 s"
                        time.sleep(0.02)
                    if r:  # the first change is a warm-up
                        figures["insert_to_views_committed"].append(t_views - t_insert)
                        figures["insert_to_materializations_recorded"].append(time.time() - t_insert)
                    continue
                epoch = str(max(now.values()))
                while True:  # the run that committed the views' epoch, finished
                    (run,) = [x for x in instance.get_run_records()
                              if x.dagster_run.tags.get("dagster_rw/epoch") == epoch] or [None]
                    if run is not None and run.dagster_run.is_finished:
                        break
                    time.sleep(0.1)
                assert run.dagster_run.is_success, f"run for epoch {epoch} failed"
                if r == 0:
                    continue  # warm-up: the code server's first tick and run
                times = event_times(instance, run.dagster_run.run_id)
                tick = requesting_tick(instance, run.dagster_run.run_id, t_insert)
                requested = run.create_timestamp.timestamp()
                step_start = times["STEP_START"]
                worker = times.get("WORKER_STARTED", run.start_time)
                ticked = tick.timestamp if tick is not None else requested  # a tick purged: all of it before
                figures["insert_to_tick_start"].append(ticked - t_insert)
                figures["tick_to_run_requested"].append(requested - ticked)
                figures["requested_to_launch"].append(times["PIPELINE_STARTING"] - requested)
                figures["launch_to_worker_started"].append(worker - times["PIPELINE_STARTING"])
                figures["worker_to_step_start"].append(step_start - worker)
                figures["step_start_to_views_committed"].append(t_views - step_start)
                figures["insert_to_views_committed"].append(t_views - t_insert)
                figures["insert_to_run_finished"].append(run.end_time - t_insert)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        instance.dispose()
        log.close()
        if os.environ.get("RW_BENCH_KEEP_LOG"):  # the deployment's log, for a closer look
            shutil.copy(tmp / "dagster.log", f"{os.environ['RW_BENCH_KEEP_LOG']}.{root.name}")
            shutil.copytree(home, f"{os.environ['RW_BENCH_KEEP_LOG']}.{root.name}.home", dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def report_dagster_dev(roots: list[Path], changes: int, continuous: bool = False) -> None:
    for root in roots:
        load = os.getloadavg()
        figures = through_dagster_dev(root, changes, continuous=continuous)
        print(f"through dagster dev in {root}{' (continuous mode)' if continuous else ''} ({changes} changes, "
              f"load average before "
              f"{load[0]:.1f} / after {os.getloadavg()[0]:.1f}), seconds:")
        for k, v in figures.items():
            print(f"  {k:30s} median {statistics.median(v):6.2f}  p90 {percentile(v, 0.9):6.2f}  "
                  f"(min {min(v):.2f}, max {max(v):.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds in one process (0: skip)")
    parser.add_argument("--changes", type=int, default=10, help="changes through dagster dev (0: skip)")
    parser.add_argument("--continuous", action="store_true",
                        help="through dagster dev, apply epochs by the continuous job instead of the barrier sensor")
    parser.add_argument("--root", type=Path, action="append",
                        help="a reference deployment's folder (repeatable; default: this repository)")
    args = parser.parse_args()
    if args.rounds:
        main(args.rounds)
    if args.changes:
        report_dagster_dev([r.resolve() for r in args.root or [ROOT]], args.changes, args.continuous)
