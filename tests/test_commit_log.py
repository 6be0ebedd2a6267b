"""The warehouse log (storage/log.py): one entry per commit, checkpoints, packs, pruning, and
processes killed at each point of a commit.

The kill tests run a real writer process on moto's S3 server that INSERTs and FLUSHes in a loop,
logging each INSERT once execute() returned (fsynced), and kills itself (SIGKILL) at one point of
the commit protocol, of DML staging or of compaction (explicit, or a background merge). The next
process must see every object at a committed epoch, every acknowledged row exactly once (the
statement in flight at most once), and views equal to DuckDB's answer over the tables.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import pytest
from oracle import Oracle, assert_same
from s3_server import MotoS3

import dagster_rw
from dagster_rw.storage import log as log_mod
from dagster_rw.storage import manifest as manifests
from dagster_rw.storage import sweep as sweeping
from dagster_rw.storage.object_store import LocalStore, S3Store

BUCKET = "rw-commit-log"
VIEWS = {
    "by_k": "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS mx FROM t GROUP BY k",
    "joined": "SELECT d.name, count(*) AS n, sum(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name",
    "top": "SELECT id, v FROM t ORDER BY v DESC, id LIMIT 3",
}


@pytest.fixture(scope="module")
def s3():
    with MotoS3() as server:
        server.create_bucket(BUCKET)
        yield server


def _schema(conn) -> None:
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    conn.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
    conn.execute("INSERT INTO d VALUES (0, 'zero'), (1, 'one'), (2, 'two')")
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    conn.execute("FLUSH")


def _check(conn, acked: list[tuple]) -> None:
    """The table holds exactly the acknowledged rows; every view equals DuckDB's answer."""
    rows = sorted(conn.execute("SELECT * FROM t").fetchall())
    assert rows == sorted(acked)
    oracle = Oracle()
    oracle.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    oracle.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
    oracle.execute("INSERT INTO d VALUES (0, 'zero'), (1, 'one'), (2, 'two')")
    if rows:
        oracle.db.executemany("INSERT INTO t VALUES (?, ?, ?)", [list(r) for r in rows])
    for name, sql in VIEWS.items():
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)


# -- a writer killed at each point of a commit ---------------------------------------------------

KILLED_WRITER = textwrap.dedent('''
    import os, signal, sys
    import dagster_rw
    from dagster_rw.runtime import epochs as epochs_mod
    from dagster_rw.runtime import warehouse as warehouse_mod
    from dagster_rw.storage import log as log_mod
    from dagster_rw.storage import manifest as manifest_mod
    from dagster_rw.storage import pack as pack_mod
    from dagster_rw.storage.state_table import StateTable

    url, point, acks = sys.argv[1:4]
    calls = {"n": 0}

    def kill_after(real, nth):
        def wrapper(*args, **kwargs):
            out = real(*args, **kwargs)
            calls["n"] += 1
            if calls["n"] >= nth:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        return wrapper

    def kill_before(real, nth=1, when=lambda *args: True):
        def wrapper(*args, **kwargs):
            if when(*args):
                calls["n"] += 1
                if calls["n"] >= nth:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return wrapper

    options = {"compact_max_files": 2, "background_compaction": False}
    compacting = {"now": False}
    if point == "pack":  # the pack is in the bucket, the log entry that would list it is not
        pack_mod.Pack.upload = kill_after(pack_mod.Pack.upload, 3)
    elif point == "checkpoint":  # the entry at a checkpoint position is in, the checkpoint is not
        log_mod.WarehouseLog._checkpoint = kill_before(log_mod.WarehouseLog._checkpoint)
    elif point == "merge":  # a merge of (packed) state files has written its file, not committed it
        StateTable.merge_files = kill_after(StateTable.merge_files, 1)
    elif point == "gc":  # a FLUSH's entry is in; the files it let go (no grace period) are not deleted
        options["gc_grace_seconds"] = 0
        manifest_mod.settle_garbage = kill_before(manifest_mod.settle_garbage, 3, lambda store, keys, *a: keys)
    elif point == "stage":  # an INSERT's batch is in the bucket, the entry accepting it is not
        epochs_mod.accept = kill_before(epochs_mod.accept, 6)
    elif point in ("compact", "compact-gc"):  # explicit compaction: merged, not committed / not collected
        options.update(compact_max_files=100, gc_grace_seconds=0)
        real_compact = warehouse_mod.Warehouse.compact

        def compact(self, name):
            compacting["now"] = True
            try:
                return real_compact(self, name)
            finally:
                compacting["now"] = False
        warehouse_mod.Warehouse.compact = compact
        if point == "compact":
            StateTable.compact_all = kill_after(StateTable.compact_all, 1)
        else:
            manifest_mod.settle_garbage = kill_before(
                manifest_mod.settle_garbage, when=lambda store, keys, *a: keys and compacting["now"])
    elif point == "background":  # a background merge has written its file (held in scratch space); no step adopted it
        options["background_compaction"] = True
        StateTable.merge_files = kill_after(StateTable.merge_files, 1)
    elif point == "partial":  # a local write cut short: its .tmp file is in the folder, half synced
        real_fsync = os.fsync

        def partial(fd):
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
                calls["n"] += 1
                if calls["n"] >= 40:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real_fsync(fd)
        os.fsync = partial
    conn = dagster_rw.connect(url, engine="duckdb", **options)
    with open(acks, "a") as log:
        for i in range(1000):
            log.write(json.dumps(["intent", i]) + "\\n")  # the statement in flight if killed now
            log.flush()
            conn.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i * 7 % 11})")
            log.write(json.dumps([i, i % 3, i * 7 % 11]) + "\\n")
            log.flush()
            os.fsync(log.fileno())
            if i % 5 == 3:
                log.write(json.dumps(["intent", -(i - 2)]) + "\\n")
                log.flush()
                conn.execute(f"DELETE FROM t WHERE id = {i - 2}")
                log.write(json.dumps(["deleted", i - 2]) + "\\n")
                log.flush()
                os.fsync(log.fileno())
            conn.execute("FLUSH")
            if point.startswith("compact") and i % 6 == 5:
                conn.compact()
    raise SystemExit("the writer was never killed")
''').replace("import os, signal, sys", "import json, os, signal, sys")


