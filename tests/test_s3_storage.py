"""A warehouse on S3 (moto's server over HTTP) behaves like one on local disk.

The storage primitives (conditional put, list, delete, the local cache of immutable objects), a
differential workload checked against DuckDB after every FLUSH, and a second connection - in this
process and in a new one with an empty cache - that picks the warehouse up at its committed epochs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections import Counter
from decimal import Decimal

import pytest
from oracle import Oracle, assert_same
from s3_server import MotoS3
from test_concurrency import race_steps_in_threads
from test_differential import (
    JOINS,
    LINEAR_AND_AGGREGATES,
    SCHEMA,
    VIEWS_ON_VIEWS,
    _values,
    run_workload,
)

import dagster_rw
from dagster_rw.errors import CommitConflict, OperationalError
from dagster_rw.storage import manifest as manifests
from dagster_rw.storage.log import log_of
from dagster_rw.storage.object_store import S3Store, open_store

pytestmark = pytest.mark.s3

BUCKET = "rw-test-warehouse"


@pytest.fixture(scope="module")
def s3():
    with MotoS3() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def s3_url(s3, tmp_path, monkeypatch):
    """A fresh warehouse prefix; this process's S3 cache and scratch files go under tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return s3.url(BUCKET)


@pytest.fixture
def store(s3, s3_url, tmp_path):
    return S3Store(s3_url, endpoint_url=s3.endpoint, cache_dir=str(tmp_path / "cache"))


# -- (a) the storage primitives ------------------------------------------------------------------

def test_moto_rejects_a_conditional_put_over_an_existing_key(s3):
    """The premise of the S3 commit protocol: the server honours If-None-Match: * (HTTP 412)."""
    from botocore.exceptions import ClientError

    client = s3.client()
    key = f"premise/{uuid.uuid4().hex}"
    client.put_object(Bucket=BUCKET, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"second", IfNoneMatch="*")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"first"


def test_s3_put_if_absent_commits_a_key_once(store):
    assert store.put_if_absent("commits/v1.json", b"one") is True
    assert store.put_if_absent("commits/v1.json", b"two") is False
    assert store.read_bytes("commits/v1.json") == b"one"  # the loser changed nothing


def test_s3_put_if_absent_has_one_winner_among_concurrent_writers(s3, s3_url, tmp_path):
    stores = [S3Store(s3_url, endpoint_url=s3.endpoint, cache_dir=str(tmp_path / f"c{i}")) for i in range(6)]
    for attempt in range(5):
        start = threading.Barrier(len(stores))
        results = {}

        def put(i, st):
            start.wait()
            results[i] = st.put_if_absent(f"race/v{attempt}.json", str(i).encode())

        threads = [threading.Thread(target=put, args=(i, st)) for i, st in enumerate(stores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, ok in results.items() if ok]
        assert len(winners) == 1, results
        assert stores[0].read_bytes(f"race/v{attempt}.json") == str(winners[0]).encode()


def test_s3_commit_of_a_taken_version_is_a_commit_conflict(s3_url, s3, store, tmp_path):
    manifests.commit(store, manifests.Manifest(object="x", epoch=1), [], 0)
    other = S3Store(s3_url, endpoint_url=s3.endpoint, cache_dir=str(tmp_path / "other"))
    with pytest.raises(CommitConflict, match="version 1 was committed by another process") as err:
        manifests.commit(other, manifests.Manifest(object="x", epoch=2), [], 0)
    assert isinstance(err.value, OperationalError)
    assert manifests.load(other, "x").epoch == 1  # it read the winner's entry
    assert manifests.load(S3Store(s3_url, endpoint_url=s3.endpoint), "x").version == 1


def test_s3_list_is_scoped_to_the_warehouse_prefix_and_delete_removes(s3, store, tmp_path):
    for key in ["a/1.json", "a/2.json", "a/b/3.json", "c/4.json"]:
        store.write_bytes(key, key.encode())
    neighbour = S3Store(s3.url(BUCKET, store.prefix + "-neighbour"), endpoint_url=s3.endpoint,
                        cache_dir=str(tmp_path / "n"))
    neighbour.write_bytes("a/9.json", b"not ours")
    assert store.list("a/") == ["a/1.json", "a/2.json", "a/b/3.json"]
    assert store.list("") == ["a/1.json", "a/2.json", "a/b/3.json", "c/4.json"]
    assert store.exists("a/2.json")
    store.delete("a/2.json")
    store.delete("a/never-there.json")  # deleting a missing key is not an error
    assert not store.exists("a/2.json")
    assert store.list("a/") == ["a/1.json", "a/b/3.json"]
    assert neighbour.list("a/") == ["a/9.json"]
    with pytest.raises(FileNotFoundError):
        store.read_bytes("a/2.json")


def test_s3_local_path_downloads_an_object_once_then_serves_the_cache(store, tmp_path):
    downloads = []
    real = store.client.download_file

    def counting(bucket, key, path, *a, **kw):
        downloads.append(key)
        return real(bucket, key, path, *a, **kw)

    store.client.download_file = counting
    store.write_bytes("data/x.parquet", b"immutable bytes")
    path = store.local_path("data/x.parquet")
    assert path.startswith(str(tmp_path / "cache"))
    assert open(path, "rb").read() == b"immutable bytes"
    assert store.local_path("data/x.parquet") == path
    assert len(downloads) == 1
    # the object is immutable: even after it is gone remotely the cached copy serves
    store.delete("data/x.parquet")
    assert open(store.local_path("data/x.parquet"), "rb").read() == b"immutable bytes"
    assert len(downloads) == 1
    # an uploaded file lands in the cache too: reading it back downloads nothing
    src = tmp_path / "upload.bin"
    src.write_bytes(b"uploaded")
    store.upload_file(str(src), "data/y.parquet")
    assert not src.exists()
    assert store.read_bytes("data/y.parquet") == b"uploaded"
    assert open(store.local_path("data/y.parquet"), "rb").read() == b"uploaded"
    assert len(downloads) == 1
    assert not [f for f in os.listdir(tmp_path / "cache" / "data") if f.endswith(".tmp")]


def test_s3_missing_object_reads_as_file_not_found_like_a_local_file(store):
    with pytest.raises(FileNotFoundError):
        store.read_bytes("nowhere/x.json")
    with pytest.raises(FileNotFoundError):
        store.local_path("nowhere/x.parquet")
    assert not os.path.exists(os.path.join(store.cache_dir, "nowhere", "x.parquet"))
    assert store.exists("nowhere/x.json") is False
    # a refused request (403) is an error, not an absent key
    from botocore.exceptions import ClientError

    def forbidden(**kw):
        raise ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "HeadObject")

    store.client.head_object = forbidden
    with pytest.raises(OperationalError, match="S3 HEAD of .*nowhere/x.json failed: 403"):
        store.exists("nowhere/x.json")


