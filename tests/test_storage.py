"""Laws of the storage layer: LSM state tables against a dict model, consolidation, file collection."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagster_rw
from dagster_rw.engine.duck import DuckEngine
from dagster_rw.operators.base import W, consolidate_sql
from dagster_rw.storage import mapped_columns, sst_cache
from dagster_rw.storage.count_table import CountTable
from dagster_rw.storage.object_store import LocalStore
from dagster_rw.storage.state_table import DELETED, StateTable

ENGINE = DuckEngine(threads=1)

KEY_TYPES = {
    "int": (st.one_of(st.none(), st.integers(-3, 3)), pa.int32()),
    "int_not_null": (st.integers(-3, 3), pa.int64()),  # merges in Arrow (NULL keys merge in SQL)
    "str": (st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é"])), pa.string()),
}


def _table(schema, rows):
    return pa.Table.from_pylist(rows, schema=schema)


def test_rows_from_reads_a_few_rows_per_file_up_to_the_nearest_unread_row(tmp_path):
    schema = pa.schema([("k", pa.int32()), ("v", pa.int64())])
    table = StateTable(LocalStore(str(tmp_path)), ENGINE, "state/t", ["k"], schema, [])
    full = schema.append(pa.field(DELETED, pa.bool_()))
    for epoch, (keys, deleted) in enumerate([(range(1, 11), False), ([5, 6, 7], False), ([3], True)], start=1):
        table.stage(_table(full, [{"k": k, "v": 10 * epoch + k, DELETED: deleted} for k in keys]))
        table.files = table.files + [table.flush(epoch - 1, epoch)]
    rows, frontier = table.rows_from(1, 2)  # [1, 2] of the first file, [5, 6] of the second, [3] deleted
    assert frontier == 2 and sorted(ENGINE.to_arrow(rows).column("k").to_pylist()) == [1, 2, 5, 6]
    rows, frontier = table.rows_from(6, 2, descending=True)  # [5, 6] of both, [3] of the third (no more)
    assert frontier == 5 and sorted(ENGINE.to_arrow(rows).to_pylist(), key=lambda r: r["k"]) == [
        {"k": 5, "v": 25}, {"k": 6, "v": 26}]
    rows, frontier = table.rows_from(1, 20)
    assert frontier is None and sorted(ENGINE.to_arrow(rows).column("k").to_pylist()) == [1, 2, 4, 5, 6, 7, 8, 9, 10]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), key_type=st.sampled_from(sorted(KEY_TYPES)), composite=st.booleans(), mapped=st.booleans())
def test_state_table_reads_and_lookups_match_a_dict_model(tmp_path_factory, data, key_type, composite, mapped):
    """`mapped`: every file is read through mapped columns, as files too large for the cache are."""
    sst_cache.clear()
    fraction = sst_cache.files._MAP_FRACTION
    sst_cache.files._MAP_FRACTION = 0 if mapped else fraction
    try:
        stored, mapped_now = _state_table_against_model(tmp_path_factory, data, key_type, composite)
        if mapped and stored:
            assert mapped_now, "no file was mapped"
    finally:
        sst_cache.files._MAP_FRACTION = fraction
        sst_cache.clear()


def _state_table_against_model(tmp_path_factory, data, key_type, composite):
    strategy, arrow_type = KEY_TYPES[key_type]
    second = st.one_of(st.none(), st.integers(0, 2)) if composite else st.just(0)
    schema = pa.schema([("k1", arrow_type), ("k2", pa.int32()), ("v", pa.int64())])
    pk = ["k1", "k2"]
    store = LocalStore(str(tmp_path_factory.mktemp("sst")))
    table = StateTable(store, ENGINE, "state/t", pk, schema, [])
    model: dict = {}
    steps = data.draw(st.lists(st.lists(st.tuples(strategy, second, st.booleans(), st.integers(0, 99)),
                                        max_size=6), min_size=1, max_size=8))
    for epoch, writes in enumerate(steps, start=1):
        latest = {}
        for k1, k2, delete, v in writes:  # one write per key and step, as operators stage them
            latest[(k1, k2)] = (delete, v)
        rows = [{"k1": k1, "k2": k2, "v": v, DELETED: delete} for (k1, k2), (delete, v) in latest.items()]
        if rows:
            table.stage(_table(schema.append(pa.field(DELETED, pa.bool_())), rows))
        f = table.flush(epoch - 1, epoch)
        table.files = table.files + ([f] if f else [])
        table.compact(3)
        for key, (delete, v) in latest.items():
            if delete:
                model.pop(key, None)
            else:
                model[key] = v
        got = {(r["k1"], r["k2"]): r["v"] for r in ENGINE.to_arrow(table.read_all()).to_pylist()}
        assert got == model
        probe = data.draw(st.lists(st.tuples(strategy, second), max_size=4))
        keys = _table(pa.schema([("k1", arrow_type), ("k2", pa.int32())]),
                      [{"k1": a, "k2": b} for a, b in probe])
        for on in (["k1"], ["k1", "k2"]):
            wanted = {tuple(p[: len(on)]) for p in probe}
            expect = {k: v for k, v in model.items() if tuple(k[: len(on)]) in wanted}
            found = ENGINE.to_arrow(table.lookup(keys, on)).to_pylist()
            assert {(r["k1"], r["k2"]): r["v"] for r in found} == expect
            assert len(found) == len(expect)
        # a range of the first key column (dynamic filters), by binary search and by query
        lo, hi = data.draw(st.one_of(st.none(), strategy)), data.draw(st.one_of(st.none(), strategy))
        expect = {k: v for k, v in model.items() if k[0] is not None
                  and (lo is None or k[0] >= lo) and (hi is None or k[0] <= hi)}
        for rows in (table.range(lo, hi), table.range_by_query(lo, hi)):
            found = ENGINE.to_arrow(rows).to_pylist()
            assert {(r["k1"], r["k2"]): r["v"] for r in found} == expect
            assert len(found) == len(expect)
        # the rows from a value on, a few per file (top-N refills): before the frontier, exactly the model's
        start, count, down = data.draw(strategy.filter(lambda x: x is not None)), data.draw(st.integers(1, 3)), \
            data.draw(st.booleans())
        got = table.rows_from(start, count, descending=down)
        if got is None:  # files whose key cannot be searched in-process (a mapped file's strings)
            assert key_type == "str" and sst_cache.files._MAP_FRACTION == 0
            continue
        rows, frontier = got
        found = {(r["k1"], r["k2"]): r["v"] for r in ENGINE.to_arrow(rows).to_pylist()}

        def short(k1):  # on the read side of `start`, and before the frontier
            return k1 is not None and (k1 <= start if down else k1 >= start) and (
                frontier is None or (k1 > frontier if down else k1 < frontier))

        assert {k: v for k, v in found.items() if short(k[0])} == {k: v for k, v in model.items() if short(k[0])}
        assert all(k[0] is not None and (k[0] <= start if down else k[0] >= start) for k in found)
    mapped_now = mapped_columns.mapped_files()
    sst_cache.clear()
    assert {(r["k1"], r["k2"]): r["v"] for r in ENGINE.to_arrow(table.read_all()).to_pylist()} == model
    return bool(table.files), mapped_now


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([-2, -1, 1, 2])), max_size=20))
def test_consolidation_is_idempotent_and_a_delta_cancels_its_inverse(rows):
    delta = pa.table({"c0": [r[0] for r in rows], W: pa.array([r[1] for r in rows], pa.int64())})
    once = ENGINE.sql(consolidate_sql(["c0"], "d"), d=delta)
    twice = ENGINE.sql(consolidate_sql(["c0"], "d"), d=once)
    assert sorted(once.to_pylist(), key=str) == sorted(twice.to_pylist(), key=str)
    inverse = pa.table({"c0": delta.column("c0"), W: pa.array([-w for _, w in rows], pa.int64())})
    both = pa.concat_tables([delta, inverse])
    assert ENGINE.sql(consolidate_sql(["c0"], "d"), d=both).num_rows == 0


@pytest.mark.parametrize("merge", ["arrow", "sql"])
def test_a_partial_merge_keeps_the_tombstones_that_shadow_an_older_file(tmp_path, monkeypatch, merge):
    """Merging the newest small files but not a large old one must keep their tombstones: dropped,
    the old file's rows of those keys would come back."""
    if merge == "sql":
        monkeypatch.setattr(StateTable, "_merge_in_arrow", lambda self, source, full_merge: None)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    with_del = schema.append(pa.field(DELETED, pa.bool_()))
    table = StateTable(LocalStore(str(tmp_path)), ENGINE, "state/t", ["k"], schema, [])
    noise = dict(enumerate(np.random.default_rng(0).integers(0, 1 << 62, 20_000).tolist()))  # incompressible
    steps = [[{"k": k, "v": noise[k], DELETED: False} for k in range(20_000)],
             [{"k": 5, "v": 0, DELETED: True}, {"k": 7, "v": 70, DELETED: False}],
             [{"k": 6, "v": 0, DELETED: True}, {"k": 7, "v": 0, DELETED: True}],
             [{"k": 6, "v": 66, DELETED: False}, {"k": 30_000, "v": 1, DELETED: False}]]
    for epoch, rows in enumerate(steps, start=1):
        table.stage(_table(with_del, rows))
        table.files = table.files + [table.flush(epoch - 1, epoch)]
    files, gone = table.compact(2)
    assert len(gone) == 3 and len(files) == 2 and files[0].rows == 20_000  # the old file stayed
    assert files[1].rows == 4  # 5 and 7 deleted, 6 and 30000 put
    got = {r["k"]: r["v"] for r in ENGINE.to_arrow(table.read_all()).to_pylist()}
    want = {k: noise[k] for k in range(20_000) if k not in (5, 7)} | {6: 66, 30_000: 1}
    assert got == want
    table.compact_all()  # a full merge drops the tombstones
    assert [f.rows for f in table.files] == [len(want)]
    assert {r["k"]: r["v"] for r in ENGINE.to_arrow(table.read_all()).to_pylist()} == want


