"""The in-process step's fast paths (numpy and Arrow instead of SQL) against the general paths they
short-cut: the same answers on random inputs, so a fast path can never change a result."""
from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.engine.duck import DuckEngine
from dagster_rw.operators import base
from dagster_rw.operators.aggregate import AggregateOp
from dagster_rw.operators.base import W, consolidate_sql, state_upsert_sql
from dagster_rw.runtime import epochs, step
from dagster_rw.storage import sst_cache
from dagster_rw.storage.state_table import KEY_ORDER
from dagster_rw.storage.tuning import TUNING, tuned

_ENGINE = DuckEngine(threads=1)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
WAREHOUSE_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def tune():
    """tune(**fields) sets fields of the storage's TUNING for the rest of the test, which puts them back."""
    with contextlib.ExitStack() as stack:
        yield lambda **fields: stack.enter_context(tuned(**fields))


@SETTINGS
@given(keys=st.lists(st.integers(-50, 50), max_size=300), wanted=st.lists(st.integers(-60, 60), max_size=40),
       side=st.sampled_from(["left", "right"]))
def test_sparse_index_search_equals_numpy_searchsorted(keys, wanted, side):
    haystack = np.sort(np.array(keys, np.int64))
    needles = np.sort(np.array(wanted, np.int64))
    # the sparse path only runs for few needles: force it
    with tuned(sparse_index_min_rows=0 if len(needles) * 16 <= len(haystack) else -1, sparse_index_stride=4):
        got = sst_cache.search._search(haystack, needles, side) if len(haystack) else np.searchsorted(haystack, needles)
    assert got.tolist() == np.searchsorted(haystack, needles, side=side).tolist()


@SETTINGS
@given(low=st.integers(-40, 0), n=st.integers(1, 60), holes=st.sets(st.integers(-40, 60), max_size=40),
       nulls=st.integers(0, 3), wanted=st.lists(st.integers(-50, 70), max_size=40), sorted_=st.booleans())
def test_dense_index_and_key_filter_find_what_binary_search_finds(tmp_path_factory, low, n, holes, nulls, wanted,
                                                                  sorted_):
    """A file whose integer keys fill much of their range is looked up through a dense index (a
    row per key value), and many keys are first filtered by a file's Bloom filter; either finds
    the same rows as a binary search, with NULL keys first."""
    keys = set(range(low, low + n)) - holes
    path = str(tmp_path_factory.mktemp("dense") / "f.parquet")
    ordered = sorted(keys)
    pa_keys = pa.array([None] * nulls + ordered, pa.int32())
    pq.write_table(pa.table({"k": pa_keys, "v": pa.array(range(len(pa_keys)), pa.int64())}), path)
    needles = np.array(sorted(wanted) if sorted_ else wanted, np.int32)
    answers = []
    # the dense index (where the keys allow it); the filter; neither (a binary search)
    for dense_from, filter_from in ((0, 1 << 40), (1 << 40, 0), (1 << 40, 1 << 40)):
        with tuned(dense_index_min_rows=dense_from, filter_min_needles=filter_from):
            sst_cache.clear()
            _, pos, hit = sst_cache.positions(path, ["k"], needles)
            rows = sst_cache.rows_matching(path, ["k"], np.unique(needles), False, unique=True)
        answers.append((pos[hit].tolist(), hit.tolist(), rows.to_pylist()))
    assert answers[0] == answers[2]
    assert answers[1] == answers[2]
    assert answers[2][1] == [w in keys for w in needles.tolist()]


@SETTINGS
@given(steps=st.lists(st.tuples(st.sets(st.integers(0, 400), max_size=150), st.sets(st.integers(0, 400), max_size=30)),
                      min_size=1, max_size=7),
       probe=st.sets(st.integers(-10, 410), max_size=200), max_keys=st.sampled_from([0, 60, 1 << 22]))