def test_open_store_takes_the_endpoint_from_the_environment(s3, s3_url):
    st = open_store(s3_url)
    assert isinstance(st, S3Store)
    st.write_bytes("probe", b"1")
    assert s3.client().get_object(Bucket=BUCKET, Key=f"{st.prefix}/probe")["Body"].read() == b"1"


# -- (b) a differential workload on S3 -----------------------------------------------------------

S3_VIEWS = {
    "group_agg": LINEAR_AND_AGGREGATES["group_agg"],  # count/sum/min/max/avg per group
    "global_agg": LINEAR_AND_AGGREGATES["global_agg"],
    "join_agg": JOINS["join_agg"],  # a join, then max and sum per group
    "base_agg": VIEWS_ON_VIEWS["base_agg"],
    "on_view": VIEWS_ON_VIEWS["on_view"],  # a join of a view and a table
}
S3_CREATE_AT = [0, 4, 0, 0, 9]  # most views exist before the data; two start from a snapshot

S3_OPS = [
    ("insert", "t1", [(1, 1, 5, "a"), (2, 1, 9, "b"), (3, 2, -1, None), (4, 2, 7, "c"), (5, 3, 3, "a"),
                      (8, 0, 2, "b")]),
    ("insert", "t2", [(1, 1, 2, Decimal("1.50")), (2, 2, 8, None), (3, 3, 1, Decimal("-2.25")),
                      (4, 0, 6, Decimal("0.10"))]),
    ("insert", "t3", [(1, 4), (2, 5), (2, 5), (0, 1)]),
    ("flush",),
    ("sql", "DELETE FROM t1 WHERE id = 2", (0, 0)),  # the max of group 1
    ("sql", "DELETE FROM t1 WHERE v < 0", (0, 0)),  # the min of group 2
    ("insert", "t1", [(6, 1, 9, "b"), (1, 3, 4, "c")]),  # a new max; id 1 moves to group 3
    ("flush",),
    ("sql", "UPDATE t2 SET k = 1 WHERE id = 3", (0, 0)),
    ("sql", "DELETE FROM t3 WHERE v = 5", (0, 0)),
    ("sql", "UPDATE t1 SET v = v - 10 WHERE k = 3", (0, 0)),  # new minima
    ("flush",),
    ("sql", "DELETE FROM t1 WHERE k = 3", (0, 0)),  # a whole group goes
    ("sql", "UPDATE t1 SET v = NULL WHERE id = 6", (0, 0)),
    ("sql", "DELETE FROM t2 WHERE w > 5", (0, 0)),
    ("flush",),
    ("sql", "DELETE FROM t1", (0, 0)),  # everything: groups vanish, the global aggregate empties
    ("flush",),
    ("insert", "t1", [(7, 2, 1, "z"), (9, 1, 4, None)]),
    ("sql", "DELETE FROM t3", (0, 0)),
    ("flush",),
]