def _only_listed_files(conn, on_disk: set[str], listed: set[str]) -> None:
    """Nothing unreferenced is left behind: every file on disk is listed, and a listed file not on
    disk is in a pack (a packed file's copy is written when something reads it from disk)."""
    assert on_disk <= listed, on_disk - listed
    assert all(conn.wh.store.locate_packed(k) is not None for k in listed - on_disk)


def test_change_files_are_dropped_once_consumers_pass_them_and_state_files_stay_few(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"), gc_grace_seconds=0, compact_max_files=4)
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT v % 3 AS g, count(*) AS n FROM t GROUP BY v % 3")
    for i in range(30):
        conn.execute(f"INSERT INTO t VALUES ({i}, {i})")
        conn.execute("FLUSH")
        m = conn.wh.manifest("t")
        assert len(m.changelog) <= 1  # its only consumer has read everything but the newest
        # merges run in the background; a table waits for its merge beyond twice the limit
        assert all(len(files) <= 8 for files in m.state.values())
    conn.close()  # waits for the merges in flight and commits them
    conn = dagster_rw.connect(str(tmp_path / "wh"), gc_grace_seconds=0, compact_max_files=4)
    on_disk = [k for k in conn.wh.store.list("objects/t/") if "/manifest/" not in k]
    listed = {f.key for files in conn.wh.manifest("t").state.values() for f in files} | \
        {f.key for f in conn.wh.manifest("t").changelog}
    _only_listed_files(conn, set(on_disk), listed)
    assert sorted(conn.execute("SELECT * FROM s").fetchall()) == [(0, 10), (1, 10), (2, 10)]


def test_expired_garbage_is_deleted_after_the_commit_on_a_background_thread(tmp_path, monkeypatch):
    """Deleting a large file takes a while; a commit that finds garbage past its grace period
    hands the deletion to a background thread and returns (close() waits for it)."""
    import threading
    import time

    from dagster_rw.storage import manifest as manifests
    from dagster_rw.storage import object_store

    store = LocalStore(str(tmp_path))
    store.write_bytes("objects/x/state/output/old.parquet", b"x" * 1000)
    release, deleting = threading.Event(), threading.Event()
    delete = LocalStore.delete

    def slow_delete(self, key):
        deleting.set()
        release.wait(10)
        delete(self, key)

    monkeypatch.setattr(LocalStore, "delete", slow_delete)
    m = manifests.Manifest(object="x", garbage=[{"key": "objects/x/state/output/old.parquet",
                                                 "dropped_at": time.time() - 100}])
    committed = manifests.commit(store, m, [], grace_seconds=30)
    assert committed.garbage == []  # no longer listed
    assert deleting.wait(10)  # the deletion has begun, the commit has returned
    assert store.exists("objects/x/state/output/old.parquet")
    release.set()
    object_store.wait_for_deletions()
    assert not store.exists("objects/x/state/output/old.parquet")


def test_a_large_file_is_deleted_a_slice_at_a_time(tmp_path, monkeypatch):
    from dagster_rw.storage import object_store

    store = LocalStore(str(tmp_path))
    store.write_bytes("objects/x/big.parquet", b"x" * 1000)
    sizes = []
    truncate = object_store.os.truncate
    monkeypatch.setattr(object_store, "_SHRINK_STEP", 300)
    monkeypatch.setattr(object_store.os, "truncate", lambda path, size: (sizes.append(size), truncate(path, size)))
    store.delete_gradually("objects/x/big.parquet")
    assert sizes == [700, 400, 100] and not store.exists("objects/x/big.parquet")
    store.delete_gradually("objects/x/big.parquet")  # already gone: nothing to do


def test_background_merges_are_adopted_by_later_steps_and_committed_at_close(tmp_path):
    wh = str(tmp_path / "wh")
    conn = dagster_rw.connect(wh, gc_grace_seconds=0, compact_max_files=3)
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT v % 2 AS g, count(*) AS n, max(id) AS top FROM t GROUP BY v % 2")
    merged_seen = False
    for i in range(14):
        conn.execute(f"INSERT INTO t VALUES ({i}, {i}), ({i + 100}, {i})")
        if i % 3 == 2:
            conn.execute(f"DELETE FROM t WHERE id = {i - 1}")
        conn.execute("FLUSH")
        for name in ("t", "s"):
            files = conn.wh.manifest(name).state.values()
            assert all(len(f) <= 6 for f in files)
            # a merged file spans several epochs
            merged_seen |= any(f.epoch_to - f.epoch_from > 1 for fs in files for f in fs)
    assert merged_seen
    extra = 14
    while not conn.wh.compactor._merges:  # end with a merge no step has adopted yet
        conn.execute(f"INSERT INTO t VALUES ({extra}, {extra}), ({extra + 100}, {extra})")
        conn.execute("FLUSH")
        extra += 1
        assert extra < 30
    pending = list(conn.wh.compactor._merges)
    conn.close()
    conn = dagster_rw.connect(wh, gc_grace_seconds=0, compact_max_files=3)
    assert not conn.wh.compactor._merges
    for name in ("t", "s"):
        listed = {f.key for fs in conn.wh.manifest(name).state.values() for f in fs} | \
            {f.key for f in conn.wh.manifest(name).changelog}
        _only_listed_files(conn, {k for k in conn.wh.store.list(f"objects/{name}/") if "/manifest/" not in k}, listed)
    for name, table in pending:  # what was in flight at close is listed now
        assert len(conn.wh.manifest(name).state[table]) <= 3 + 1
    ids = [i for i in range(extra)] + [i + 100 for i in range(extra)]
    ids = [i for i in ids if not (i < 100 and i % 3 == 1 and i + 1 < 14)]
    assert sorted(conn.execute("SELECT id FROM t").fetchall()) == [(i,) for i in sorted(ids)]
    expect = {}
    for i in ids:
        g = (i % 100) % 2
        n, top = expect.get(g, (0, -1))
        expect[g] = (n + 1, max(top, i))
    assert sorted(conn.execute("SELECT * FROM s").fetchall()) == sorted((g, n, top) for g, (n, top) in expect.items())


def test_a_background_merge_of_files_another_process_replaced_is_discarded(tmp_path):
    wh = str(tmp_path / "wh")
    a = dagster_rw.connect(wh, gc_grace_seconds=0, compact_max_files=2)
    a.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    for i in range(3):
        a.execute(f"INSERT INTO t VALUES ({i}, {i})")
        a.execute("FLUSH")
    (merge,) = [m for (name, _), m in a.wh.compactor._merges.items() if name == "t"]
    (held,) = merge.future.result()  # begun in a FLUSH: written to scratch space, for a later step's pack
    merged = held.file.key
    assert os.path.exists(held.path) and not a.wh.store.exists(merged)
    b = dagster_rw.connect(wh, gc_grace_seconds=0)
    assert b.compact("t") >= 3  # another process merges every file into one
    b.close()
    a.execute("INSERT INTO t VALUES (3, 3)")
    a.execute("FLUSH")  # the step finds the merge's files gone: the merged file is deleted, never stored
    assert not os.path.exists(held.path) and not a.wh.store.exists(merged)
    assert merged not in {f.key for f in a.wh.manifest("t").state["output"]}
    assert sorted(a.execute("SELECT * FROM t").fetchall()) == [(i, i) for i in range(4)]
    a.close()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), key_type=st.sampled_from(sorted(KEY_TYPES)))