def _acked(path) -> tuple[list[tuple], list[tuple] | None]:
    """The acknowledged rows; and the rows with the statement in flight at the kill applied too
    (None: none was), as its entry may have landed before the kill (a checkpoint after it, say)."""
    rows: dict[int, tuple] = {}
    in_flight = None
    for line in open(path).read().splitlines():
        if not line.endswith("]"):
            break  # cut by the kill
        item = json.loads(line)
        if item[0] == "intent":
            in_flight = item[1]
            continue
        in_flight = None
        if item[0] == "deleted":
            rows.pop(item[1], None)
        else:
            rows[item[0]] = tuple(item)
    if in_flight is None:
        return list(rows.values()), None
    applied = dict(rows)
    if in_flight < 0:
        applied.pop(-in_flight, None)
    else:
        applied[in_flight] = (in_flight, in_flight % 3, in_flight * 7 % 11)
    return list(rows.values()), list(applied.values())


@pytest.mark.parametrize("point", ["pack", "checkpoint", "merge", "gc", "stage", "compact", "compact-gc",
                                   "background"])
def test_a_writer_killed_inside_a_commit_loses_and_doubles_nothing(s3, tmp_path, point):
    url = s3.url(BUCKET, f"kill-{point}-{uuid.uuid4().hex[:6]}")
    _schema(dagster_rw.connect(url, engine="duckdb"))
    script, acks = tmp_path / "writer.py", tmp_path / "acks.jsonl"
    script.write_text(KILLED_WRITER)
    child_tmp = tmp_path / "child-tmp"  # the writer's own cache: the reader below has none of it
    child_tmp.mkdir()
    proc = subprocess.run([sys.executable, str(script), url, point, str(acks)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **s3.env, "TMPDIR": str(child_tmp)})
    assert proc.returncode == -9, f"the writer was not killed where expected:\n{proc.stderr[-3000:]}"
    acked, or_applied = _acked(acks)
    assert len(acked) >= 3
    conn = dagster_rw.connect(url, engine="duckdb")
    if point == "stage":  # the killed INSERT's batch is in the bucket, and no entry accepted it
        state = log_mod.log_of(conn.wh.store).refresh()
        accepted = {k for keys in state.unsealed.values() for k in keys} | set(state.trash) | {
            k for record in state.epochs.values() for keys in record["batches"].values() for k in keys}
        assert set(conn.wh.store.list("staging/")) - accepted
    if point == "background":  # the merged file waited in the writer's scratch space for a step's pack
        assert list((child_tmp / "dagster_rw_scratch").glob("*.parquet"))
    _swept_after_the_grace_period_only(conn, point)
    epochs = {s["name"]: s["epoch"] for s in conn.status()}
    for name in VIEWS:  # every object reads at its committed epoch
        conn.execute(f"SELECT * FROM {name}").fetchall()
    conn.execute("FLUSH")  # the killed FLUSH is redone by the next one
    assert len({s["epoch"] for s in conn.status()}) == 1 and min(epochs.values()) >= 1
    landed = or_applied is not None and sorted(conn.execute("SELECT * FROM t").fetchall()) == sorted(or_applied)
    if landed and point != "stage":
        acked = or_applied  # the statement in flight had landed: acknowledged or not, it is there once
    _check(conn, acked)
    conn.execute("INSERT INTO t VALUES (5000, 1, 1)")  # and it goes on
    conn.execute("FLUSH")
    _check(conn, acked + [(5000, 1, 1)])