def test_views_on_an_s3_warehouse_match_duckdb_after_every_flush(s3, s3_url):
    run_workload(s3_url, S3_VIEWS, S3_OPS, S3_CREATE_AT)
    prefix = s3_url.split("/", 3)[3]
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    keys = [item["Key"][len(prefix) + 1:] for page in pages for item in page.get("Contents", [])]
    fresh = S3Store(s3_url, endpoint_url=s3.endpoint)
    state = log_of(fresh).refresh()
    for name in S3_VIEWS:  # the state really is in the bucket: in files of its own, or in packs
        listed = [f.key for files in manifests.load(fresh, name).state.values() for f in files]
        assert listed, name
        for key in listed:
            assert key in keys or state.packed.get(key) in keys, (name, key)
    assert any(k.startswith("log/") for k in keys)


# -- (c) a second connection and a second process ------------------------------------------------

SETUP_VIEWS = {name: S3_VIEWS[name] for name in ["join_agg", "base_agg", "on_view"]}


def _build(url: str):
    """A warehouse where the objects sit at different committed epochs, plus the oracle of its tables."""
    conn = dagster_rw.connect(url)
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for name, sql in SETUP_VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
    t1 = _values([(1, 1, 5, "a"), (2, 1, 9, "b"), (3, 2, -1, None), (4, 2, 7, "c")])
    t2 = _values([(1, 1, 2, Decimal("1.50")), (2, 2, 8, None)])
    conn.execute(f"INSERT INTO t1 VALUES {t1}")
    conn.execute(f"INSERT INTO t2 VALUES {t2}")
    oracle.upsert("t1", t1)
    oracle.upsert("t2", t2)
    conn.execute("FLUSH")
    conn.execute("DELETE FROM t1 WHERE id = 2")
    oracle.execute("DELETE FROM t1 WHERE id = 2")
    conn.barrier()
    conn.refresh("t1")  # t1 moves on; t2 and the views stay one epoch behind
    conn.execute("INSERT INTO t2 VALUES (3, 1, 4, 0.75)")  # durable, not yet in any epoch
    oracle.upsert("t2", "(3, 1, 4, 0.75)")
    return conn, oracle


def _contents(conn) -> dict:
    return {s["name"]: sorted(conn.execute(f"SELECT * FROM {s['name']}").fetchall(), key=repr)
            for s in conn.status()}


def _epochs(conn) -> dict:
    return {s["name"]: s["epoch"] for s in conn.status()}


def _check_views(conn, oracle):
    for name in SETUP_VIEWS:
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)


def test_second_connection_resumes_every_object_at_its_committed_epoch(s3_url):
    first, oracle = _build(s3_url)
    epochs = _epochs(first)
    assert epochs["t1"] > epochs["t2"] == epochs["join_agg"]  # the objects really are at different epochs
    second = dagster_rw.connect(s3_url)
    assert _epochs(second) == epochs
    assert _contents(second) == _contents(first)
    second.execute("INSERT INTO t1 VALUES (5, 2, 11, 'e')")
    oracle.upsert("t1", "(5, 2, 11, 'e')")
    second.execute("FLUSH")  # seals the first connection's staged insert too
    _check_views(second, oracle)
    _check_views(first, oracle)
    assert _epochs(first) == _epochs(second)
    assert len(set(_epochs(first).values())) == 1


CHILD = textwrap.dedent("""
    import json, os, sys
    import dagster_rw

    url, out = sys.argv[1], sys.argv[2]
    conn = dagster_rw.connect(url)

    def dump():
        epochs = {s["name"]: s["epoch"] for s in conn.status()}
        rows = {n: json.loads(json.dumps(conn.execute(f"SELECT * FROM {n}").fetchall(), default=str))
                for n in epochs}
        return {"epochs": epochs, "rows": rows}

    before = dump()
    conn.execute("INSERT INTO t1 VALUES (5, 2, 11, 'e')")
    conn.execute("DELETE FROM t1 WHERE id = 4")
    epoch = conn.flush()
    after = dump()
    with open(out, "w") as f:
        json.dump({"before": before, "after": after, "epoch": epoch, "cache_dir": conn.wh.store.cache_dir}, f)
""")


def _as_json(rows_by_name: dict) -> dict:
    return {n: sorted(map(tuple, json.loads(json.dumps(rows, default=str))), key=str)
            for n, rows in rows_by_name.items()}