def test_one_filter_over_the_newer_files_finds_what_searching_every_file_finds(tmp_path_factory, monkeypatch, tune,
                                                                              steps, probe, max_keys):
    """A lookup by primary key first asks one Bloom filter over a state table's newer files which
    keys any of them may hold (the filter extended as files are added, rebuilt when it fills up or
    the files change); the rows found equal a search of every file and a dict model."""
    from dagster_rw.storage.object_store import LocalStore
    from dagster_rw.storage.state_table import DELETED, StateTable

    tune(filter_min_needles=0, union_filter_max_keys=max_keys)
    sst_cache.clear()
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    full = schema.append(pa.field(DELETED, pa.bool_()))
    table = StateTable(LocalStore(str(tmp_path_factory.mktemp("union"))), _ENGINE, "state/t", ["k"], schema, [])
    model: dict = {}
    keys = pa.table({"k": pa.array(sorted(probe), pa.int64())})
    union = sst_cache.union_admits
    for epoch, (put, deleted) in enumerate(steps, start=1):
        rows = [{"k": k, "v": epoch * 1000 + k, DELETED: False} for k in put] + \
            [{"k": k, "v": 0, DELETED: True} for k in deleted - put]
        if rows:
            table.stage(pa.Table.from_pylist(rows, schema=full))
            table.files = table.files + [table.flush(epoch - 1, epoch)]
        table.compact(5)
        model.update({k: epoch * 1000 + k for k in put})
        for k in deleted - put:
            model.pop(k, None)
        expect = {k: model[k] for k in probe if k in model}
        found = _ENGINE.to_arrow(table.lookup(keys, ["k"])).to_pylist()
        assert {r["k"]: r["v"] for r in found} == expect and len(found) == len(expect)
        monkeypatch.setattr(sst_cache, "union_admits", lambda *a: None)  # every file searched
        found = _ENGINE.to_arrow(table.lookup(keys, ["k"])).to_pylist()
        assert {r["k"]: r["v"] for r in found} == expect and len(found) == len(expect)
        monkeypatch.setattr(sst_cache, "union_admits", union)
    paths = [table.store.local_path(f.key) for f in table.files]
    if len(paths) > 1 and max_keys:
        held = set()
        for path in paths[1:]:
            held |= set(sst_cache.read(path).column("k").to_pylist())
        wanted = np.array(sorted(probe | held), np.int64)
        admits = sst_cache.union_admits(paths[1:], ["k"], wanted)
        if admits is not None:  # no key the newer files hold is ever set aside
            assert admits[np.isin(wanted, sorted(held))].all()


@SETTINGS
@given(base=st.sampled_from([1, 50, 30000]),
       steps=st.lists(st.tuples(st.sets(st.integers(-30, 30300), max_size=60), st.sets(st.integers(-30, 30300), max_size=20),
                                st.sampled_from(["keep", "keep", "compact", "undo"])), min_size=1, max_size=9),
       probe=st.sets(st.integers(-40, 30400), max_size=200))
