"""Concurrent writers: two steps of one object at once commit exactly once (the other fails cleanly
with CommitConflict), and concurrent barriers get distinct epochs and seal every staged batch once.

The races are made certain rather than likely: both steppers are held just before their manifest
commit (a rendezvous of threads, or of processes through marker files) and then let go together.
"""
from __future__ import annotations

import json
import textwrap
import threading
from unittest import mock

import pyarrow.parquet as pq
import pytest
from test_durability import (
    TABLES,
    _kill,
    _spawn,
    _stderr,
    _wait_for,
    check_views,
    committed_epochs,
    create_schema,
    table_rows,
    views_in,
)

import dagster_rw
from dagster_rw.errors import CommitConflict, OperationalError
from dagster_rw.runtime import epochs as epochs_mod
from dagster_rw.runtime import step as step_mod
from dagster_rw.storage import manifest as manifests
from dagster_rw.storage.object_store import LocalStore


def _lagging_warehouse(warehouse: str, obj: str, views=None) -> None:
    """Every object one epoch behind the newest but the tables, when `obj` is a view: `obj` has a
    step to take, whose inputs are ready."""
    conn = dagster_rw.connect(warehouse)
    create_schema(conn, views)
    conn.execute("INSERT INTO acct VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, 2, -5)")
    conn.execute("INSERT INTO ev VALUES (1, 1, 1, 5), (1, 2, 1, 7), (2, 3, 2, 11)")
    conn.execute("FLUSH")
    conn.execute("UPDATE acct SET v = v + 1 WHERE grp = 1")
    conn.execute("DELETE FROM acct WHERE id = 3")
    conn.execute("INSERT INTO ev VALUES (3, 4, 4, -8), (3, 1, 4, 50)")
    conn.barrier()
    if obj not in TABLES:
        for t in TABLES:
            conn.refresh(t)
    conn.close()


LAGGING_TABLES = {  # the tables' contents once the lagging epoch is applied
    "acct": [(1, 1, 11), (2, 1, 21), (4, 2, -5)],
    "ev": [(1, 1, 1, 5), (1, 2, 1, 7), (2, 3, 2, 11), (3, 4, 4, -8), (3, 1, 4, 50)],
}


def _version(warehouse: str, obj: str) -> int:
    return manifests.load(dagster_rw.connect(warehouse).wh.store, obj, refresh=True).version


def _check_after_race(warehouse: str, obj: str, version_before: int, later) -> None:
    """One commit happened; the warehouse is consistent; a later change flows through `later`."""
    assert _version(warehouse, obj) == version_before + 1
    conn = dagster_rw.connect(warehouse)
    if obj in TABLES:
        assert table_rows(conn)[obj] == sorted(LAGGING_TABLES[obj], key=repr)
    ep = committed_epochs(conn)
    check_views(conn, [v for v in views_in(conn) if all(ep[i] == ep[v] for i in conn.wh.get(v).inputs)])
    later.execute("INSERT INTO acct VALUES (7, 4, 70)")
    later.execute("INSERT INTO ev VALUES (8, 7, 1, 1)")
    later.barrier()
    for t in TABLES:
        later.refresh(t)
    for v in views_in(later):
        later.refresh(v)
    check_views(later)
    later.execute("FLUSH")
    check_views(conn)