def test_new_process_with_empty_cache_reads_the_s3_warehouse_and_continues(s3_url, tmp_path):
    conn, oracle = _build(s3_url)
    epochs_before, contents_before = _epochs(conn), _contents(conn)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child_tmp = tmp_path / "child-tmp"  # the child's cache and scratch: nothing to read but S3
    child_tmp.mkdir()
    out = tmp_path / "out.json"
    env = {**os.environ, "TMPDIR": str(child_tmp)}
    proc = subprocess.run([sys.executable, str(script), s3_url, str(out)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["cache_dir"].startswith(str(child_tmp))
    assert result["before"]["epochs"] == epochs_before
    assert _as_json(result["before"]["rows"]) == _as_json(contents_before)
    oracle.upsert("t1", "(5, 2, 11, 'e')")
    oracle.execute("DELETE FROM t1 WHERE id = 4")
    # the parent sees what the child committed, and it is right
    assert set(_epochs(conn).values()) == {result["epoch"]}
    assert _as_json(result["after"]["rows"]) == _as_json(_contents(conn))
    _check_views(conn, oracle)


def test_concurrent_steps_on_s3_one_commits_the_other_gets_commit_conflict(s3_url):
    outcome = race_steps_in_threads(s3_url, "ev_join", views=["ev_join"])
    assert outcome["conflicts"] == 1 and outcome["commits"] == 1


# -- what a small epoch asks of S3 ---------------------------------------------------------------

def _requests_per_epoch(url: str, n_views: int, epochs: int) -> tuple[Counter, Counter]:
    """The S3 calls an epoch of one small INSERT and a FLUSH makes, on average, through the
    connection's own boto3 client, once the pipeline of `n_views` views is warm: by operation,
    and apart from them the housekeeping by kind (the log's checkpoints and what they delete in
    bulk; merges of state files uploaded alone); and the merged state files the views list, those
    in a pack apart."""
    conn = dagster_rw.connect(url, engine="duckdb", gc_grace_seconds=3600)
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    conn.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
    conn.execute("INSERT INTO d VALUES " + ", ".join(f"({k}, 'n{k % 3}')" for k in range(5)))
    conn.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {i % 5}, {i})" for i in range(50)))
    conn.execute("CREATE MATERIALIZED VIEW v0 AS SELECT d.name, count(*) AS n FROM t JOIN d ON t.k = d.k "
                 "GROUP BY d.name")
    for i in range(1, n_views):
        conn.execute(f"CREATE MATERIALIZED VIEW v{i} AS SELECT k % {i + 1} AS g, sum(v) AS s FROM t "
                     f"GROUP BY k % {i + 1}")
    conn.execute("FLUSH")
    calls: Counter = Counter()
    housekeeping: Counter = Counter()

    def count(params, model, **_):
        key = params.get("Key", "")
        if model.name == "DeleteObjects" or "checkpoint" in key:
            housekeeping.update(["checkpoint"])
        elif "/objects/" in key:
            housekeeping.update(["merge"])
        else:
            calls.update([model.name])

    conn.wh.store.client.meta.events.register("before-parameter-build.s3", count)
    for e in range(epochs + 1):
        if e == 1:  # the first epoch warms up
            calls.clear()
            housekeeping.clear()
        conn.execute(f"INSERT INTO t VALUES ({e}, {e % 5}, {100 + e})")
        conn.execute("FLUSH")
    per_epoch = Counter({op: n / epochs for op, n in calls.items()}), Counter(
        {kind: n / epochs for kind, n in housekeeping.items()})
    merged = [f.key for s in conn.status() if s["name"].startswith("v")
              for files in manifests.load(conn.wh.store, s["name"]).state.values() for f in files
              if f.epoch_to - f.epoch_from > 1]
    packed = [key for key in merged if conn.wh.store.locate_packed(key) is not None]
    conn.close()  # (which commits the merges finished since the last FLUSH: not an epoch's requests)
    return (*per_epoch, len(merged), len(packed))


def test_a_small_epoch_makes_five_requests_however_many_views(s3):
    """Steady state: no LIST; the INSERT puts its rows and the log entry that accepts them; the
    FLUSH looks for other processes' entries (one GET), puts one pack of every file its steps
    wrote and one log entry holding its barrier and committing every object. The log's checkpoints (its state
    whole, every 50 entries, and a bulk delete of applied batches) add a fraction per epoch.
    Merges of state files (every `compact_max_files` epochs per state table) go into the pack of
    the FLUSH whose step adopts them: no request of their own."""
    for n in (3, 13):
        calls, housekeeping, merged, packed = _requests_per_epoch(
            s3.url(BUCKET, f"req-{n}-{uuid.uuid4().hex[:6]}"), n, 20)
        assert calls == Counter({"PutObject": 4, "GetObject": 1}), (n, calls)
        assert housekeeping["checkpoint"] < 0.5, (n, housekeeping)
        assert housekeeping["merge"] == 0, (n, housekeeping)
        assert merged >= n and packed == merged, (n, merged, packed)  # the views merged, into packs