def test_the_map_of_newest_holders_finds_what_searching_every_file_finds(tmp_path_factory, tune, base, steps,
                                                                          probe):
    """A lookup by a dense integer key asks a map which file holds each key's newest version (kept
    up to date as files are appended, merged, fully merged or dropped, and as keys fall outside its
    range) and searches only that file: the rows equal a search of every file and a dict model, and
    the map names, for every key some newer file holds, the newest such file."""
    from dagster_rw.storage.object_store import LocalStore
    from dagster_rw.storage.state_table import DELETED, StateTable

    tune(dense_index_min_rows=0)
    sst_cache.clear()
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    full = schema.append(pa.field(DELETED, pa.bool_()))
    table = StateTable(LocalStore(str(tmp_path_factory.mktemp("holders"))), _ENGINE, "state/t", ["k"], schema, [])
    # values that do not compress: the oldest file is the largest, so merges leave it alone
    values = np.random.default_rng(base).integers(0, 1 << 40, base).tolist()
    models = [dict(enumerate(values))]  # the model after each file list kept
    table.stage(pa.Table.from_pylist([{"k": k, "v": v, DELETED: False} for k, v in models[0].items()], schema=full))
    table.files = [table.flush(0, 1)]
    keys = pa.table({"k": pa.array(sorted(probe), pa.int64())})
    for epoch, (put, deleted, action) in enumerate(steps, start=2):
        model = dict(models[-1])
        rows = [{"k": k, "v": epoch * 1000 + k, DELETED: False} for k in put] + \
            [{"k": k, "v": 0, DELETED: True} for k in deleted - put]
        before = list(table.files)
        if rows:
            table.stage(pa.Table.from_pylist(rows, schema=full))
            table.files = table.files + [table.flush(epoch - 1, epoch)]
        model.update({k: epoch * 1000 + k for k in put})
        for k in deleted - put:
            model.pop(k, None)
        found = _ENGINE.to_arrow(table.lookup(keys, ["k"])).to_pylist()
        if action == "compact":  # as a step's commit does, after the step's lookups
            assert {r["k"]: r["v"] for r in found} == {k: model[k] for k in probe if k in model}
            table.compact(2)
            found = _ENGINE.to_arrow(table.lookup(keys, ["k"])).to_pylist()
        if action == "undo":  # the step's commit failed: the next lookup sees the list before it
            table.files = before
        else:
            models.append(model)
        expect = {k: models[-1][k] for k in probe if k in models[-1]}
        if action == "undo":
            found = _ENGINE.to_arrow(table.lookup(keys, ["k"])).to_pylist()
        assert {r["k"]: r["v"] for r in found} == expect and len(found) == len(expect)
        with tuned(newest_holders=False):  # every file searched, newest first
            found = _ENGINE.to_arrow(table.lookup(keys, ["k"])).to_pylist()
        assert {r["k"]: r["v"] for r in found} == expect and len(found) == len(expect)
        paths = [table.store.local_path(f.key) for f in table.files]
        wanted = np.array(sorted(probe), np.int64)
        holders = sst_cache.newest_holders(paths, ["k"], wanted)
        held = [set(sst_cache.read(p).column("k").to_pylist()) for p in paths]
        if len(paths) > 1 and held[0] and max(held[0]) - min(held[0]) < 2 * len(held[0]):  # a dense oldest file
            assert holders is not None
            for k, h in zip(wanted.tolist(), holders.tolist()):
                newest = max((i for i in range(1, len(paths)) if k in held[i]), default=0)
                if newest:
                    assert h == newest
                else:
                    assert h in ((0, -1) if k not in held[0] else (0,))


def test_a_misspelt_tuning_is_refused_naming_the_known_ones():
    before = TUNING.sparse_index_min_rows
    with pytest.raises(dagster_rw.ProgrammingError, match="unknown tuning sparse_min_rows; .*sparse_index_min_rows"):
        with tuned(sparse_min_rows=0):
            pass
    assert TUNING.sparse_index_min_rows == before


def test_sparse_index_search_on_a_large_file():
    rng = np.random.default_rng(7)
    haystack = np.sort(rng.integers(0, 1 << 40, TUNING.sparse_index_min_rows + 12345))
    needles = np.sort(np.concatenate([rng.choice(haystack, 3000), rng.integers(-5, 1 << 41, 3000)]))
    for side in ("left", "right"):
        assert (sst_cache.search._search(haystack, needles, side) == np.searchsorted(haystack, needles, side=side)).all()


@pytest.fixture(params=["numpy", "polars"])
def sorter(request):
    """Large sorts by numpy's sort or by Polars' (sst_cache.sort_values picks the faster per
    machine): every array counts as large here, so both are checked on the same cases."""
    if request.param == "polars":
        pytest.importorskip("polars")
    with tuned(fast_sort_min_values=0, sorter=request.param):
        yield request.param


def test_sort_values_sorts_without_touching_its_input(sorter):
    rng = np.random.default_rng(3)
    for values in (rng.integers(-(1 << 62), 1 << 62, 20_000), rng.integers(0, 1 << 63, 20_000, dtype=np.uint64),
                   rng.integers(-50, 50, 5_000).astype(np.int32), np.zeros(0, np.int64)):
        before = values.copy()
        assert sst_cache.sort_values(values).tolist() == sorted(before.tolist())
        assert (values == before).all()
    frozen = pa.array(np.arange(100, 0, -1)).to_numpy()  # a read-only view of Arrow's buffer
    assert sst_cache.sort_values(frozen).tolist() == list(range(1, 101))


@SETTINGS
@given(values=st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=300),
       dtype=st.sampled_from([np.int64, np.int32, np.int16, np.uint64]), shift=st.integers(0, 62),
       runs=st.integers(1, 4))
