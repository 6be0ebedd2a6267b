"""Durability: acknowledged DML survives SIGKILL of the writer, and a step that dies half-way (killed,
or failing with an exception) leaves the last committed version readable and is redone correctly.

The writer is a real child process killed with SIGKILL at random moments (while it stages DML, cuts
barriers, steps tables and views or collects staged files). It logs an *intent* line before each
statement and an *ack* line after execute() returns (both fsynced), so the parent knows exactly which
statements were acknowledged and which single statement was in flight at each kill. Every statement
touches its own rows (unique ids per INSERT; an UPDATE or DELETE targets the rows of one earlier
acknowledged INSERT that nothing else ever touches again), so each in-flight statement may have been
applied or not, independently, and everything else must be there exactly once.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.errors import BrokenObject, OperationalError
from dagster_rw.storage import manifest as manifests
from dagster_rw.storage.object_store import LocalStore
from dagster_rw.storage.state_table import StateTable

TABLES = {
    "acct": "CREATE TABLE acct (id INT PRIMARY KEY, grp INT, v INT)",
    "ev": "CREATE TABLE ev (stmt INT, id INT, grp INT, amt INT)",  # no primary key: a duplicate would show
}
VIEWS = {
    "by_grp": "SELECT grp, count(*) AS n, sum(v) AS sv, min(v) AS mn, max(v) AS mx FROM acct GROUP BY grp",
    "ev_join": "SELECT a.grp, count(*) AS n, sum(e.amt) AS total, min(e.amt) AS mn, max(e.amt) AS mx "
               "FROM ev e JOIN acct a ON e.id = a.id GROUP BY a.grp",
    "ev_minmax": "SELECT grp, min(amt) AS mn, max(amt) AS mx, count(*) AS n FROM ev GROUP BY grp",
    "top_acct": "SELECT id, v FROM acct ORDER BY v DESC, id LIMIT 5",
}
COLUMNS = {"acct": 3, "ev": 4}


def create_schema(conn, views=None) -> None:
    """Both tables and the views (or those of `views`)."""
    for ddl in TABLES.values():
        conn.execute(ddl)
    for name in views if views is not None else VIEWS:
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name]}")


def views_in(conn) -> list[str]:
    return [v for v in VIEWS if conn.wh.catalog().get(v) is not None]


def rows_of(conn, name: str) -> list[tuple]:
    return sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr)


def table_rows(conn) -> dict[str, list[tuple]]:
    return {t: rows_of(conn, t) for t in TABLES}


def oracle_over(tables: dict[str, list[tuple]]) -> Oracle:
    """DuckDB holding exactly `tables` (as read back through SELECT) and the view definitions."""
    oracle = Oracle()
    for name, ddl in TABLES.items():
        oracle.execute(ddl)
        if tables[name]:
            marks = ", ".join("?" * COLUMNS[name])
            oracle.db.executemany(f"INSERT INTO {name} VALUES ({marks})", [list(r) for r in tables[name]])
    for name, sql in VIEWS.items():
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
    return oracle


def check_views(conn, names=None) -> None:
    """Each view (or each of `names`) equals DuckDB's answer over the tables' committed contents."""
    oracle = oracle_over(table_rows(conn))
    for name in names if names is not None else views_in(conn):
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)


def committed_epochs(conn) -> dict[str, int]:
    return {s["name"]: s["epoch"] for s in conn.status()}


def object_files(conn, obj: str) -> set[str]:
    return {k for k in conn.wh.store.list(f"objects/{obj}/") if k.endswith(".parquet")}


def packs(conn) -> set[str]:
    return set(conn.wh.store.list("packs/"))


def held_files(conn, obj: str) -> set[str]:
    """The object's files the warehouse holds: on disk, or packed (a packed file's copy is written
    only when something reads it; its pack, named by the log, holds it)."""
    store = conn.wh.store
    in_packs = {k for k in listed_files(conn, obj)
                if (where := store.locate_packed(k)) is not None and store.exists(where[0])}
    return object_files(conn, obj) | in_packs


def listed_files(conn, obj: str) -> set[str]:
    """The files the object's committed manifest refers to."""
    m = conn.wh.manifest(obj)
    return {f.key for files in m.state.values() for f in files} | {f.key for f in m.changelog}


def _wait_for(predicate, proc, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the child exited ({proc.returncode}) while waiting for {what}:\n"
                                 + _stderr(proc))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _stderr(proc) -> str:
    path = getattr(proc, "stderr_path", None)
    return open(path).read()[-4000:] if path and os.path.exists(path) else ""