def test_count_table_adds_up_changes_across_files_like_a_counter(tmp_path_factory, data, key_type):
    """A CountTable's files hold count changes: a key's count is their sum over files, a key whose
    changes cancel is absent, and merging files (any level) changes no count."""
    strategy, arrow_type = KEY_TYPES[key_type]
    schema = pa.schema([("k1", arrow_type), ("k2", pa.int32()), ("cnt", pa.int64())])
    table = CountTable(LocalStore(str(tmp_path_factory.mktemp("sst"))), ENGINE, "state/c", ["k1", "k2"], schema, [])
    model: dict = {}
    steps = data.draw(st.lists(st.dictionaries(st.tuples(strategy, st.integers(0, 2)), st.integers(-2, 2),
                                               max_size=6), min_size=1, max_size=8))
    for epoch, changes in enumerate(steps, start=1):
        rows = [{"k1": k1, "k2": k2, "cnt": c, DELETED: False} for (k1, k2), c in changes.items() if c]
        if rows:
            table.stage(_table(schema.append(pa.field(DELETED, pa.bool_())), rows))
        f = table.flush(epoch - 1, epoch)
        table.files = table.files + ([f] if f else [])
        table.compact(3)
        for key, c in changes.items():
            model[key] = model.get(key, 0) + c
        live = {k: c for k, c in model.items() if c}
        got = {(r["k1"], r["k2"]): r["cnt"] for r in ENGINE.to_arrow(table.read_all()).to_pylist()}
        assert got == live
        probe = data.draw(st.lists(st.tuples(strategy, st.integers(0, 2)), max_size=4))
        keys = _table(pa.schema([("k1", arrow_type), ("k2", pa.int32())]), [{"k1": a, "k2": b} for a, b in probe])
        for on in (["k1"], ["k1", "k2"]):
            wanted = {tuple(p[: len(on)]) for p in probe}
            found = ENGINE.to_arrow(table.lookup(keys, on)).to_pylist()
            assert {(r["k1"], r["k2"]): r["cnt"] for r in found} == \
                {k: c for k, c in live.items() if tuple(k[: len(on)]) in wanted}
            assert len(found) == len({k for k in live if tuple(k[: len(on)]) in wanted})
    table.compact_all()
    assert len(table.files) <= 1
    assert {(r["k1"], r["k2"]): r["cnt"] for r in ENGINE.to_arrow(table.read_all()).to_pylist()} == \
        {k: c for k, c in model.items() if c}


