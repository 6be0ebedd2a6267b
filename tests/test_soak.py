"""Soak: six processes on one local-folder warehouse at once, bounded in statements and time.

Four writers INSERT, UPDATE and DELETE rows of a table with a primary key and of one without
(each writer only its own rows, so its acknowledged statements replayed in order give its rows
whatever the interleaving), logging each statement once execute() returned (fsynced). A fifth
process FLUSHes in a loop; a sixth ticks the barrier sensor from a Dagster instance and executes
the runs it requests, as the daemon would. At the end: every table holds exactly what the
acknowledged statements give (DuckDB replays them), every view equals DuckDB's answer, every
object is at one epoch, and no file is left under the warehouse that the log does not explain.
The randomness is seeded (DRW_SOAK_SEED replays a run); DRW_SOAK_SECONDS makes the writers run
for that long (several minutes, outside CI).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from leftovers import unexplained_files
from oracle import Oracle, assert_same

import dagster_rw

WRITERS = 4
# per writer, at most: each stops at whichever bound it reaches first. CI keeps the defaults (40
# statements, 30 s); DRW_SOAK_SECONDS runs longer outside CI (then the statements are bounded by
# the time alone unless DRW_SOAK_STATEMENTS is given too)
SECONDS = float(os.environ.get("DRW_SOAK_SECONDS", "30"))
STATEMENTS = int(os.environ.get("DRW_SOAK_STATEMENTS", "40" if "DRW_SOAK_SECONDS" not in os.environ else "1000000"))
TICKS = 3  # the sensor's ticks, at least (each executes the run it requests)
MAX_TICKS = int(200 * max(1.0, SECONDS / 30))  # the sensor's bound: it stops earlier, when told to
SEED = int(os.environ.get("DRW_SOAK_SEED", "2611"))

PROJECT = """
-- accounts: a primary key; events: none (hidden row ids)
CREATE TABLE acct (id INT PRIMARY KEY, w INT, v INT);
CREATE TABLE ev (w INT, n INT, acct INT, amt INT);
CREATE MATERIALIZED VIEW by_w AS SELECT w, count(*) AS n, sum(v) AS sv, min(v) AS mn, max(v) AS mx FROM acct GROUP BY w;
CREATE MATERIALIZED VIEW ev_by_w AS SELECT w, count(*) AS n, sum(amt) AS total, max(amt) AS mx FROM ev GROUP BY w;
CREATE MATERIALIZED VIEW ev_acct AS SELECT a.w, count(*) AS n, sum(e.amt) AS total
    FROM ev e JOIN acct a ON e.acct = a.id GROUP BY a.w;