def race_steps_in_threads(warehouse: str, obj: str, views=None) -> dict:
    """Two connections step `obj` in two threads, both held at the commit and released together
    (on a warehouse with all the views, or those of `views`)."""
    _lagging_warehouse(warehouse, obj, views)
    version_before = _version(warehouse, obj)
    conns = [dagster_rw.connect(warehouse) for _ in range(2)]
    rendezvous = threading.Barrier(2, timeout=60)
    real = manifests.commit
    racers: set[int] = set()

    def commit(store, m, dropped, grace_seconds):
        if m.object == obj and threading.get_ident() in racers:
            rendezvous.wait()
        return real(store, m, dropped, grace_seconds)

    results: dict[int, object] = {}

    def step(i):
        racers.add(threading.get_ident())
        try:
            results[i] = conns[i].refresh(obj)
        except Exception as e:  # noqa: BLE001 - the outcome is what the test checks
            results[i] = e

    with mock.patch.object(manifests, "commit", commit):
        threads = [threading.Thread(target=step, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    errors = [r for r in results.values() if isinstance(r, BaseException)]
    unexpected = [e for e in errors if not isinstance(e, CommitConflict)]
    assert not unexpected, f"a losing step must fail with CommitConflict, not {unexpected!r}"
    for e in errors:
        assert isinstance(e, OperationalError)
        assert f"commit of {obj!r}" in str(e) and "committed by another process" in str(e) and "retry" in str(e)
    winners = [i for i, r in results.items() if not isinstance(r, BaseException)]
    loser = next((i for i in results if i not in winners), winners[0])
    # the loser retries on its own connection: nothing to do, the winner's commit is the state
    assert conns[loser].refresh(obj) == results[winners[0]]
    _check_after_race(warehouse, obj, version_before, conns[loser])
    return {"commits": len(winners), "conflicts": len(errors)}


@pytest.mark.parametrize("obj", ["acct", "ev_join"])
def test_concurrent_steps_in_threads_one_commits_the_other_gets_commit_conflict(tmp_path, obj):
    outcome = race_steps_in_threads(str(tmp_path / "wh"), obj)
    assert outcome == {"commits": 1, "conflicts": 1}


STEPPER = textwrap.dedent('''
    import json, os, sys, time
    import dagster_rw
    from dagster_rw.storage import manifest as manifests

    warehouse, obj, ready, go, out = sys.argv[1:6]
    real_commit = manifests.commit

    def commit(store, m, dropped, grace_seconds):
        if m.object == obj:  # hold the step at its commit until both processes are there
            open(ready, "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(go):
                if time.monotonic() > deadline:
                    raise SystemExit("never told to go")
                time.sleep(0.002)
        return real_commit(store, m, dropped, grace_seconds)

    manifests.commit = commit
    conn = dagster_rw.connect(warehouse)
    try:
        result = {"ok": True, "epoch": conn.refresh(obj)}
    except Exception as e:
        result = {"ok": False, "type": type(e).__name__, "classes": [c.__name__ for c in type(e).__mro__],
                  "message": str(e)}
    with open(out, "w") as f:
        json.dump(result, f)
''')


@pytest.mark.parametrize("obj", ["acct", "ev_join"])
def test_concurrent_steps_in_two_processes_one_commits_the_other_gets_commit_conflict(tmp_path, obj):
    warehouse = str(tmp_path / "wh")
    _lagging_warehouse(warehouse, obj)
    version_before = _version(warehouse, obj)
    go = tmp_path / "go"
    procs = []
    for i in range(2):
        args = [warehouse, obj, str(tmp_path / f"ready{i}"), str(go), str(tmp_path / f"out{i}.json")]
        procs.append(_spawn(STEPPER, args, tmp_path, "stepper"))
    try:
        for i, p in enumerate(procs):
            _wait_for((tmp_path / f"ready{i}").exists, p, f"stepper {i} to reach its commit")
        go.touch()
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                _kill(p)
    results = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    assert len(ok) == 1 and len(failed) == 1, results
    err = failed[0]
    assert err["type"] == "CommitConflict" and "OperationalError" in err["classes"], err
    assert f"commit of {obj!r}" in err["message"] and "committed by another process" in err["message"]
    later = dagster_rw.connect(warehouse)
    assert committed_epochs(later)[obj] == ok[0]["epoch"]
    _check_after_race(warehouse, obj, version_before, later)


# a child writer's start: its arguments, a connection, then a wait until the test says go
WRITER_START = '''
    import json, os, sys, time
    import dagster_rw

    warehouse, tag, count, go, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    conn = dagster_rw.connect(warehouse)
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.002)
'''

BARRIER_CUTTER = textwrap.dedent(WRITER_START + '''
    cut = []
    for i in range(count):
        stmt = tag * 1000 + i
        conn.execute(f"INSERT INTO acct VALUES ({stmt}, {tag}, {i})")
        cut.append([stmt, conn.barrier()])
    with open(out, "w") as f:
        json.dump(cut, f)
''')


def test_concurrent_barriers_get_distinct_epochs_and_seal_each_batch_once(tmp_path):
    """Two processes alternate INSERT and barrier as fast as they can, starting right after a FLUSH
    collected the staged files (no epoch above the staging watermark)."""
    warehouse = str(tmp_path / "wh")
    conn = dagster_rw.connect(warehouse)
    create_schema(conn)
    first = conn.flush()
    count = 12
    go = tmp_path / "go"
    procs = [_spawn(BARRIER_CUTTER, [warehouse, str(tag), str(count), str(go), str(tmp_path / f"cut{tag}.json")],
                    tmp_path, "cutter") for tag in (1, 2)]
    try:
        go.touch()
        for p in procs:
            p.wait(timeout=120)
            assert p.returncode == 0, open(p.stderr_path).read()
    finally:
        for p in procs:
            if p.poll() is None:
                _kill(p)
    cut = {stmt: epoch for tag in (1, 2) for stmt, epoch in json.loads((tmp_path / f"cut{tag}.json").read_text())}
    assert len(set(cut.values())) == 2 * count  # every barrier call got its own epoch

    conn.wh.sync()
    store = conn.wh.store
    sealed_in: dict[str, int] = {}
    for n in epochs_mod.epoch_numbers(store):
        for keys in epochs_mod.load_epoch(store, n)["batches"].values():
            for key in keys:
                assert key not in sealed_in, f"{key} sealed by epochs {sealed_in[key]} and {n}"
                sealed_in[key] = n
    assert set(cut.values()) <= set(epochs_mod.epoch_numbers(store))
    assert min(cut.values()) > first
    # each INSERT was sealed exactly once, no later than the barrier its writer cut right after it
    stmt_epoch: dict[int, int] = {}
    for key, n in sealed_in.items():
        for stmt in pq.read_table(store.local_path(key)).column("id").to_pylist():
            assert stmt not in stmt_epoch
            stmt_epoch[stmt] = n
    assert set(stmt_epoch) == set(cut)
    assert all(stmt_epoch[s] <= cut[s] for s in cut), {s: (stmt_epoch[s], cut[s]) for s in cut}

    conn.execute("FLUSH")
    assert sorted(r[0] for r in table_rows(conn)["acct"]) == sorted(cut)
    check_views(conn)


SAME_MILLISECOND_WRITER = textwrap.dedent('''
    import sys, time
    time.time = lambda: 1_800_000_000.0  # both writers stage their row in the same millisecond
    import dagster_rw

    conn = dagster_rw.connect(sys.argv[1])
    conn.execute(f"INSERT INTO ev VALUES ({sys.argv[2]}, 0, 0, 0)")
''')


def test_rows_two_processes_insert_in_the_same_millisecond_both_survive(tmp_path):
    warehouse = str(tmp_path / "wh")
    conn = dagster_rw.connect(warehouse)
    create_schema(conn, [])
    for stmt in (1, 2):
        proc = _spawn(SAME_MILLISECOND_WRITER, [warehouse, str(stmt)], tmp_path, "same_ms")
        proc.wait(timeout=120)
        assert proc.returncode == 0, open(proc.stderr_path).read()
    conn.execute("FLUSH")
    assert sorted(r[0] for r in table_rows(conn)["ev"]) == [1, 2]


# -- races found here (regression tests) ---------------------------------------------------------
# Each one forces the interleaving that broke the engine, in one process, with a hook.

def test_barrier_racing_another_barrier_never_reseals_a_batch(tmp_path):
    """Another process's barrier takes the log position this barrier reaches for: this one reads
    that entry and seals only what is left, as the next epoch."""
    warehouse = str(tmp_path / "wh")
    conn = dagster_rw.connect(warehouse)
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("INSERT INTO t VALUES (1, 1)")
    conn.execute("FLUSH")
    conn.execute("INSERT INTO t VALUES (2, 2)")

    class Racing(LocalStore):
        raced = 0

        def put_if_absent(self, key, data):
            if key.startswith("log/") and not Racing.raced:
                Racing.raced += 1
                epochs_mod.barrier(LocalStore(warehouse))
            return super().put_if_absent(key, data)

    racing = Racing(warehouse)
    mine = epochs_mod.barrier(racing)
    store = LocalStore(warehouse)
    assert Racing.raced == 1 and mine == epochs_mod.newest_epoch(store) == 3
    seen: dict[str, int] = {}
    for n in epochs_mod.epoch_numbers(store):
        for keys in epochs_mod.load_epoch(store, n)["batches"].values():
            for key in keys:
                assert key not in seen, f"{key} sealed by epoch {seen[key]} and again by epoch {n} (mine: {mine})"
                seen[key] = n
    assert len(epochs_mod.load_epoch(store, mine - 1)["batches"]["t"]) == 1  # the other barrier's
    assert epochs_mod.load_epoch(store, mine)["batches"] == {}
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM t").fetchall()) == [(1, 1), (2, 2)]


def test_table_step_losing_to_a_concurrent_flush_fails_with_commit_conflict(tmp_path):
    """A table step has listed its batches when another connection's FLUSH applies and collects
    them: the step must fail with CommitConflict (it used to fail with FileNotFoundError)."""
    warehouse = str(tmp_path / "wh")
    a = dagster_rw.connect(warehouse)
    b = dagster_rw.connect(warehouse)
    a.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    a.execute("INSERT INTO t VALUES (1, 1)")
    a.barrier()
    real = epochs_mod.batches_for

    def racing(store, table, after, upto):
        keys = real(store, table, after, upto)
        if store is a.wh.store:
            b.execute("FLUSH")
        return keys

    with mock.patch.object(epochs_mod, "batches_for", racing):
        with pytest.raises(CommitConflict, match="commit of 't'"):
            a.refresh("t")
    assert a.refresh("t") == b.status()[0]["epoch"]  # the retry has nothing left to do
    assert a.execute("SELECT * FROM t").fetchall() == [(1, 1)]


def test_flush_with_a_stale_catalog_keeps_another_connections_new_table_rows(tmp_path):
    """A FLUSH whose catalog predates a table another connection created and wrote to must not
    collect that table's staged batches (the acknowledged rows used to be lost)."""
    warehouse = str(tmp_path / "wh")
    c = dagster_rw.connect(warehouse)
    d = dagster_rw.connect(warehouse)
    c.execute("CREATE TABLE a (id INT PRIMARY KEY)")
    c.wh.sync()  # c's FLUSH starts: it reads the catalog ...
    d.execute("CREATE TABLE b (id INT PRIMARY KEY)")  # ... d creates a table and writes to it ...
    d.execute("INSERT INTO b VALUES (1)")
    c.wh.barrier()  # ... and c's FLUSH goes on: barrier, steps, collection of staged batches
    c.wh.refresh_all()
    d.execute("FLUSH")
    assert d.execute("SELECT * FROM b").fetchall() == [(1,)]


def test_commit_that_another_writer_built_on_is_not_reported_as_discarded(tmp_path):
    """Right after this writer's log entry, another writer reads it and commits the next version
    on top: this commit is in effect and is reported as such."""
    root = str(tmp_path / "wh")
    manifests.commit(LocalStore(root), manifests.Manifest(object="x"), [], 0)

    class Racing(LocalStore):
        def put_if_absent(self, key, data):
            ok = super().put_if_absent(key, data)
            if ok and key.startswith("log/"):
                other = LocalStore(root)
                m = manifests.load(other, "x", refresh=True)
                assert m.version == 2
                manifests.commit(other, manifests.Manifest(object="x", version=2, epoch=7), [], 0)
            return ok

    committed = manifests.commit(Racing(root), manifests.Manifest(object="x", version=1, epoch=5), [], 0)
    assert committed.version == 2 and committed.epoch == 5
    latest = manifests.load(LocalStore(root), "x", refresh=True)
    assert (latest.version, latest.epoch) == (3, 7)


def test_query_reads_its_version_while_another_connection_compacts(tmp_path):
    """A query has loaded a view's manifest when another connection compacts the view: the query
    still reads that version (with a zero grace period it used to fail with a DuckDB IOException)."""
    warehouse = str(tmp_path / "wh")
    reader = dagster_rw.connect(warehouse)
    reader.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    reader.execute("CREATE MATERIALIZED VIEW s AS SELECT v, count(*) AS n FROM t GROUP BY v")
    for i in range(3):
        reader.execute(f"INSERT INTO t VALUES ({i}, {i})")
        reader.execute("FLUSH")
    writer = dagster_rw.connect(warehouse, compact_max_files=2)
    real = step_mod.output_table
    fired = []

    def racing(wh, obj, m, engine=None):
        table = real(wh, obj, m, engine)
        if wh is reader.wh and obj.name == "s" and not fired:
            fired.append({f.key for f in m.state.get("output", [])})
            for i in range(3, 8):
                writer.execute(f"INSERT INTO t VALUES ({i}, {i})")
                writer.execute("FLUSH")
        return table

    with mock.patch.object(step_mod, "output_table", racing):
        rows = reader.execute("SELECT * FROM s").fetchall()
    now_listed = {f.key for f in manifests.load(LocalStore(warehouse), "s").state.get("output", [])}
    assert fired and not fired[0] & now_listed  # the files the query read were compacted away
    assert sorted(rows) == [(i, 1) for i in range(3)]
    assert sorted(reader.execute("SELECT * FROM s").fetchall()) == [(i, 1) for i in range(8)]


FLUSHER = textwrap.dedent(WRITER_START + '''
    flushes = 0
    for i in range(count):
        conn.execute(f"INSERT INTO t VALUES ({tag * 1000 + i}, {tag})")
        conn.execute("FLUSH")  # an error here ends the process with a traceback
        flushes += 1
    with open(out, "w") as f:
        json.dump({"flushes": flushes, "retried": conn.wh.flush_retries}, f)
''')


@pytest.mark.parametrize("where,writers", [("local", 2), ("local", 4), ("s3", 2), ("s3", 4)])
def test_concurrent_flushes_succeed_without_caller_retries(tmp_path, s3_server, where, writers):
    """Several processes INSERT into one table and FLUSH at once, on a folder and on S3: every
    FLUSH returns without error (a step that loses a commit race reads the warehouse again and goes
    on), every accepted row is in the table once, and the views count every row."""
    if where == "s3":
        bucket = f"flush-{writers}-{tmp_path.name[-8:].lower().replace('_', '-')}"
        s3_server.create_bucket(bucket)
        warehouse = f"s3://{bucket}/wh"
    else:
        warehouse = str(tmp_path / "wh")
    conn = dagster_rw.connect(warehouse)
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, w INT)")
    conn.execute("CREATE MATERIALIZED VIEW per_writer AS SELECT w, count(*) AS n FROM t GROUP BY w")
    conn.execute("CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(id) AS s FROM t")
    count, go = 4, tmp_path / "go"
    procs = [_spawn(FLUSHER, [warehouse, str(w), str(count), str(go), str(tmp_path / f"out{w}.json")], tmp_path,
                    "flusher", env=s3_server.env if where == "s3" else None) for w in range(writers)]
    try:
        go.touch()
        for p in procs:
            p.wait(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                _kill(p)
    for w, p in enumerate(procs):
        assert p.returncode == 0, f"writer {w} failed:\n{_stderr(p)}"
        out = json.loads((tmp_path / f"out{w}.json").read_text())
        assert out["flushes"] == count
    conn.execute("FLUSH")
    ids = sorted(w * 1000 + i for w in range(writers) for i in range(count))
    assert [r[0] for r in conn.execute("SELECT id FROM t ORDER BY id").fetchall()] == ids
    assert sorted(conn.execute("SELECT * FROM per_writer").fetchall()) == [(w, count) for w in range(writers)]
    assert conn.execute("SELECT * FROM total").fetchall() == [(len(ids), sum(ids))]


def test_an_update_whose_staged_batch_another_flush_collects_meanwhile_reads_again(tmp_path):
    """An UPDATE has listed a staged batch as not yet applied when another connection's FLUSHes
    apply it and delete its file: the UPDATE reads the log again and finds the rows committed
    (it used to be refused: 'a file the warehouse lists is missing', found by the soak)."""
    warehouse = str(tmp_path / "wh")
    a = dagster_rw.connect(warehouse)
    b = dagster_rw.connect(warehouse)
    a.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    a.execute("INSERT INTO t VALUES (1, 1)")
    a.execute("FLUSH")
    a.execute("INSERT INTO t VALUES (2, 2)")  # staged, not yet sealed
    real = epochs_mod.unsealed_batches
    collected = []

    def racing(store, table):
        keys = real(store, table)
        if store is a.wh.store and keys and not collected:
            for i in range(200):  # until a checkpoint deletes the applied batch's file
                if not a.wh.store.exists(keys[0]):
                    break
                b.execute(f"INSERT INTO t VALUES ({100 + i}, 0)")
                b.execute("FLUSH")
            collected.append(100 + i)
            assert not a.wh.store.exists(keys[0])
        return keys

    with mock.patch.object(epochs_mod, "unsealed_batches", racing):
        a.execute("UPDATE t SET v = v + 10 WHERE id = 2")
    assert collected
    a.execute("FLUSH")
    rows = sorted(a.execute("SELECT * FROM t").fetchall())
    assert rows == [(1, 1), (2, 12)] + [(k, 0) for k in range(100, collected[0])]
