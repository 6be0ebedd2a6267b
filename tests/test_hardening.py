"""Hardening: a forked child works as a fresh process, names are checked and stored safely, and
hidden row ids are unique by construction."""
from __future__ import annotations

import multiprocessing
import os
import threading

import pyarrow as pa
import pytest

import dagster_rw
from dagster_rw.errors import OperationalError, ProgrammingError
from dagster_rw.runtime import row_ids, step
from dagster_rw.storage import catalog as catalogs
from dagster_rw.storage.object_store import LocalStore

CHILD_SECONDS = 120  # a bound on a child's run, so that a regression fails instead of hanging
FORK = multiprocessing.get_context("fork")


def _run_in_child(target, *args) -> int:
    """Run target(*args) in a forked child; its exit code (the child is killed if it outlives the bound)."""
    child = FORK.Process(target=target, args=args)
    child.start()
    child.join(CHILD_SECONDS)  # returns when the child exits
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the forked child did not finish within {CHILD_SECONDS} s (a hang after fork)")
    return child.exitcode


# -- fork ------------------------------------------------------------------------------------------

def _build_and_flush(conn) -> None:
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (a INT PRIMARY KEY, b INT)")
    cur.execute("CREATE TABLE k (a INT)")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n, sum(b) AS s FROM t")
    cur.execute("CREATE MATERIALIZED VIEW w AS SELECT a, count(*) AS n FROM k GROUP BY a")
    cur.execute("CREATE MATERIALIZED VIEW j AS SELECT t.a, t.b, w.n FROM t JOIN w ON t.a = w.a")
    for i in range(4):
        cur.execute(f"INSERT INTO t VALUES ({i}, {10 * i})")
        cur.execute(f"INSERT INTO k VALUES ({i}), ({i})")
        cur.execute("FLUSH")


def _child_inserts_and_flushes(conn) -> None:
    cur = conn.cursor()
    cur.execute("INSERT INTO t VALUES (100, 1000)")
    cur.execute("INSERT INTO k VALUES (100)")
    cur.execute("FLUSH")
    cur.execute("SELECT n, s FROM v")
    assert cur.fetchall() == [(5, 1060)]
    cur.execute("SELECT n FROM j WHERE a = 100")
    assert cur.fetchall() == [(1,)]


def _child_main(conn) -> None:
    try:
        _child_inserts_and_flushes(conn)
    except BaseException:  # noqa: BLE001 - reported through the exit code
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _check_after_child(conn) -> None:
    cur = conn.cursor()
    cur.execute("SELECT n, s FROM v")  # a batch SELECT reads the committed state the child left
    assert cur.fetchall() == [(5, 1060)]
    cur.execute("SELECT a, n FROM w ORDER BY a")
    assert cur.fetchall() == [(0, 2), (1, 2), (2, 2), (3, 2), (100, 1)]
    cur.execute("INSERT INTO t VALUES (101, 1)")  # and the parent goes on working
    cur.execute("FLUSH")
    cur.execute("SELECT n, s FROM v")
    assert cur.fetchall() == [(6, 1061)]


def test_a_forked_child_flushes_after_the_parent_used_the_thread_pools(warehouse):
    with dagster_rw.connect(warehouse) as conn:
        _build_and_flush(conn)
        # the parent's FLUSHes ran steps on the writer pool and commits on the committer thread
        assert step._pool is not None and conn.wh._committer is not None
        assert _run_in_child(_child_main, conn) == 0
        conn.wh.sync()
        _check_after_child(conn)