def test_sorted_order_is_numpys_stable_argsort(sorter, values, dtype, shift, runs):
    """sorted_order is numpy's stable argsort, whether the codes pack beside their row numbers
    (narrow ranges) or not (full-width ones, with and without equal codes), and over sorted runs;
    hash_order puts equal hashes side by side."""
    info = np.iinfo(dtype)
    codes = np.array([min(max(v >> shift, info.min), info.max) for v in values], dtype)
    for c in (codes, np.concatenate([codes, codes[:len(codes) // 3]])):
        order, ordered = sst_cache.sorted_order(c)
        assert order.tolist() == np.argsort(c, kind="stable").tolist()
        assert ordered.tolist() == sorted(c.tolist())
    pieces = np.array_split(codes, runs)
    concatenated = np.concatenate([np.sort(p) for p in pieces]) if len(codes) else codes
    order, _ = sst_cache.sorted_order(concatenated, runs=True)
    assert order.tolist() == np.argsort(concatenated, kind="stable").tolist()
    h = codes.astype(np.int64).view(np.uint64) if dtype != np.uint64 else codes
    order, short = sst_cache.hash_order(h)
    assert sorted(order.tolist()) == list(range(len(h)))
    assert (short[1:] >= short[:-1]).all()
    # equal hashes stay equal after shortening, so they end up side by side
    assert all(short[i] == short[j] for i in range(len(h)) for j in range(len(h)) if h[order[i]] == h[order[j]])


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 31), (1 << 31) - 1)),
                      max_size=200),
       shifts=st.tuples(st.sampled_from([0, 16, 20, 24, 31]), st.sampled_from([0, 16, 20, 24, 31])))
def test_two_column_codes_sort_like_the_columns(sorter, pairs, shifts):
    """Two small-integer key columns' codes sort the rows as the columns themselves do, in a
    stable order."""
    table = pa.table({"a": pa.array([a >> shifts[0] for a, _ in pairs], pa.int32()),
                      "b": pa.array([b >> shifts[1] for _, b in pairs], pa.int32())})
    codes = sst_cache.key_codes(table, ["a", "b"])
    order, ordered = sst_cache.sorted_order(codes)
    rows = list(zip(table.column("a").to_pylist(), table.column("b").to_pylist()))
    assert [rows[i] for i in order.tolist()] == sorted(rows)
    assert order.tolist() == sorted(range(len(rows)), key=lambda i: rows[i])
    assert ordered.tolist() == sorted(codes.tolist())


@SETTINGS
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.integers(-5, 5)), st.integers(-3, 3),
                               st.sampled_from([-1, 1])), max_size=60),
       types=st.sampled_from([(pa.int32(), pa.int32()), (pa.int64(), pa.int16()), (pa.date32(), pa.int32())]))
def test_numpy_sort_order_equals_arrows_sort(rows, types):
    a_type, b_type = types
    table = pa.table({
        "a": pa.array([r[0] for r in rows], pa.int32() if a_type == pa.date32() else pa.int64()).cast(a_type),
        "b": pa.array([r[1] for r in rows], pa.int64()).cast(b_type),
        W: pa.array([r[2] for r in rows], pa.int64())})
    for keys, last in ((["a"], None), (["a", "b"], None), (["a"], W), (["a", "b"], W)):
        order = sst_cache.sort_indices(table, keys, last)
        spec = [(k, "ascending") for k in keys] + ([(last, "ascending")] if last else [])
        want = table.take(pc.sort_indices(table, spec, null_placement="at_start"))
        got = table if order is None else table.take(order)  # None: in order already
        # rows equal in every sort column may come in either order: compare the sort columns only
        cols = keys + ([last] if last else [])
        assert got.select(cols).to_pylist() == want.select(cols).to_pylist()


VALUES = st.tuples(st.one_of(st.none(), st.integers(-2, 2)), st.one_of(st.none(), st.sampled_from(["x", "y", ""])),
                   st.one_of(st.none(), st.sampled_from([0.5, -1.0, 2.25])))