def _spawn(script: str, args: list[str], tmp_path, name: str, env: dict | None = None):
    path = tmp_path / f"{name}.py"
    if not path.exists():
        path.write_text(script)
    err = tmp_path / f"{name}-{time.monotonic_ns()}.stderr"
    scratch = tmp_path / "child-tmp"  # what a killed child leaves in its scratch folder stays here
    scratch.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.DEVNULL,
                            stderr=open(err, "w"), env={**os.environ, "TMPDIR": str(scratch), **(env or {})})
    proc.stderr_path = str(err)
    return proc


def _kill(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"the child was not killed but exited {proc.returncode}:\n" \
                                               + _stderr(proc)


# -- the killed writer ---------------------------------------------------------------------------

WRITER = textwrap.dedent('''
    import json, os, random, sys
    import dagster_rw

    warehouse, log_path, ready_path, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    # a kill can cut the last log line: drop the partial line before appending
    if os.path.exists(log_path):
        data = open(log_path, "rb").read()
        if data and not data.endswith(b"\\n"):
            with open(log_path, "r+b") as f:
                f.truncate(data.rfind(b"\\n") + 1)
    entries = [json.loads(line) for line in open(log_path)] if os.path.exists(log_path) else []
    intents = {e["n"]: e for e in entries if e["kind"] == "intent"}
    acked = {e["n"] for e in entries if e["kind"] == "ack"}
    targeted = {e["target"] for e in intents.values() if e["target"] is not None}
    n = max(intents, default=-1) + 1

    log = open(log_path, "a")

    def write(entry):
        log.write(json.dumps(entry) + "\\n")
        log.flush()
        os.fsync(log.fileno())

    def candidates(op):
        return sorted(m for m in acked if intents[m]["op"] == op and m not in targeted)

    conn = dagster_rw.connect(warehouse)
    open(ready_path, "w").close()
    while True:
        rng = random.Random(seed * 1_000_003 + n)
        r = rng.random()
        accts, evs = candidates("insert_acct"), candidates("insert_ev")
        target, rows = None, None
        if r < 0.4 or not accts:
            op = "insert_acct"
            rows = [[n * 10 + j, rng.randrange(5), rng.randrange(-50, 50)] for j in range(3)]
            sql = "INSERT INTO acct VALUES " + ", ".join("(%d, %d, %d)" % tuple(r) for r in rows)
        elif r < 0.65:
            op = "insert_ev"
            ids = [rng.choice(accts) * 10 + rng.randrange(3) if rng.random() < 0.8 else n * 10 for _ in range(3)]
            rows = [[n, i, rng.randrange(5), rng.randrange(-50, 50)] for i in ids]
            sql = "INSERT INTO ev VALUES " + ", ".join("(%d, %d, %d, %d)" % tuple(r) for r in rows)
        elif r < 0.8:
            op, target = "update_acct", rng.choice(accts)
            sql = "UPDATE acct SET v = v + 1000, grp = grp + 5 WHERE id >= %d AND id < %d" % (
                target * 10, target * 10 + 10)
        elif r < 0.9 or not evs:
            op, target = "delete_acct", rng.choice(accts)
            sql = "DELETE FROM acct WHERE id >= %d AND id < %d" % (target * 10, target * 10 + 10)
        elif r < 0.95:
            op, target = "update_ev", rng.choice(evs)
            sql = "UPDATE ev SET amt = amt * 2 + 1 WHERE stmt = %d" % target
        else:
            op, target = "delete_ev", rng.choice(evs)
            sql = "DELETE FROM ev WHERE stmt = %d" % target
        intents[n] = {"kind": "intent", "n": n, "op": op, "sql": sql, "rows": rows, "target": target}
        if target is not None:
            targeted.add(target)
        write(intents[n])
        conn.execute(sql)
        write({"kind": "ack", "n": n})
        acked.add(n)
        if n % 4 == 3:
            conn.execute("FLUSH")
        n += 1
''')


def read_log(path) -> tuple[dict[int, dict], set[int]]:
    intents, acked = {}, set()
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # cut by the last kill
            e = json.loads(line)
            if e["kind"] == "intent":
                intents[e["n"]] = e
            else:
                acked.add(e["n"])
    return intents, acked


def allowed_outcomes(intents: dict[int, dict], acked: set[int]) -> dict[tuple[str, int], list[list[tuple]]]:
    """For the rows of each INSERT statement (acct rows by id // 10, ev rows by stmt): every content
    they may have now. An acknowledged statement must have taken effect exactly once; the statement
    in flight at a kill may or may not have."""
    def apply(op, rows):
        if op == "update_acct":
            return [(i, g + 5, v + 1000) for i, g, v in rows]
        if op == "update_ev":
            return [(s, i, g, a * 2 + 1) for s, i, g, a in rows]
        return []  # deletes

    touched_by = {e["target"]: e for e in intents.values() if e["target"] is not None}
    out = {}
    for n, e in intents.items():
        if not e["op"].startswith("insert"):
            continue
        table = "acct" if e["op"] == "insert_acct" else "ev"
        base = [tuple(r) for r in e["rows"]]
        if table == "acct":  # an INSERT with a repeated key keeps the last row
            base = list({r[0]: r for r in base}.values())
        states = [base] if n in acked else [[], base]
        change = touched_by.get(n)
        if change is not None:
            changed = [apply(change["op"], s) for s in states]
            states = changed if change["n"] in acked else states + changed
        out[(table, n)] = [sorted(s) for s in states]
    return out


def check_tables_against_log(conn, log_path) -> int:
    intents, acked = read_log(log_path)
    allowed = allowed_outcomes(intents, acked)
    actual: dict[tuple[str, int], list] = {}
    for table, rows in table_rows(conn).items():
        for r in rows:
            group = (table, r[0] // 10 if table == "acct" else r[0])
            actual.setdefault(group, []).append(tuple(r))
    stray = set(actual) - set(allowed)
    assert not stray, f"rows of no logged statement: {[actual[g] for g in stray][:5]}"
    for group, options in allowed.items():
        got = sorted(actual.get(group, []))
        assert got in options, (
            f"{group[0]} rows of statement {group[1]} ({intents[group[1]]['sql']}): got {got}, "
            f"want one of {options} (acknowledged: {group[1] in acked})")
    return len(acked)


def check_committed_state_readable(warehouse) -> None:
    """After a kill: every object reads at its committed epoch, and each view that is at the same
    epoch as all its inputs equals DuckDB over the inputs' committed contents."""
    conn = dagster_rw.connect(warehouse)
    epochs = committed_epochs(conn)
    for name in epochs:
        conn.execute(f"SELECT * FROM {name}").fetchall()
    in_step = [v for v in VIEWS if all(epochs[i] == epochs[v] for i in conn.wh.get(v).inputs)]
    check_views(conn, in_step)
    conn.close()


def test_killed_writer_loses_no_acknowledged_row(tmp_path):
    """SIGKILL the writer 6 times at random moments, restarting it on the same warehouse each time.
    After every kill the committed state reads; at the end every acknowledged statement took effect
    exactly once and every view equals DuckDB over the tables. (DRW_KILL_SEED replays a run.)"""
    seed = int(os.environ.get("DRW_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    warehouse = str(tmp_path / "wh")
    setup = dagster_rw.connect(warehouse)
    create_schema(setup)
    setup.close()
    log_path = tmp_path / "acks.log"
    kills = 6
    for round_ in range(kills):
        ready = tmp_path / f"ready-{round_}"
        before = len(read_log(log_path)[1]) if log_path.exists() else 0
        proc = _spawn(WRITER, [warehouse, str(log_path), str(ready), str(seed)], tmp_path, "writer")
        try:
            _wait_for(ready.exists, proc, "the writer to connect")
            # at least one new statement acknowledged each round, then a random moment
            _wait_for(lambda: len(read_log(log_path)[1]) > before, proc, "an acknowledged statement")
            time.sleep(rng.uniform(0.0, 1.0))
        finally:
            if proc.poll() is None:
                _kill(proc)
        assert proc.returncode == -signal.SIGKILL, f"seed {seed}: the writer died by itself:\n{_stderr(proc)}"
        try:
            check_committed_state_readable(warehouse)
        except AssertionError as e:
            raise AssertionError(f"seed {seed}, after kill {round_ + 1}: {e}") from None
    conn = dagster_rw.connect(warehouse)
    conn.execute("FLUSH")
    assert len(set(committed_epochs(conn).values())) == 1
    try:
        n_acked = check_tables_against_log(conn, log_path)
        check_views(conn)
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None
    assert n_acked >= kills


# -- a kill inside a step ------------------------------------------------------------------------

PAUSED_WRITER = textwrap.dedent('''
    import os, sys, time
    import dagster_rw
    from dagster_rw.storage import manifest as manifests

    warehouse, pause_object, marker = sys.argv[1], sys.argv[2], sys.argv[3]
    real_publish = manifests.publish

    def publish(store, versions, what, extra=None):
        if any(m.object == pause_object for m in versions):  # every step has written its files
            open(marker, "w").close()                        # hold the FLUSH just before its commit
            time.sleep(120)
        return real_publish(store, versions, what, extra)

    manifests.publish = publish
    conn = dagster_rw.connect(warehouse)
    conn.execute("UPDATE acct SET v = v + 100 WHERE grp = 1")
    conn.execute("DELETE FROM acct WHERE id = 4")
    conn.execute("INSERT INTO ev VALUES (9, 2, 3, -40), (9, 5, 3, 90)")
    conn.execute("FLUSH")
''')


def _seed_warehouse(warehouse) -> None:
    conn = dagster_rw.connect(warehouse)
    create_schema(conn)
    conn.execute("INSERT INTO acct VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, 2, -5), (5, 3, 7)")
    conn.execute("INSERT INTO ev VALUES (1, 1, 1, 5), (1, 2, 1, 7), (2, 3, 2, 11), (2, 9, 0, 3)")
    conn.execute("FLUSH")
    conn.execute("DELETE FROM ev WHERE id = 9")
    conn.execute("FLUSH")
    conn.close()


AFTER_PAUSED_WRITER = {
    "acct": [(1, 1, 110), (2, 1, 120), (3, 2, 30), (5, 3, 7)],
    "ev": [(1, 1, 1, 5), (1, 2, 1, 7), (2, 3, 2, 11), (9, 2, 3, -40), (9, 5, 3, 90)],
}


@pytest.mark.parametrize("paused", ["acct", "ev_join"])
def test_kill_inside_a_step_leaves_the_last_committed_version_readable(tmp_path, paused):
    warehouse = str(tmp_path / "wh")
    _seed_warehouse(warehouse)
    reader = dagster_rw.connect(warehouse)
    epochs_before = committed_epochs(reader)
    contents_before = {n: rows_of(reader, n) for n in epochs_before}
    files_before, packs_before = held_files(reader, paused), packs(reader)
    marker = tmp_path / "in-step"
    proc = _spawn(PAUSED_WRITER, [warehouse, paused, str(marker)], tmp_path, "paused")
    try:
        _wait_for(marker.exists, proc, f"the step of {paused!r} to reach its commit")
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert proc.returncode == -signal.SIGKILL

    reader = dagster_rw.connect(warehouse)
    epochs_now = committed_epochs(reader)
    assert epochs_now[paused] == epochs_before[paused]
    assert rows_of(reader, paused) == contents_before[paused]
    written = object_files(reader, paused) - files_before
    # (its small files are in a pack that no log entry names, their copies not written)
    assert written or packs(reader) - packs_before, "the killed step had written its files (it died mid-step)"
    assert not written & listed_files(reader, paused), "none of them is visible"
    assert listed_files(reader, paused) <= held_files(reader, paused)  # the committed version is whole
    assert epochs_now == epochs_before  # a FLUSH commits every object at once, or none
    for name in epochs_now:  # every object still reads
        reader.execute(f"SELECT * FROM {name}").fetchall()

    reader.execute("FLUSH")  # the killed step is redone; the acknowledged DML is all there
    assert table_rows(reader) == {t: sorted(rows, key=repr) for t, rows in AFTER_PAUSED_WRITER.items()}
    check_views(reader)
    assert len(set(committed_epochs(reader).values())) == 1


# -- a step failing with an exception ------------------------------------------------------------

class Injected(RuntimeError):
    pass


def _fail_commit_of(monkeypatch, obj: str):
    """Fail the FLUSH's commit, which holds `obj`'s new version."""
    real = manifests.publish
    state = {"failed": False}

    def publish(store, versions, what, extra=None):
        if any(m.object == obj for m in versions) and not state["failed"]:
            state["failed"] = True
            raise Injected(f"injected failure committing {obj}")
        return real(store, versions, what, extra)

    monkeypatch.setattr(manifests, "publish", publish)
    return state


def _fail_operator_state_flush_of(monkeypatch, obj: str):
    """Fail when the view's operator state is written: its output file has been written already."""
    real = StateTable.prepare
    state = {"failed": False}

    def prepare(self, epoch_from, epoch_to):
        if self.key_dir.startswith(f"objects/{obj}/state/op") and not state["failed"]:
            state["failed"] = True
            raise Injected(f"injected failure writing the state of {obj}")
        return real(self, epoch_from, epoch_to)

    monkeypatch.setattr(StateTable, "prepare", prepare)
    return state


DML_ROUNDS = [
    ["INSERT INTO acct VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, 2, -5)",
     "INSERT INTO ev VALUES (1, 1, 1, 5), (1, 2, 1, 7), (2, 3, 2, 11)"],
    ["UPDATE acct SET v = v * 3 WHERE grp = 2", "DELETE FROM acct WHERE id = 2",
     "INSERT INTO ev VALUES (3, 4, 4, -8), (3, 1, 4, 50)", "DELETE FROM ev WHERE stmt = 2"],
    ["INSERT INTO acct VALUES (5, 1, 99), (2, 3, 1)", "UPDATE ev SET amt = amt + 1 WHERE grp = 1"],
]


@pytest.mark.parametrize("where", ["acct commit", "ev_join commit", "by_grp state write"])
def test_failed_step_keeps_last_committed_version_and_retry_matches_clean_run(tmp_path, monkeypatch, where):
    failing = dagster_rw.connect(str(tmp_path / "failing"))
    clean = dagster_rw.connect(str(tmp_path / "clean"))
    for conn in (failing, clean):
        create_schema(conn, ["by_grp", "ev_join"])
        for sql in DML_ROUNDS[0]:
            conn.execute(sql)
        conn.execute("FLUSH")
    before = {n: rows_of(failing, n) for n in committed_epochs(failing)}
    epochs_before = committed_epochs(failing)
    for sql in DML_ROUNDS[1]:
        failing.execute(sql)
        clean.execute(sql)
    obj, _, point = where.partition(" ")
    state = (_fail_commit_of if point == "commit" else _fail_operator_state_flush_of)(monkeypatch, obj)

    # a commit's failure fails the FLUSH; a step's own is its object's: the others advance
    with pytest.raises((Injected, BrokenObject)) as e:
        failing.execute("FLUSH")
    assert state["failed"]
    if isinstance(e.value, BrokenObject):
        assert point != "commit" and "Injected: injected failure" in e.value.broken[obj]
    epochs_mid = committed_epochs(failing)
    assert epochs_mid[obj] == epochs_before[obj]
    assert rows_of(failing, obj) == before[obj]
    if point == "commit":  # the FLUSH's one commit failed: no object advanced
        assert epochs_mid == epochs_before
    # views at one epoch with their inputs still agree with them
    check_views(failing, [v for v in views_in(failing)
                          if all(epochs_mid[i] == epochs_mid[v] for i in failing.wh.get(v).inputs)])

    failing.execute("FLUSH")  # the retry (the injection fires only once)
    clean.execute("FLUSH")
    for sql in DML_ROUNDS[2]:
        failing.execute(sql)
        clean.execute(sql)
    failing.execute("FLUSH")
    clean.execute("FLUSH")
    for name in committed_epochs(clean):
        assert rows_of(failing, name) == rows_of(clean, name), name
    check_views(failing)


# -- uploads -------------------------------------------------------------------------------------

def test_interrupted_upload_leaves_no_partial_object(tmp_path, monkeypatch):
    """An upload that dies half-way (here: a cross-device move whose copy fails) must not leave a
    truncated file under the final key, where a barrier would seal it as a staged batch."""
    store = LocalStore(str(tmp_path / "wh"))
    src = tmp_path / "scratch.parquet"
    src.write_bytes(b"x" * 100_000)

    real_rename, real_replace = os.rename, os.replace

    def across_devices(real):
        def rename(a, b, *args, **kw):  # the scratch folder is on another device than the warehouse
            if os.path.dirname(os.path.abspath(a)) != os.path.dirname(os.path.abspath(b)):
                raise OSError(18, "Invalid cross-device link")  # EXDEV: a move falls back on copying
            return real(a, b, *args, **kw)
        return rename

    def half_copy(fsrc, fdst, length=0):
        fdst.write(fsrc.read(50_000))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", across_devices(real_rename))
    monkeypatch.setattr(os, "replace", across_devices(real_replace))
    monkeypatch.setattr(shutil, "copyfileobj", half_copy)
    monkeypatch.setattr(shutil, "_fastcopy_sendfile", half_copy, raising=False)
    with pytest.raises(OperationalError, match="the disk is full"):
        store.upload_file(str(src), "staging/t/batch.parquet")
    monkeypatch.undo()
    assert not store.exists("staging/t/batch.parquet")
    assert store.list("staging/") == []
    store.upload_file(str(src), "staging/t/batch.parquet")  # and a complete upload works
    assert store.read_bytes("staging/t/batch.parquet") == b"x" * 100_000


def test_a_crash_before_staged_batches_are_deleted_seals_and_applies_nothing_twice(tmp_path, monkeypatch):
    """The staged batches every table applied are deleted in bulk by the writer of the log's next
    checkpoint: a crash first leaves files no entry names. The next process neither reseals nor
    reapplies them, nor misses a row."""
    from dagster_rw.storage import log as log_mod

    warehouse = str(tmp_path / "wh")
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT count(*) AS n, sum(v) AS total FROM t")
    monkeypatch.setattr(log_mod.WarehouseLog, "_checkpoint", lambda self: None)  # the crash, at every one
    conn.execute("INSERT INTO t VALUES (1, 10)")
    conn.flush()
    conn.execute("INSERT INTO t VALUES (2, 20), (1, 11)")
    conn.flush()
    conn.close()
    monkeypatch.undo()
    store = LocalStore(warehouse)
    left = store.list("staging/")
    assert len(left) == 2  # applied by every table, still there
    fresh = dagster_rw.connect(warehouse, engine="duckdb")
    assert fresh.wh.pending_inputs() == {}
    fresh.execute("INSERT INTO t VALUES (3, 30)")
    fresh.flush()
    assert fresh.execute("SELECT * FROM s").fetchall() == [(3, 61)]
    assert sorted(fresh.execute("SELECT * FROM t").fetchall()) == [(1, 11), (2, 20), (3, 30)]
    fresh.flush()  # nothing staged: an empty epoch changes nothing
    assert fresh.execute("SELECT * FROM s").fetchall() == [(3, 61)]
    assert log_mod.log_of(fresh.wh.store).current().position < log_mod.CHECKPOINT_INTERVAL
    for i in range(log_mod.CHECKPOINT_INTERVAL):  # the log's first checkpoint deletes its trash,
        fresh.flush()                             # the batches of the crashed process among them
    assert store.list("staging/") == []


def test_packed_files_lost_in_a_machine_crash_are_restored_from_their_pack(tmp_path):
    """On a local folder a FLUSH's small files are written without an fsync of their own; the
    round's pack, fsynced once before the log entry, is their durable copy. A crash of the machine
    may then lose a file or cut it short: the next process reads it again from the pack, and every
    view still equals DuckDB's answer."""
    from dagster_rw.storage import log as log_mod
    from dagster_rw.storage import sst_cache

    warehouse = str(tmp_path / "wh")
    views = ["by_grp", "ev_join"]
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    create_schema(conn, views)
    oracle = Oracle()
    for ddl in TABLES.values():
        oracle.execute(ddl)

    def run(sql):
        conn.execute(sql)
        oracle.execute(sql)

    for i in range(3):
        run("INSERT INTO acct VALUES " + ", ".join(f"({10 * i + j}, {j % 3}, {10 * i + j})" for j in range(5)))
        run("INSERT INTO ev VALUES " + ", ".join(f"({i}, {10 * i + j}, {j % 3}, {j})" for j in range(5)))
        conn.execute("FLUSH")
    conn.close()
    state = log_mod.log_of(LocalStore(warehouse)).current()
    listed = state.listed_files()
    packed = sorted(k for k in state.packed if k in listed)
    assert len(packed) >= 6, "a FLUSH on a local folder packs its small files"
    for n, key in enumerate(packed):  # what a crash of the machine may leave of unsynced files
        path = os.path.join(warehouse, key)
        if n % 2:
            os.unlink(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
    sst_cache.clear()  # a new process: nothing decoded yet
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    for name in views:
        assert_same(rows_of(conn, name), oracle.rows(VIEWS[name]), name)
    run("INSERT INTO acct VALUES (100, 1, 100)")
    run("UPDATE acct SET v = 7 WHERE id = 3")
    conn.execute("FLUSH")
    for name in views:
        assert_same(rows_of(conn, name), oracle.rows(VIEWS[name]), name)
    conn.close()