def test_a_forked_child_reopens_its_s3_clients(s3_server, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this process's S3 cache and scratch files
    bucket = s3_server.create_bucket("rw-hardening-fork")
    with dagster_rw.connect(s3_server.url(bucket)) as conn:
        _build_and_flush(conn)
        parent_client = conn.wh.store.client
        assert _run_in_child(_child_main, conn) == 0
        assert conn.wh.store.client is parent_client  # the parent keeps its own
        conn.wh.sync()
        _check_after_child(conn)


# -- names -----------------------------------------------------------------------------------------

def _objects(conn) -> list[str]:
    return sorted(conn.wh.catalog(reload=True).objects)


@pytest.mark.parametrize("sql, words", [
    ("CREATE TABLE " + "a" * 300 + " (a INT)", ["identifier", "a" * 20, "300 bytes", "63"]),
    ('CREATE TABLE "' + "é" * 32 + '" (a INT)', ["identifier", "64 bytes", "63"]),  # bytes, not characters
    ("CREATE TABLE t2 (" + "c" * 64 + " INT)", ["identifier", "64 bytes"]),
    ("CREATE MATERIALIZED VIEW " + "v" * 70 + " AS SELECT 1 AS x", ["identifier", "70 bytes"]),
    ('CREATE TABLE "a\x00b" (a INT)', ["a\\u0000b", "control character U+0000"]),
    ('CREATE TABLE "a\nb" (a INT)', ["control character U+000A"]),
    ('CREATE TABLE t3 ("x\x01" INT)', ["control character U+0001"]),
    ('CREATE TABLE "" (a INT)', ["zero-length delimited identifier"]),
])
def test_names_postgresql_cannot_hold_are_refused_and_leave_no_trace(conn, sql, words):
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (a INT)")
    before = _objects(conn)
    with pytest.raises(ProgrammingError) as e:
        cur.execute(sql)
    for w in words:
        assert w in str(e.value)
    assert _objects(conn) == before
    cur.execute("INSERT INTO t VALUES (1)")
    cur.execute("FLUSH")  # every later FLUSH still works
    cur.execute("SELECT count(*) FROM t")
    assert cur.fetchall() == [(1,)]


def test_a_name_of_63_bytes_is_accepted_and_a_long_name_in_a_query_refused(conn):
    cur = conn.cursor()
    name = "n" * 63
    cur.execute(f"CREATE TABLE {name} (a INT)")
    cur.execute(f"INSERT INTO {name} VALUES (7)")
    cur.execute("FLUSH")
    cur.execute(f"SELECT a FROM {name}")
    assert cur.fetchall() == [(7,)]
    with pytest.raises(ProgrammingError, match="too long"):
        cur.execute(f"SELECT a FROM {name}x")


def test_key_names_keep_plain_names_and_encode_the_rest_one_to_one():
    for plain in ["t", "orders_2024", "_x", "9lives"]:
        assert catalogs.key_name(plain) == plain  # keys of existing warehouses are unchanged
    names = ["a/b", "..", ".", "A", "Sales 2024", "Ünï", "日本", "a-2fb", "x-", "t"]
    keys = [catalogs.key_name(n) for n in names]
    assert len(set(keys)) == len(names)
    for name, key in zip(names, keys):
        assert set(key) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-"), key
        assert key not in (".", "..") and len(key.encode()) <= 255
        assert catalogs.name_of_key(key) == name
    assert catalogs.key_name("a/b") == "a-2fb" and catalogs.key_name("a-2fb") == "a-2d2fb"
    for bad in ["", "a\x00b", "x\ty", "\ud800"]:
        with pytest.raises(ProgrammingError):
            catalogs.key_name(bad)


def test_objects_with_any_quoted_name_live_under_encoded_keys(conn, warehouse):
    cur = conn.cursor()
    names = ["a/b", "..", "Ünï", "A B", "a-2fb", "plain"]
    for n in names:
        cur.execute(f'CREATE TABLE "{n}" (a INT)')
        cur.execute(f'INSERT INTO "{n}" VALUES (1), (2)')
    cur.execute('CREATE MATERIALIZED VIEW "V/x" AS SELECT count(*) AS n FROM "a/b"')
    cur.execute("FLUSH")
    for n in names:
        cur.execute(f'SELECT count(*) FROM "{n}"')
        assert cur.fetchall() == [(2,)], n
    cur.execute('SELECT n FROM "V/x"')
    assert cur.fetchall() == [(2,)]
    assert sorted(os.listdir(os.path.join(warehouse, "objects"))) == sorted(
        catalogs.key_name(n) for n in names + ["V/x"])
    assert os.path.isdir(os.path.join(warehouse, "objects", "plain", "state"))  # as before
    # nothing escaped the objects' folders ('..' is a folder name like any other)
    assert sorted(os.listdir(warehouse)) == ["log", "objects", "packs", "row_ids", "staging"]
    cur.execute('DROP TABLE ".."')
    cur.execute('DELETE FROM "a/b" WHERE a = 1')
    cur.execute("FLUSH")
    cur.execute('SELECT n FROM "V/x"')
    assert cur.fetchall() == [(1,)]
    assert conn.wh.store.list(f'objects/{catalogs.key_name("..")}/') == []  # its files are gone


def test_a_create_table_whose_manifest_cannot_be_written_leaves_no_trace(conn, monkeypatch):
    from dagster_rw.runtime import warehouse as wh_module

    cur = conn.cursor()
    cur.execute("CREATE TABLE t (a INT)")
    real = wh_module.manifests.commit

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wh_module.manifests, "commit", failing)
    with pytest.raises(OperationalError, match="CREATE TABLE: the disk is full"):
        cur.execute("CREATE TABLE u (a INT)")
    monkeypatch.setattr(wh_module.manifests, "commit", real)
    assert _objects(conn) == ["t"]
    cur.execute("INSERT INTO t VALUES (1)")
    cur.execute("FLUSH")
    cur.execute("CREATE TABLE u (a INT)")  # and the name is free
    cur.execute("INSERT INTO u VALUES (2)")
    cur.execute("FLUSH")
    cur.execute("SELECT a FROM u")
    assert cur.fetchall() == [(2,)]