@pytest.mark.parametrize("key_type", ["INT", "BIGINT", "DATE", "INT dense"])
@WAREHOUSE_SETTINGS
@given(data=st.data())
def test_table_changes_in_arrow_equal_the_sql_path(tmp_path_factory, tune, key_type, data):
    if key_type.endswith(" dense"):  # files this small get a dense index: the holders map is used
        key_type = key_type.split()[0]
        tune(dense_index_min_rows=0)
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb")
    conn.execute(f"CREATE TABLE t (k {key_type} PRIMARY KEY, i INT, s VARCHAR, d DOUBLE)")
    wh = conn.wh

    def literal(k):
        return f"DATE '2024-01-01' + {k}" if key_type == "DATE" else str(k)

    def rows_sql(rows):
        return ", ".join(f"({literal(k)}, {'NULL' if i is None else i}, {'NULL' if s is None else repr(s)}, "
                         f"{'NULL' if d is None else d})" for k, (i, s, d) in rows)

    for _ in range(data.draw(st.integers(1, 3))):  # committed state in one or several files
        rows = data.draw(st.dictionaries(st.integers(0, 12), VALUES, max_size=8))
        if rows:
            conn.execute(f"INSERT INTO t VALUES {rows_sql(rows.items())}")
        conn.flush()
    for _ in range(data.draw(st.integers(1, 3))):  # staged batches, keys repeating across and within
        rows = data.draw(st.lists(st.tuples(st.integers(0, 14), VALUES), max_size=8))
        if rows:
            conn.execute(f"INSERT INTO t VALUES {rows_sql(rows)}")
        gone = data.draw(st.lists(st.integers(0, 14), max_size=3))
        if gone:
            conn.execute(f"DELETE FROM t WHERE k IN ({', '.join(literal(k) for k in gone)})")
    obj, m = wh.get("t"), wh.manifest("t")
    keys = epochs.unsealed_batches(wh.store, "t")
    cols = [c.name for c in obj.columns]
    fast, found_writes, _ = step.table_change(wh, obj, m, keys)
    original = step._apply_batches_in_arrow
    try:
        step._apply_batches_in_arrow = lambda *a: None
        slow = step.apply_batches(wh, obj, m, keys)
    finally:
        step._apply_batches_in_arrow = original
    if slow is None:
        assert fast is None
        return

    def canon(rel):
        return sorted(map(str, wh.engine.sql(consolidate_sql(cols, "d"), d=rel).to_pylist()))

    assert canon(fast) == canon(slow)
    # the fast path consolidates itself: a key changes at most once each way
    step._check_unique_key(wh.engine, obj, fast, list(obj.stream_key))
    writes = base._state_writes_in_arrow(fast, cols, list(obj.stream_key))
    if writes is not None:
        want = wh.engine.sql(state_upsert_sql(cols, list(obj.stream_key), "d"), d=fast)
        assert sorted(map(str, writes.to_pylist())) == sorted(map(str, want.to_pylist()))
    if found_writes is not None:  # the writes the table's step found on its way equal those of its change
        want = wh.engine.sql(state_upsert_sql(cols, list(obj.stream_key), "d"), d=fast)
        assert sorted(map(str, found_writes.to_pylist())) == sorted(map(str, want.to_pylist()))
    conn.close()


def _weak_hash(monkeypatch):
    """Make distinct keys collide often, so the checks behind every hash match are exercised."""
    real = sst_cache.key_hash

    def weak(table, keys):
        h = real(table, keys)
        return None if h is None else h % np.uint64(3)

    monkeypatch.setattr(sst_cache, "key_hash", weak)


DELTA_ROWS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.one_of(st.none(), st.integers(0, 1)),
                                st.sampled_from([-1, 1])), max_size=12)


def _delta(rows):
    return pa.table({"a": pa.array([r[0] for r in rows], pa.int32()), "b": pa.array([r[1] for r in rows], pa.int64()),
                     "v": pa.array([r[2] for r in rows], pa.int32()), W: pa.array([r[3] for r in rows], pa.int64())})