def _swept_after_the_grace_period_only(conn, point: str) -> None:
    """The files the kill left (nothing in the log explains them) stay while they are younger than
    the sweep's grace period (they could be a write in flight) and are swept after it; every
    other file stays."""
    store = conn.wh.store
    left = sorted(key for key, _ in sweeping.unexplained(store))
    # these points leave objects of their own; at the others the files let go lie in packs, which
    # the log frees at a checkpoint once none of their files is listed
    # (a background merge begun in a FLUSH holds its file in scratch space until a step's pack takes it)
    if point in ("pack", "merge", "stage", "compact", "partial"):
        assert left, f"the kill at {point!r} left no file to sweep"
    if point == "background":
        assert left == [], left
    if point == "partial":
        assert any(key.endswith(".tmp") for key in left), left
    before = sorted(key for key, _ in store.list_modified(""))
    grace = conn.wh.options["sweep_grace_seconds"]
    assert conn.wh.sweep() == []
    assert sorted(key for key, _ in store.list_modified("")) == before
    assert sorted(conn.wh.sweep(now=time.time() + grace + 1)) == left
    assert sorted(key for key, _ in store.list_modified("")) == sorted(set(before) - set(left))
    assert sweeping.unexplained(store) == []


@pytest.mark.parametrize("point", ["partial", "stage", "pack"])
def test_files_a_killed_local_writer_left_are_swept_after_the_grace_period(tmp_path, point):
    """On a local folder (file times as the file system keeps them): a write cut short leaves its
    .tmp file, an INSERT killed before its entry leaves its batch, a FLUSH killed after its pack
    and before its entry leaves the pack and its files; all outlive a sweep within the grace period
    and go once their modification time is older than it."""
    root = str(tmp_path / "wh")
    _schema(dagster_rw.connect(root, engine="duckdb"))
    script, acks = tmp_path / "writer.py", tmp_path / "acks.jsonl"
    script.write_text(KILLED_WRITER)
    proc = subprocess.run([sys.executable, str(script), root, point, str(acks)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == -9, f"the writer was not killed where expected:\n{proc.stderr[-3000:]}"
    conn = dagster_rw.connect(root, engine="duckdb")
    store, grace = conn.wh.store, conn.wh.options["sweep_grace_seconds"]
    left = sorted(key for key, _ in sweeping.unexplained(store))
    assert left and (point != "partial" or any(key.endswith(".tmp") for key in left)), left
    assert point != "pack" or any(key.startswith("packs/") for key in left) and len(left) > 1, left
    assert conn.sweep() == 0 and all(os.path.exists(store.local_path(key)) for key in left)
    old = time.time() - grace - 1  # as if the grace period had passed since the kill
    for key in left[:-1]:
        os.utime(store.local_path(key), (old, old))
    assert conn.sweep() == len(left) - 1  # the one still young stays
    assert [key for key, _ in sweeping.unexplained(store)] == left[-1:]
    os.utime(store.local_path(left[-1]), (old, old))
    assert conn.sweep() == 1 and sweeping.unexplained(store) == []
    acked, or_applied = _acked(acks)
    conn.execute("FLUSH")
    landed = or_applied is not None and sorted(conn.execute("SELECT * FROM t").fetchall()) == sorted(or_applied)
    _check(conn, or_applied if landed and point != "stage" else acked)


# -- checkpoints, pruning, stale readers ---------------------------------------------------------

def test_a_new_process_starts_from_the_newest_checkpoint_and_reads_only_later_entries(tmp_path):
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    for i in range(45):
        conn.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        conn.execute("FLUSH")
    position = log_mod.log_of(conn.wh.store).current().position
    assert position > 2 * log_mod.CHECKPOINT_INTERVAL
    pointer = json.loads(LocalStore(root).read_bytes(log_mod.POINTER))["position"]
    assert pointer == position - position % log_mod.CHECKPOINT_INTERVAL
    fresh = LocalStore(root)
    log = log_mod.log_of(fresh)
    log.refresh()
    assert log.entries_read == position - pointer  # the checkpoint, then the entries after it
    assert log.current().to_json() | {"marks": None} == \
        log_mod.log_of(conn.wh.store).current().to_json() | {"marks": None}
    _check(dagster_rw.connect(root, engine="duckdb"), [(i, i % 3, i) for i in range(45)])


def test_an_entry_writes_the_change_to_garbage_not_the_whole_list(tmp_path):
    """Files dropped by earlier commits wait out the grace period in each manifest's garbage; an
    entry carries only the files its commit drops, and a process replaying the entries (no
    checkpoint yet) rebuilds the same lists."""
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    for i in range(8):
        conn.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        conn.execute("FLUSH")
    state = log_mod.log_of(conn.wh.store).current()
    assert state.position < log_mod.CHECKPOINT_INTERVAL
    waiting = state.manifests["t"]["garbage"]  # (change files its views have read)
    assert len(waiting) > 4  # garbage of several commits, still inside the grace period
    newest = json.loads(LocalStore(root).read_bytes(log_mod.entry_key(state.position)))
    doc = newest["commits"]["t"]
    assert "garbage" not in doc
    assert 0 < len(doc["garbage_change"]["add"]) < len(waiting)
    assert not doc["garbage_change"]["drop"]  # none has waited 30 s
    fresh = log_mod.log_of(LocalStore(root))
    fresh.refresh()
    assert fresh.entries_read == state.position
    assert fresh.current().manifests == state.manifests
    _check(dagster_rw.connect(root, engine="duckdb"), [(i, i % 3, i) for i in range(8)])


def test_old_entries_are_pruned_after_the_retention_and_a_stale_process_reloads(tmp_path, monkeypatch):
    root = str(tmp_path / "wh")
    monkeypatch.setattr(log_mod.WarehouseLog, "retention_seconds", 0.4)
    stale = dagster_rw.connect(root, engine="duckdb")
    _schema(stale)
    writer = dagster_rw.connect(root, engine="duckdb")
    for i in range(60):
        writer.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        writer.execute("FLUSH")
        if i == 30:
            time.sleep(0.5)  # the entries so far are older than the retention from here on
    store = LocalStore(root)
    entries = [k for k in store.list("log/") if k.endswith(".json") and "checkpoint" not in k
               and not k.endswith(log_mod.POINTER.rsplit("/", 1)[-1])]
    first = min(int(k.rsplit("/", 1)[-1][:-5]) for k in entries)
    assert first > 1, "nothing was pruned"
    assert log_mod.log_of(stale.wh.store).current().position < first  # its next entry is gone
    time.sleep(0.2)  # stale for more than a quarter of the retention: it starts from a checkpoint
    _check(stale, [(i, i % 3, i) for i in range(60)])
    stale.execute("INSERT INTO t VALUES (100, 1, 1)")
    stale.execute("FLUSH")
    _check(writer, [(i, i % 3, i) for i in range(60)] + [(100, 1, 1)])


def test_packs_are_deleted_once_no_manifest_lists_their_files(s3, tmp_path):
    url = s3.url(BUCKET, f"packs-{uuid.uuid4().hex[:6]}")
    conn = dagster_rw.connect(url, engine="duckdb", gc_grace_seconds=0, compact_max_files=2)
    _schema(conn)
    for i in range(3 * log_mod.CHECKPOINT_INTERVAL // 2):
        conn.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        conn.execute("FLUSH")
    conn.close()
    store = conn.wh.store
    state = log_mod.log_of(store).current()
    listed = state.listed_files()
    in_bucket = set(store.list("packs/"))
    live = {p for p, layout in state.packs.items() if any(k in listed for k in layout)}
    assert live and live <= in_bucket
    # the packs still in the bucket are those listed since the last checkpoint, or live
    assert len(in_bucket - live) < log_mod.CHECKPOINT_INTERVAL
    assert len(in_bucket) < 3 * log_mod.CHECKPOINT_INTERVAL // 2 // 2
    # a process with an empty cache reads the packed files through the log
    child = dagster_rw.connect(url, engine="duckdb")
    child.wh.store.cache_dir = tempfile.mkdtemp(dir=tmp_path)
    _check(child, [(i, i % 3, i) for i in range(3 * log_mod.CHECKPOINT_INTERVAL // 2)])


def test_a_reader_holding_an_old_snapshot_reads_packed_files_while_they_are_merged_away(s3, tmp_path):
    """A reader that loaded a view's manifest keeps reading its (packed) files while another
    process merges them away and checkpoints, within the grace period."""
    url = s3.url(BUCKET, f"old-{uuid.uuid4().hex[:6]}")
    writer = dagster_rw.connect(url, engine="duckdb", compact_max_files=2, gc_grace_seconds=3600)
    _schema(writer)
    for i in range(5):
        writer.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        writer.execute("FLUSH")
    reader = S3Store(url, cache_dir=str(tmp_path / "reader-cache"))
    old = manifests.load(reader, "by_k", refresh=True)
    for i in range(5, 5 + 2 * log_mod.CHECKPOINT_INTERVAL // 3):
        writer.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        writer.execute("FLUSH")
    now = manifests.load(writer.wh.store, "by_k")
    old_keys = {f.key for fs in old.state.values() for f in fs}
    assert not old_keys & {f.key for fs in now.state.values() for f in fs}  # all merged away
    log_mod.log_of(reader).refresh()  # the reader knows where the packed files are
    for key in old_keys:
        assert os.path.getsize(reader.local_path(key)) > 0


def test_a_checkpoint_that_cannot_be_written_does_not_fail_the_commit(tmp_path, monkeypatch, caplog):
    """The entry at a checkpoint position landed: a failure writing the checkpoint (the disk full)
    is logged, the FLUSH returns, and the next interval's checkpoint is written."""
    monkeypatch.setattr(log_mod, "CHECKPOINT_INTERVAL", 5)
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    store = LocalStore(root)
    before = json.loads(store.read_bytes(log_mod.POINTER))["position"]  # _schema passed a checkpoint
    real = LocalStore.write_bytes
    failed = []

    def write_bytes(self, key, data, durable=True):
        if key.endswith(".checkpoint.json"):
            failed.append(key)
            raise OSError(28, "No space left on device")
        return real(self, key, data, durable)

    monkeypatch.setattr(LocalStore, "write_bytes", write_bytes)
    acked = []
    for i in range(12):  # past two checkpoint positions, both failing
        conn.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        conn.execute("FLUSH")  # returns: its commit landed
        acked.append((i, i % 3, i))
    assert len(failed) >= 2 and "writing its checkpoint failed" in caplog.text
    assert json.loads(store.read_bytes(log_mod.POINTER))["position"] == before
    assert max(k for k in store.list("log/") if k.endswith(".checkpoint.json")) == log_mod.checkpoint_key(before)
    _check(dagster_rw.connect(root, engine="duckdb"), acked)  # a new process replays every entry
    monkeypatch.setattr(LocalStore, "write_bytes", real)
    position = log_mod.log_of(conn.wh.store).current().position
    for i in range(12, 12 + 5):  # the next interval writes its checkpoint
        conn.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i})")
        conn.execute("FLUSH")
        acked.append((i, i % 3, i))
    pointer = json.loads(store.read_bytes(log_mod.POINTER))["position"]
    assert position < pointer <= log_mod.log_of(conn.wh.store).current().position
    fresh = log_mod.log_of(LocalStore(root))
    fresh.refresh()
    assert fresh.entries_read == fresh.current().position - pointer
    _check(dagster_rw.connect(root, engine="duckdb"), acked)


def test_a_flush_whose_held_barrier_another_process_overtakes_seals_again(tmp_path, monkeypatch):
    """A FLUSH holds its barrier until its commit writes both in one entry. When another process's
    barrier lands first (sealing the same batches), the FLUSH's commit is refused, it reads the log
    again and seals anew: no batch is sealed twice, nothing is lost, the views are right."""
    root = str(tmp_path / "wh")
    conn = dagster_rw.connect(root, engine="duckdb")
    _schema(conn)
    other = dagster_rw.connect(root, engine="duckdb")
    real = type(conn.wh).refresh_all
    overtaken = []

    def refresh_all(wh):
        if wh is conn.wh and not overtaken:
            other.wh.sync()
            other.execute("INSERT INTO t VALUES (100, 1, 1)")
            overtaken.append(other.barrier())  # a barrier of its own, written at once
        return real(wh)

    monkeypatch.setattr(type(conn.wh), "refresh_all", refresh_all)
    rows = [(i, i % 3, i) for i in range(5)]
    conn.execute("INSERT INTO t VALUES " + ", ".join(str(r) for r in rows))
    epoch = conn.execute("FLUSH") and log_mod.log_of(conn.wh.store).current().newest_epoch
    assert overtaken and epoch > overtaken[0]
    assert conn.wh.flush_retries >= 1
    state = log_mod.log_of(LocalStore(root)).refresh()
    sealed = [k for record in state.epochs.values() for keys in record["batches"].values() for k in keys]
    assert len(sealed) == len(set(sealed))  # every batch in one epoch only
    assert not state.unsealed
    _check(dagster_rw.connect(root, engine="duckdb"), rows + [(100, 1, 1)])