def test_a_view_whose_back_fill_fails_leaves_no_trace(conn, warehouse):
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (s VARCHAR)")
    cur.execute("INSERT INTO t VALUES ('1'), ('x')")
    cur.execute("FLUSH")
    # (a bad cast gives NULL in a view, as in RisingWave; a date that does not parse stops the step)
    with pytest.raises(Exception, match="(?i)parse"):
        cur.execute("CREATE MATERIALIZED VIEW v AS SELECT CAST(s AS INT) AS i, to_date(s, 'YYYY') AS d FROM t")
    assert _objects(conn) == ["t"]
    assert not os.path.exists(os.path.join(warehouse, "objects", "v"))
    cur.execute("INSERT INTO t VALUES ('2')")
    cur.execute("FLUSH")
    cur.execute("DELETE FROM t WHERE s = 'x'")
    cur.execute("FLUSH")
    cur.execute("CREATE MATERIALIZED VIEW v AS SELECT CAST(s AS INT) AS i, to_date(s, 'YYYY') AS d FROM t")
    cur.execute("SELECT i FROM v ORDER BY i")
    assert cur.fetchall() == [(1,), (2,)]


# -- row ids ---------------------------------------------------------------------------------------

def test_row_id_blocks_are_claimed_once_across_writers(tmp_path):
    store = LocalStore(str(tmp_path / "wh"))
    a, b = row_ids.Allocator(store), row_ids.Allocator(store)  # two processes, as the store sees them
    ranges = []
    for n in [1, 5, 3, row_ids.BLOCK, 2, 2 * row_ids.BLOCK + 1, 4]:
        for allocator in (a, b):
            base = allocator.take(n)
            ranges.append((base, base + n))
    ranges.sort()
    assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))  # disjoint
    assert all(lo < 2 ** 63 - 2 ** 40 for lo, _ in ranges)  # bigint, with room to spare
    # a writer's ids increase from batch to batch
    c = row_ids.Allocator(store)
    firsts = [c.take(10) for _ in range(5)] + [c.take(row_ids.BLOCK)] + [c.take(10)]
    assert firsts == sorted(firsts)
    # above the ids earlier versions gave (a millisecond << 22)
    import time

    assert min(lo for lo, _ in ranges) > int(time.time() * 1000 - 60_000) << 22