@pytest.mark.parametrize("weak", [False, True])
@SETTINGS
@given(rows=DELTA_ROWS)
def test_consolidation_in_arrow_equals_sql(monkeypatch, weak, rows):
    if weak:
        _weak_hash(monkeypatch)
    engine = _ENGINE
    delta = _delta(rows)
    want = engine.sql(consolidate_sql(["a", "b", "v"], "d"), d=delta)
    got = base.consolidate(engine, delta, ["a", "b", "v"])
    assert sorted(map(str, got.to_pylist())) == sorted(map(str, want.to_pylist()))


@pytest.mark.parametrize("weak", [False, True])
@pytest.mark.parametrize("by_key", [True, False])
@SETTINGS
@given(rows=DELTA_ROWS)
def test_state_writes_in_arrow_equal_sql(monkeypatch, weak, by_key, rows):
    if weak:
        _weak_hash(monkeypatch)
    if not by_key:  # the path by key hashes, for keys that cannot be coded exactly
        monkeypatch.setattr(base, "_state_writes_by_key_order", lambda *a: None)
    # a consolidated delta unique per key and sign, as operators hand to their state
    seen, unique = set(), []
    for a, b, v, w in rows:
        if (a, b, w) not in seen:
            seen.add((a, b, w))
            unique.append((a, b, v, w))
    delta = _ENGINE.sql(consolidate_sql(["a", "b", "v"], "d"), d=_delta(unique))
    want = _ENGINE.sql(state_upsert_sql(["a", "b", "v"], ["a", "b"], "d"), d=delta)
    got = base.state_writes(_ENGINE, delta, ["a", "b", "v"], ["a", "b"])
    assert sorted(map(str, got.to_pylist())) == sorted(map(str, want.to_pylist()))
    marked = (got.schema.metadata or {}).get(KEY_ORDER) == b"a,b"  # the state file is written unsorted
    if by_key and delta.num_rows > 1:  # in key order already: the state file's sort has nothing to do
        assert marked
    if marked:
        keys = [(r["a"], r["b"]) for r in got.to_pylist()]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)


@WAREHOUSE_SETTINGS
@given(dims=st.dictionaries(st.integers(0, 9), st.integers(0, 3), min_size=1, max_size=10),
       epochs_=st.lists(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 11),
                                            st.one_of(st.none(), st.integers(0, 50)), st.booleans()),
                                  max_size=8), min_size=1, max_size=4))
def test_fact_to_dimension_join_by_gather_equals_batch_query(tmp_path_factory, dims, epochs_):
    """Only the fact table changes, so the join gathers each fact row's one dimension row; after
    each flush the view equals the same query run in batch by DuckDB over the tables."""
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb")
    conn.execute("CREATE TABLE dim (id INT PRIMARY KEY, grp INT)")
    conn.execute("CREATE TABLE fact (id INT PRIMARY KEY, dim_id INT, v INT)")
    conn.execute(f"INSERT INTO dim VALUES {', '.join(f'({k}, {g})' for k, g in dims.items())}")
    conn.flush()
    query = ("SELECT d.grp, count(*) AS n, sum(f.v) AS sv, max(f.v) AS mx FROM fact f JOIN dim d ON f.dim_id = d.id "
             "GROUP BY d.grp")
    conn.execute(f"CREATE MATERIALIZED VIEW by_grp AS {query}")
    conn.execute("CREATE MATERIALIZED VIEW pairs AS SELECT f.id, f.v, d.id AS did, d.grp FROM fact f "
                 "JOIN dim d ON f.dim_id = d.id")
    for changes in epochs_:
        for fid, dim_id, v, delete in changes:
            if delete:
                conn.execute(f"DELETE FROM fact WHERE id = {fid}")
            else:
                conn.execute(f"INSERT INTO fact VALUES ({fid}, {dim_id}, {'NULL' if v is None else v})")
        conn.flush()
        assert sorted(conn.execute("SELECT * FROM by_grp").fetchall(), key=str) == \
            sorted(conn.execute(query).fetchall(), key=str)
        assert sorted(conn.execute("SELECT * FROM pairs").fetchall()) == sorted(conn.execute(
            "SELECT f.id, f.v, d.id, d.grp FROM fact f JOIN dim d ON f.dim_id = d.id").fetchall())
    conn.close()