CREATE MATERIALIZED VIEW top_acct AS SELECT id, v FROM acct ORDER BY v DESC, id LIMIT 5;
"""
TABLES = {"acct": "CREATE TABLE acct (id INT PRIMARY KEY, w INT, v INT)",
          "ev": "CREATE TABLE ev (w INT, n INT, acct INT, amt INT)"}
VIEWS = {
    "by_w": "SELECT w, count(*) AS n, sum(v) AS sv, min(v) AS mn, max(v) AS mx FROM acct GROUP BY w",
    "ev_by_w": "SELECT w, count(*) AS n, sum(amt) AS total, max(amt) AS mx FROM ev GROUP BY w",
    "ev_acct": "SELECT a.w, count(*) AS n, sum(e.amt) AS total FROM ev e JOIN acct a ON e.acct = a.id GROUP BY a.w",
    "top_acct": "SELECT id, v FROM acct ORDER BY v DESC, id LIMIT 5",
}

ROLES = textwrap.dedent('''
    import json, os, random, sys, time
    import dagster_rw

    role, warehouse, out_path, stop_path = sys.argv[1:5]
    out = open(out_path, "a")

    def record(item):
        out.write(json.dumps(item) + "\\n")
        out.flush()
        os.fsync(out.fileno())

    def writer(w, seed, statements, seconds):
        rng = random.Random(seed * 1000 + w)
        conn = dagster_rw.connect(warehouse, engine="duckdb")
        accts, evs = [], []
        deadline = time.monotonic() + seconds
        for i in range(statements):
            if time.monotonic() > deadline:
                break
            r = rng.random()
            if r < 0.35 or not accts:
                ids = [w * 100_000 + i * 10 + j for j in range(3)]
                sql = "INSERT INTO acct VALUES " + ", ".join(f"({k}, {w}, {rng.randrange(-50, 50)})" for k in ids)
                new = ("acct", ids)
            elif r < 0.65:
                rows = [(w, i, rng.choice(accts), rng.randrange(-20, 80)) for _ in range(rng.randint(1, 4))]
                sql = "INSERT INTO ev VALUES " + ", ".join("(%d, %d, %d, %d)" % row for row in rows)
                new = ("ev", [i])
            elif r < 0.8:
                sql = f"UPDATE acct SET v = v + {rng.randrange(1, 9)} WHERE id = {rng.choice(accts)}"
                new = None
            elif r < 0.9 and evs:
                sql = f"UPDATE ev SET amt = amt * 2 + 1 WHERE w = {w} AND n = {rng.choice(evs)}"
                new = None
            elif r < 0.95 and evs:
                n = rng.choice(evs)
                sql = f"DELETE FROM ev WHERE w = {w} AND n = {n}"
                new = None
            else:
                k = rng.choice(accts)
                sql = f"DELETE FROM acct WHERE id = {k}"
                new = None
            try:
                conn.execute(sql)
            except Exception as e:  # refused: not acknowledged (the check replays acknowledged ones only)
                record({"sql": sql, "error": type(e).__name__, "rw_error": isinstance(e, dagster_rw.Error),
                        "message": str(e)[:300]})
                continue
            record({"sql": sql})
            if new is not None:
                (accts if new[0] == "acct" else evs).extend(new[1])
        conn.close()

    def flusher():
        conn = dagster_rw.connect(warehouse, engine="duckdb")
        while not os.path.exists(stop_path):
            try:
                conn.execute("FLUSH")
                record({"flush": "ok"})
            except Exception as e:
                record({"flush": type(e).__name__, "rw_error": isinstance(e, dagster_rw.Error),
                        "message": str(e)[:300]})
        conn.close()

    def sensor(project_dir, max_ticks):
        import dagster as dg
        from dagster_rw.dagster import RwProject, RwResource, build_barrier_sensor, build_rw_assets

        assets = build_rw_assets(RwProject(project_dir))
        sensor = build_barrier_sensor(assets)
        resource = RwResource(warehouse=warehouse, engine="duckdb")
        cursor = None
        with dg.instance_for_test() as instance:
            for t in range(max_ticks):
                if t and os.path.exists(stop_path):
                    break
                with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"rw": resource}) as ctx:
                    result = sensor.evaluate_tick(ctx)
                cursor = result.cursor if result.cursor is not None else cursor
                runs = []
                for request in result.run_requests:
                    run = dg.materialize(assets, selection=request.asset_selection, resources={"rw": resource},
                                         instance=instance, tags=request.tags, raise_on_error=False)
                    failure = None
                    if not run.success:  # the cause the step raised (Dagster wraps it)
                        errors = [ev.event_specific_data.error for ev in run.all_events if ev.is_step_failure]
                        failure = "; ".join(((e.cause or e).cls_name or "") + ": " + (e.cause or e).message[:300]
                                            for e in errors)
                    runs.append({"key": request.run_key, "success": run.success, "failure": failure})
                record({"tick": json.loads(cursor)["epoch"] if cursor else 0, "runs": runs})

    if role == "writer":
        writer(int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]))
    elif role == "flusher":
        flusher()
    else:
        sensor(sys.argv[5], int(sys.argv[6]))
''')


def _records(path) -> list[dict]:
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path).read().splitlines() if line.endswith("}")]


def _spawn(script, args, tmp_path, name):
    err = open(tmp_path / f"{name}.stderr", "w")
    scratch = tmp_path / f"{name}-tmp"
    scratch.mkdir()
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.DEVNULL, stderr=err,
                            env={**os.environ, "TMPDIR": str(scratch)})


def _oracle(acked: list[str]) -> Oracle:
    """DuckDB after the acknowledged statements (each writer's in its order; writers touch disjoint rows)."""
    oracle = Oracle()
    for ddl in TABLES.values():
        oracle.execute(ddl)
    for sql in acked:
        oracle.execute(sql)
    for name, sql in VIEWS.items():
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
    return oracle


@pytest.mark.timeout(max(300, int(3 * SECONDS + 180)))  # in CI about 60-90 s on two loaded cores
def test_six_processes_lose_double_and_leave_nothing(tmp_path):
    from dagster_rw.dagster import RwProject, deploy

    warehouse, project = str(tmp_path / "wh"), tmp_path / "project"
    project.mkdir()
    (project / "soak.sql").write_text(PROJECT)
    setup = dagster_rw.connect(warehouse, engine="duckdb")
    deploy(setup, RwProject(project))
    setup.close()
    script, stop = tmp_path / "roles.py", tmp_path / "stop"
    script.write_text(ROLES)
    logs = {f"w{w}": tmp_path / f"w{w}.jsonl" for w in range(WRITERS)}
    logs |= {"flusher": tmp_path / "flusher.jsonl", "sensor": tmp_path / "sensor.jsonl"}

    sensor = _spawn(script, ["sensor", warehouse, str(logs["sensor"]), str(stop), str(project), str(MAX_TICKS)],
                    tmp_path, "sensor")
    flusher = _spawn(script, ["flusher", warehouse, str(logs["flusher"]), str(stop)], tmp_path, "flusher")
    deadline = time.monotonic() + 120
    while not _records(logs["sensor"]):  # its first tick done: the sensor ticks from here on
        assert sensor.poll() is None, open(tmp_path / "sensor.stderr").read()[-3000:]
        assert time.monotonic() < deadline, "the sensor process did not start"
        time.sleep(0.1)
    started = time.monotonic()
    writers = [_spawn(script, ["writer", warehouse, str(logs[f"w{w}"]), str(stop), str(w), str(SEED),
                               str(STATEMENTS), str(SECONDS)], tmp_path, f"w{w}") for w in range(WRITERS)]
    try:
        for w, proc in enumerate(writers):
            assert proc.wait(timeout=SECONDS + 60) == 0, open(tmp_path / f"w{w}.stderr").read()[-3000:]
        ticked = len(_records(logs["sensor"]))
        while len(_records(logs["sensor"])) < max(ticked + 1, TICKS):  # a tick after the last statement
            assert sensor.poll() is None, open(tmp_path / "sensor.stderr").read()[-3000:]
            assert time.monotonic() < deadline + SECONDS + 120, "the sensor stopped ticking"
            time.sleep(0.1)
    finally:
        stop.touch()
        for proc in [flusher, sensor, *writers]:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert flusher.returncode == 0, open(tmp_path / "flusher.stderr").read()[-3000:]
    assert sensor.returncode == 0, open(tmp_path / "sensor.stderr").read()[-3000:]

    written = [r for w in range(WRITERS) for r in _records(logs[f"w{w}"])]
    acked = [r["sql"] for r in written if "error" not in r]
    refused = [r for r in written if "error" in r]
    flushes = _records(logs["flusher"])
    ticks = [r for r in _records(logs["sensor"]) if "tick" in r]
    runs = [run for t in ticks for run in t["runs"]]
    summary = (f"seed {SEED}, writers bounded at {SECONDS:.0f} s, ran {time.monotonic() - started:.0f} s: "
               f"{len(acked)} statements acknowledged, {len(refused)} refused, "
               f"{sum(f['flush'] == 'ok' for f in flushes)}/{len(flushes)} FLUSHes, {len(ticks)} ticks, "
               f"{sum(r['success'] for r in runs)}/{len(runs)} runs succeeded")
    print(summary)
    for r in refused:  # what a writer was refused, and why (each a dagster_rw error, asserted below)
        print(f"refused: {r['sql'][:80]} -> {r['error']}: {r['message'][:200]}")
    # whatever failed did so with a dagster_rw error, and a statement refused changed nothing
    assert all(r["rw_error"] for r in refused + [f for f in flushes if f["flush"] != "ok"]), \
        [r for r in refused + flushes if not r.get("rw_error", True)][:3]
    assert len(acked) >= WRITERS * 10, summary
    assert any(f["flush"] == "ok" for f in flushes) and len(ticks) >= TICKS and runs, summary
    # a run racing the FLUSH loop may lose commits to it: its step plans again from the FLUSH's commit
    assert all(r["success"] for r in runs), [r for r in runs if not r["success"]][:3]

    conn = dagster_rw.connect(warehouse, engine="duckdb")
    conn.execute("FLUSH")  # what was accepted after the last FLUSH and tick
    assert len({s["epoch"] for s in conn.status()}) == 1
    oracle = _oracle(acked)
    for name in TABLES:  # exactly the acknowledged rows: none lost, none doubled
        got = conn.execute(f"SELECT * FROM {name}").fetchall()
        assert_same(got, oracle.rows(f"SELECT * FROM {name}"), f"{name} ({summary})")
    for name in VIEWS:
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"),
                    f"{name} ({summary})")
    conn.close()
    leftovers = unexplained_files(warehouse)
    assert not leftovers, f"{len(leftovers)} files no manifest or log state explains: {leftovers[:10]}"


def test_a_file_nothing_explains_is_reported(tmp_path):
    """The leftover check finds a state file no commit adopted and a batch no entry accepted."""
    warehouse = str(tmp_path / "wh")
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    conn.execute(TABLES["acct"])
    conn.execute(f"CREATE MATERIALIZED VIEW by_w AS {VIEWS['by_w']}")
    conn.execute("INSERT INTO acct VALUES (1, 1, 1)")
    conn.execute("FLUSH")
    conn.execute("INSERT INTO acct VALUES (2, 1, 1)")  # accepted, not yet sealed: explained
    conn.close()
    assert unexplained_files(warehouse) == []
    strays = ["objects/by_w/state/output/00000000000000000001-00000000000000000002-0123456789ab.parquet",
              "staging/acct/01795668716183208361-0123456789ab.parquet"]
    for key in strays:
        with open(os.path.join(warehouse, key), "wb") as f:
            f.write(b"PAR1")
    assert unexplained_files(warehouse) == sorted(strays)