def test_a_writer_that_loses_a_claim_claims_after_the_winner(tmp_path):
    store = LocalStore(str(tmp_path / "wh"))
    a = row_ids.Allocator(store)
    first = a.take(1) // row_ids.BLOCK
    stale = row_ids.Allocator(store)
    stale.chain_end = first  # a writer whose view of the chain is old
    base = stale.take(1)
    assert base // row_ids.BLOCK == first + 1 and base != a.take(1)


def test_row_id_claims_race_on_threads_without_overlap(tmp_path):
    store = LocalStore(str(tmp_path / "wh"))
    writers = [row_ids.Allocator(store) for _ in range(8)]
    start = threading.Barrier(len(writers))
    got: dict[int, list[int]] = {}

    def run(i):
        start.wait()
        got[i] = [writers[i].take(row_ids.BLOCK) for _ in range(3)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    blocks = [b // row_ids.BLOCK for bases in got.values() for b in bases]
    assert len(blocks) == 24 and len(set(blocks)) == 24


def test_claims_give_up_with_a_clear_error_when_always_beaten(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path / "wh"))
    monkeypatch.setattr(store, "put_if_absent", lambda key, data: False)
    with pytest.raises(OperationalError, match="row ids"):
        row_ids.Allocator(store).take(1)


def _distinct_row_ids(conn, table: str) -> int:
    """How many distinct hidden row ids the table's committed rows have."""
    ids = conn.wh.snapshot(table).column("_row_id")
    return len(set(ids.to_pylist()))


ROWS_PER_BATCH = 50
BATCHES = 20


def _stage_keyless(warehouse: str, start, writer: int) -> None:
    try:
        with dagster_rw.connect(warehouse) as conn:
            start.wait()  # every writer stages at the same moment
            for i in range(BATCHES):
                rows = pa.table({"w": [writer] * ROWS_PER_BATCH, "i": [i] * ROWS_PER_BATCH})
                conn.wh.stage("k", rows)
    except BaseException:  # noqa: BLE001 - reported through the exit code
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def test_processes_staging_at_once_into_a_keyless_table_never_merge_rows(warehouse):
    with dagster_rw.connect(warehouse) as conn:
        cur = conn.cursor()
        cur.execute("CREATE TABLE k (w INT, i INT)")
        cur.execute("CREATE MATERIALIZED VIEW c AS SELECT w, count(*) AS n FROM k GROUP BY w")
        writers = 4
        start = FORK.Barrier(writers)
        children = [FORK.Process(target=_stage_keyless, args=(warehouse, start, w)) for w in range(writers)]
        for child in children:
            child.start()
        for child in children:
            child.join(CHILD_SECONDS)
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
                pytest.fail("a writer did not finish")
        assert [child.exitcode for child in children] == [0] * writers
        cur.execute("FLUSH")
        total = writers * BATCHES * ROWS_PER_BATCH
        cur.execute("SELECT count(*) FROM k")
        assert cur.fetchall() == [(total,)]
        assert _distinct_row_ids(conn, "k") == total
        cur.execute("SELECT w, n FROM c ORDER BY w")
        assert cur.fetchall() == [(w, BATCHES * ROWS_PER_BATCH) for w in range(writers)]
        claims = conn.wh.store.list("row_ids/")
        assert len(claims) == writers  # one block each: no two writers share one


def test_two_connections_on_two_threads_stage_distinct_row_ids(warehouse):
    with dagster_rw.connect(warehouse) as setup:
        setup.cursor().execute("CREATE TABLE k (w INT)")
    conns = [dagster_rw.connect(warehouse) for _ in range(2)]
    start = threading.Barrier(2)

    def run(w):
        start.wait()
        for _ in range(BATCHES):
            conns[w].wh.stage("k", pa.table({"w": [w] * ROWS_PER_BATCH}))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cur = conns[0].cursor()
    cur.execute("FLUSH")
    cur.execute("SELECT count(*) FROM k")
    assert cur.fetchall() == [(2 * BATCHES * ROWS_PER_BATCH,)]
    assert _distinct_row_ids(conns[0], "k") == 2 * BATCHES * ROWS_PER_BATCH
    for c in conns:
        c.close()