def test_a_failed_background_table_commit_keeps_its_views_from_committing(tmp_path, monkeypatch):
    """Inside a FLUSH a table commits in the background while its views compute from the cache; if
    that commit fails, no view commits past it, the FLUSH raises, and the next FLUSH catches up."""
    from dagster_rw.storage import manifest as manifests

    conn = dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT)")
    conn.execute("CREATE MATERIALIZED VIEW s AS SELECT g, count(*) AS n, max(v) AS mx FROM t GROUP BY g")
    conn.execute("INSERT INTO t VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30)")
    conn.flush()
    before = {r["name"]: r["epoch"] for r in conn.status()}
    conn.execute("UPDATE t SET v = v + 1 WHERE g = 1")
    real_successor = manifests.successor

    def failing(m, *args, **kwargs):
        if m.object == "t":
            raise OSError("disk full while committing t")
        return real_successor(m, *args, **kwargs)

    monkeypatch.setattr(manifests, "successor", failing)
    with pytest.raises(OSError, match="disk full"):
        conn.flush()
    fresh = dagster_rw.connect(str(tmp_path / "wh"), engine="duckdb")
    assert {r["name"]: r["epoch"] for r in fresh.status()} == before  # neither t nor s moved
    monkeypatch.setattr(manifests, "successor", real_successor)
    conn.flush()
    assert sorted(conn.execute("SELECT * FROM s").fetchall()) == [(1, 2, 21), (2, 1, 30)]
    assert sorted(fresh.execute("SELECT * FROM s").fetchall()) == [(1, 2, 21), (2, 1, 30)]


@WAREHOUSE_SETTINGS
@given(path=st.sampled_from(["counting", "sorting", "sql"]),
       epochs_=st.lists(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 2),
                                            st.one_of(st.none(), st.integers(0, 4)), st.booleans()),
                                  max_size=10), min_size=1, max_size=6))
def test_aggregates_equal_duckdb_on_the_arrow_and_the_sql_paths(tmp_path_factory, monkeypatch, path, epochs_):
    """MIN/MAX/COUNT DISTINCT keep value counts as changes summed over files: with few values per
    group, extremes lose their last copy often, files merge every few steps, and the view still
    equals DuckDB's answer over the same DML, with the per-group sums and extremes computed by
    weighted counts per group value (numpy's bincount), by Arrow's hash aggregation and a sort of
    the value counts in numpy, and with both computed in SQL."""
    with monkeypatch.context() as patch:
        if path != "counting":
            patch.setattr(AggregateOp, "group_deltas_by_counting", lambda *args: None)
            patch.setattr(AggregateOp, "extremes_by_counting", lambda *args: None)
        if path == "sql":
            patch.setattr(AggregateOp, "counts_in_numpy", lambda *args: None)
            patch.setattr(AggregateOp, "group_deltas_in_arrow", lambda *args: None)
        _min_max_workload(tmp_path_factory, epochs_)


def _min_max_workload(tmp_path_factory, epochs_):
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb", compact_max_files=3)
    oracle = Oracle()
    ddl = "CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT)"
    conn.execute(ddl)
    oracle.execute(ddl)
    queries = {
        "per_group": "SELECT g, min(v) AS lo, max(v) AS hi, count(DISTINCT v) AS nd, count(*) AS n, "
                     "sum(v) AS sv, count(v) AS nv, avg(v) AS av FROM t GROUP BY g",
        "overall": "SELECT min(v) AS lo, max(v) AS hi, count(DISTINCT v) AS nd FROM t",
    }
    for name, q in queries.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    for changes in epochs_:
        for rid, g, v, delete in changes:
            if delete:
                sql = f"DELETE FROM t WHERE id = {rid}"
                conn.execute(sql)
                oracle.execute(sql)
            else:
                values = f"({rid}, {g}, {'NULL' if v is None else v})"
                conn.execute(f"INSERT INTO t VALUES {values}")
                oracle.upsert("t", values)
        conn.flush()
        for name, q in queries.items():
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(q), name)
    conn.close()


@WAREHOUSE_SETTINGS
@given(epochs_=st.lists(st.lists(st.one_of(
    st.tuples(st.just("a"), st.integers(0, 8), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 5)),
              st.integers(0, 3), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("b"), st.integers(0, 3), st.integers(0, 2), st.integers(0, 3), st.booleans())),
    max_size=10), min_size=1, max_size=5))