def test_min_max_state_of_an_earlier_format_is_refused_not_misread(tmp_path):
    """Earlier versions kept MIN/MAX value counts as absolute counts (newest file wins); read as
    count changes they would give wrong extremes, so a step refuses them with a clear error."""
    import pytest

    from dagster_rw.storage import manifest as manifests

    conn = dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW hi AS SELECT g, max(v) AS mx FROM t GROUP BY g")
    conn.execute("INSERT INTO t VALUES (1, 1, 10), (2, 1, 20)")
    conn.flush()
    m = conn.wh.manifest("hi")
    [name] = [n for n in m.state if ".vcount" in n]
    m.state[name.replace(".vcount", ".minput")] = m.state.pop(name)  # as an earlier version named it
    manifests.commit(conn.wh.store, m, [], 0)
    conn.execute("DELETE FROM t WHERE id = 2")
    with pytest.raises(dagster_rw.OperationalError, match="'hi'.*earlier dagster-rw.*DROP it and CREATE it again"):
        conn.flush()


@pytest.mark.parametrize("on", [["k"], ["k", "j"]])
def test_lookups_leave_out_the_files_of_a_run_whose_key_range_holds_no_wanted_key(tmp_path, on):
    """A run (as a Spark step writes one): files of disjoint key ranges, recorded in the manifest;
    an in-process lookup opens only the files whose range holds a wanted key."""
    from dagster_rw.storage.manifest import SstFile
    from dagster_rw.storage.parquet_io import write_parquet

    sst_cache.clear()
    store = LocalStore(str(tmp_path))
    schema = pa.schema([("k", pa.int64()), ("j", pa.int32()), ("v", pa.int64())])
    full = schema.append(pa.field(DELETED, pa.bool_())).append(pa.field("_epoch", pa.int64()))
    files = []
    for part, (lo, hi) in enumerate([(0, 99), (100, 199), (200, 299)]):
        keys = np.arange(lo, hi + 1)
        rows = pa.table({"k": keys, "j": pa.array(keys % 3, pa.int32()), "v": keys * 10,
                         DELETED: np.zeros(len(keys), bool), "_epoch": np.ones(len(keys), np.int64)}, schema=full)
        key = f"state/t/00000000000000000000-00000000000000000001-run{part}.parquet"
        path = store.local_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_parquet(rows, path, ["k", "j"])
        files.append(SstFile(key=key, epoch_from=0, epoch_to=1, rows=len(keys), bytes=os.path.getsize(path),
                             key_min=[lo, lo % 3], key_max=[hi, hi % 3], run="r1"))
    table = StateTable(store, ENGINE, "state/t", ["k", "j"], schema, files)
    probe = pa.table({"k": pa.array([5, 150, 151, 1000], pa.int64()), "j": pa.array([2, 0, 1, 0], pa.int32())})
    found = ENGINE.to_arrow(table.lookup(probe, on)).sort_by("k").to_pylist()
    expect = [{"k": k, "j": k % 3, "v": 10 * k} for k in (5, 150, 151)
              if on == ["k"] or {5: 2, 150: 0, 151: 1}[k] == k % 3]
    assert found == expect
    opened = [sst_cache.cached(store.local_path(f.key)) is not None for f in files]
    assert opened == [True, True, False]  # keys 5 and 150, 151: the first two; 1000 is in none
    sst_cache.clear()