def test_joins_keep_only_the_columns_read_above_them_and_equal_duckdb(tmp_path_factory, epochs_):
    """A join keeps out of its state the columns nothing above it reads (not the output, not a key,
    filter, residual condition, group or aggregate argument): the state files hold only the others,
    and with both sides changing in the same epochs (updates of unread columns too) every view
    equals DuckDB's answer over the same DML."""
    from dagster_rw.sql.plan import Join

    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb")
    oracle = Oracle()
    for ddl in ("CREATE TABLE a (id INT PRIMARY KEY, k INT, x INT, y INT, z INT)",
                "CREATE TABLE b (k INT PRIMARY KEY, w INT, u INT)"):
        conn.execute(ddl)
        oracle.execute(ddl)
    queries = {
        "grouped": ("SELECT b.w, sum(a.x) AS sx, count(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY b.w",
                    ["y", "z", "u"]),
        "filtered": ("SELECT a.id, b.w FROM a JOIN b ON a.k = b.k WHERE a.y > 1", ["x", "z", "u"]),
        "residual": ("SELECT a.id, a.x FROM a JOIN b ON a.k = b.k AND a.z < b.u", ["y", "w"]),
        "nested": ("SELECT w, count(*) AS n FROM (SELECT a.id, b.w, a.x FROM a JOIN b ON a.k = b.k) s "
                   "WHERE x IS NOT NULL GROUP BY w", ["y", "z", "u"]),
    }
    for name, (q, unused) in queries.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        (join,) = [n for n in conn.wh.plan(conn.wh.get(name)).walk() if isinstance(n, Join)]
        assert sorted(join.columns[i].name for i in join.unused) == sorted(unused), name
    for changes in epochs_:
        for change in changes:
            if change[0] == "a":
                _, rid, k, x, y, z, delete = change
                values = f"({rid}, {k}, {'NULL' if x is None else x}, {y}, {z})"
                table, key = "a", f"id = {rid}"
            else:
                _, k, w, u, delete = change
                values, table, key = f"({k}, {w}, {u})", "b", f"k = {k}"
            if delete:
                conn.execute(f"DELETE FROM {table} WHERE {key}")
                oracle.execute(f"DELETE FROM {table} WHERE {key}")
            else:
                conn.execute(f"INSERT INTO {table} VALUES {values}")
                oracle.upsert(table, values)
        conn.flush()
        for name, (q, _) in queries.items():
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(q), name)
    kept = {"left": {"c0", "c1", "c2"}, "right": {"c0", "c1"}}  # a: id, k, x; b: k, w
    for table, files in conn.wh.manifest("grouped").state.items():
        side = table.rsplit(".", 1)[-1]
        for f in files if side in kept else []:
            assert set(pq.read_schema(conn.wh.store.local_path(f.key)).names) == kept[side] | {"_epoch", "_del"}
    conn.close()


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(-(1 << 15), (1 << 15) - 1), st.integers(-(1 << 31), (1 << 31) - 1)),
                      max_size=50),
       types=st.sampled_from([(pa.int16(), pa.int32()), (pa.int32(), pa.int32()), (pa.int8(), pa.int16())]))
def test_key_codes_decode_to_the_key_columns(pairs, types):
    """decode_codes undoes key_codes for signed small-integer pairs (the aggregate's count changes
    take their keys from the sorted codes instead of gathering them from the rows)."""
    bounds = [(np.iinfo(t.to_pandas_dtype()).min, np.iinfo(t.to_pandas_dtype()).max) for t in types]
    cols = [[min(max(p[i], bounds[i][0]), bounds[i][1]) for p in pairs] for i in range(2)]
    table = pa.table({"a": pa.array(cols[0], types[0]), "b": pa.array(cols[1], types[1])})
    decoded = sst_cache.decode_codes(sst_cache.key_codes(table, ["a", "b"]), list(types))
    assert [c.to_pylist() for c in decoded] == cols
    assert [c.type for c in decoded] == list(types)
    one = sst_cache.decode_codes(sst_cache.key_codes(table, ["b"]), [types[1]])
    assert one[0].to_pylist() == cols[1]
