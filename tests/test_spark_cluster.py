"""The Spark path on a real standalone cluster whose worker sees a /tmp of its own (as a worker on
another host would): executors read and write an S3 warehouse themselves (a shared folder, read by
Spark's own reader, is the warehouse of test_spark_engine and test_spark_connect), and a step's
outputs are runs of files by key range.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import cluster_workload
import pyarrow as pa
import pytest

import dagster_rw
from dagster_rw.engine.base import ParquetScan

pytestmark = pytest.mark.spark

BUCKET = "cluster"
SECRET = "s3cr3t-" + uuid.uuid4().hex[:8]  # moto takes any key; this one must never show


@pytest.fixture(scope="module")
def bucket(s3_server):
    s3_server.create_bucket(BUCKET)
    return BUCKET


def _assert_runs_by_key_range(files: list[dict], what: str) -> None:
    """More than one file, sharing a run, with disjoint key ranges in key order."""
    runs: dict[str, list[dict]] = {}
    for f in files:
        if f.get("run"):
            runs.setdefault(f["run"], []).append(f)
    assert runs, f"{what}: no run of several files in {files}"
    for run in runs.values():
        assert len(run) > 1, what
        for a, b in zip(run, run[1:]):
            assert a["key_max"] < b["key_min"], f"{what}: key ranges overlap or are out of order: {a} {b}"


def test_the_worker_sees_a_tmp_of_its_own(spark, spark_cluster):
    if not spark_cluster.private_tmp:
        pytest.skip("unshare -m is not permitted here (needs root): the worker shares the driver's /tmp")
    marker = f"/tmp/dagster_rw_driver_{uuid.uuid4().hex}"
    open(marker, "w").close()
    try:
        def probe(batches):
            import os as executor_os

            for _ in batches:
                yield pa.RecordBatch.from_pylist([{"seen": executor_os.path.exists(marker)}])

        assert spark.range(0, 2, 1, 2).mapInArrow(probe, "seen boolean").collect() == [(False,), (False,)]
    finally:
        os.unlink(marker)


def test_executors_run_the_shipped_package_with_pyarrow_alone(spark, tmp_path):
    """The tasks import dagster_rw from the zip the session shipped (not from this checkout), and
    reading and writing warehouse files loads neither DuckDB nor sqlglot there."""
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine="spark")
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn.execute("INSERT INTO t VALUES (1, 10), (2, 20)")
    conn.execute("FLUSH")
    engine = conn.wh.spark_engine()
    m = conn.wh.manifest("t")
    schema = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("_file", pa.int64())])
    scan = ParquetScan(tuple(f.key for f in m.state["output"]), schema, conn.wh.store, tag="_file")
    assert sorted(engine.scan(scan).select("id", "v").collect()) == [(1, 10), (2, 20)]
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(dagster_rw.__file__)))

    def probe(batches):
        import sys as executor_sys

        import dagster_rw.storage.executor_io as io

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{
                "origin": io.__file__, "duckdb": "duckdb" in executor_sys.modules,
                "sqlglot": "sqlglot" in executor_sys.modules}])

    (origin, duck, glot), = spark.range(0, 1, 1, 1).mapInArrow(probe, "origin string, duckdb boolean, "
                                                                       "sqlglot boolean").collect()
    assert ".zip" in origin and not origin.startswith(checkout), origin
    assert not duck and not glot


def test_differential_workload_on_the_cluster_with_an_s3_warehouse(spark, bucket, s3_server):
    url = f"s3://{bucket}/wh-{uuid.uuid4().hex[:8]}"
    conn = dagster_rw.connect(url, spark=spark, engine="spark", spark_file_bytes=4096,
                              aws_access_key_id="testing", aws_secret_access_key=SECRET)
    result = cluster_workload.run(conn, orders=400, epochs=2)
    assert result["lagged_epochs"] == 2
    # the backfill and the large steps are split over several files, by key range
    _assert_runs_by_key_range(result["files"]["orders"]["output"], "orders")
    assert any(len(files) > 1 for files in result["files"]["sales"].values())
    # the driver never downloaded a state or change file: executors read them from S3
    cache = conn.wh.store.cache_dir
    downloaded = [os.path.relpath(os.path.join(d, n), cache) for d, _, names in os.walk(cache) for n in names
                  if os.path.relpath(d, cache).startswith("objects")]
    assert downloaded == []
    # the secret reaches the tasks, never a plan or a description of the warehouse
    files = conn.wh.store.warehouse_files()
    assert files.secret_key == SECRET and SECRET not in repr(files)
    m = conn.wh.manifest("orders")
    scan = ParquetScan(tuple(f.key for f in m.state["output"]), pa.schema([("id", pa.int32())]), conn.wh.store)
    df = conn.wh.spark_engine().scan(scan)
    plan = df._jdf.queryExecution().toString()
    assert SECRET not in plan and "testing" not in plan


CONNECT_CLIENT = textwrap.dedent('''
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    sys.path.insert(0, {tests!r})
    import dagster_rw, cluster_workload

    conn = dagster_rw.connect({warehouse!r}, spark={url!r}, engine="spark", spark_file_bytes=4096,
                              s3_endpoint_url={endpoint!r})
    result = cluster_workload.run(conn, seed=5, orders=300, epochs=2)
    print(json.dumps(result))
''')


def test_differential_workload_over_spark_connect_with_an_s3_warehouse(tmp_path, spark_connect_url, bucket,
                                                                       s3_server):
    """The Connect server's driver has a /tmp of its own too; the client is another process."""
    script = tmp_path / "client.py"
    script.write_text(CONNECT_CLIENT.format(tests=os.path.dirname(__file__), url=spark_connect_url,
                                            warehouse=f"s3://{bucket}/wh-{uuid.uuid4().hex[:8]}",
                                            endpoint=s3_server.endpoint))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, **s3_server.env))
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["lagged_epochs"] == 2
    _assert_runs_by_key_range(result["files"]["orders"]["output"], "orders over Spark Connect")


def test_a_spark_step_broadcasts_a_small_change_and_shuffles_a_large_one(spark, tmp_path):
    """The choice is by the change's size (manifests tell it, no job needed), counting the rows of
    a deferred join side the step builds; status and the step's figures say which was made; the
    view is right either way."""
    from oracle import Oracle, assert_same

    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine="spark", spark_broadcast_rows=50)
    oracle = Oracle()
    view = "SELECT d.name, count(*) AS n, max(t.v) AS mx FROM t JOIN d ON t.k = d.k GROUP BY d.name"
    for sql in ("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)"):
        conn.execute(sql)
        oracle.execute(sql)
    rows = ", ".join(f"({i}, {i % 9}, {i * 7 % 31})" for i in range(200))
    names = ", ".join(f"({k}, 'n{k % 4}')" for k in range(9))
    for table, values in (("t", rows), ("d", names)):
        conn.execute(f"INSERT INTO {table} VALUES {values}")
        oracle.upsert(table, values)
    conn.execute("FLUSH")
    plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN CREATE MATERIALIZED VIEW m AS {view}").fetchall())
    assert "a change of at most 50 rows is broadcast" in plan
    conn.execute(f"CREATE MATERIALIZED VIEW m AS {view}")
    oracle.execute(f"CREATE VIEW m AS {view}")
    assert conn.wh.status(["m"])[0]["spark_joins"] == "shuffle"  # the backfill reads 209 rows
    assert_same(conn.execute("SELECT * FROM m").fetchall(), oracle.rows("SELECT * FROM m"), "m after its backfill")
    # the backfill deferred t's join state (operators/join.py) and the MAX's value counts
    # (operators/aggregate/extremes.py): an epoch of d, which takes rows away, builds both, reading t whole
    for sql, joins in (("INSERT INTO t VALUES (500, 2, 9)", "broadcast"), ("DELETE FROM d WHERE k = 4", "shuffle"),
                       ("UPDATE d SET name = 'n0' WHERE k = 5", "broadcast"),
                       ("UPDATE t SET v = 100 WHERE id = 3", "broadcast")):
        conn.execute(sql)
        oracle.execute(sql)
        conn.execute("FLUSH")
        assert conn.wh.status(["m"])[0]["spark_joins"] == joins, sql
        assert_same(conn.execute("SELECT * FROM m").fetchall(), oracle.rows("SELECT * FROM m"), f"m after {sql}")


def test_a_large_change_is_hash_joined_in_partitions_of_bounded_size(spark, tmp_path, monkeypatch):
    """A shuffled hash join keeps each partition of the change whole in one task's memory: a step
    whose change is large runs its joins with enough shuffle partitions that each holds at most
    HASH_ROWS_PER_PARTITION change rows, then gives the session its own setting back. A broadcast
    (small) change leaves the setting alone. The view is right either way."""
    from oracle import Oracle, assert_same

    from dagster_rw.engine import spark as spark_engine

    monkeypatch.setattr(spark_engine, "HASH_ROWS_PER_PARTITION", 20)
    seen = []  # (join strategy, shuffle partitions) of each statement a step ran
    original = spark_engine.SparkEngine.sql

    def sql(self, *args, **kwargs):
        seen.append((self.join_strategy, int(self.spark.conf.get("spark.sql.shuffle.partitions"))))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(spark_engine.SparkEngine, "sql", sql)
    own = spark.conf.get("spark.sql.shuffle.partitions")
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine="spark", spark_broadcast_rows=50)
    oracle = Oracle()
    view = "SELECT d.name, count(*) AS n, max(t.v) AS mx FROM t JOIN d ON t.k = d.k GROUP BY d.name"
    for stmt in ("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)",
                 f"CREATE MATERIALIZED VIEW m AS {view}"):
        conn.execute(stmt)
        oracle.execute(stmt.replace("MATERIALIZED ", ""))
    names = ", ".join(f"({k}, 'n{k % 4}')" for k in range(9))
    conn.execute(f"INSERT INTO d VALUES {names}")
    oracle.upsert("d", names)
    for epoch, ids in enumerate((range(300), range(0, 300, 2), range(5))):
        rows = ", ".join(f"({i}, {(i + epoch) % 9}, {(i * 7 + epoch) % 31})" for i in ids)
        conn.execute(f"INSERT INTO t VALUES {rows}")
        oracle.upsert("t", rows)
        seen.clear()
        conn.execute("FLUSH")
        hashed = [n for strategy, n in seen if strategy == "shuffle_hash"]
        broadcast = [n for strategy, n in seen if strategy == "broadcast"]
        if len(ids) > 50:  # 300 and 150 rows staged (the view reads more: an update is two changes)
            assert hashed and min(hashed) > int(own) and max(hashed) >= -(-len(ids) // 20), (epoch, seen)
        else:
            assert broadcast and not hashed and set(broadcast) == {int(own)}, (epoch, seen)
        assert spark.conf.get("spark.sql.shuffle.partitions") == own
        assert_same(conn.execute("SELECT * FROM m").fetchall(), oracle.rows("SELECT * FROM m"), f"m after epoch {epoch}")
    conn.close()


def test_spark_tasks_read_files_packed_by_small_in_process_flushes(spark, bucket):
    """On S3, the small FLUSHes of an in-process connection pack their files; a Spark step of
    another connection reads them, its tasks fetching their byte ranges of the packs (the driver
    downloads none of them), and gives the in-process answer."""
    url = f"s3://{bucket}/packed-{uuid.uuid4().hex[:8]}"
    small = dagster_rw.connect(url, engine="duckdb", aws_access_key_id="testing", aws_secret_access_key=SECRET)
    small.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT)")
    for i in range(4):
        small.execute(f"INSERT INTO t VALUES ({3 * i}, {i % 2}, {i}), ({3 * i + 1}, 1, {10 * i}), ({3 * i + 2}, 0, 5)")
        small.execute("FLUSH")
    state = small.wh.store._log.current()
    assert all(f.key in state.packed for f in small.wh.manifest("t").state["output"])
    on_spark = dagster_rw.connect(url, spark=spark, engine="spark", aws_access_key_id="testing",
                                  aws_secret_access_key=SECRET)
    on_spark.execute("CREATE MATERIALIZED VIEW s AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g")
    small.execute("DELETE FROM t WHERE id = 1")
    small.execute("INSERT INTO t VALUES (100, 1, 7)")
    small.wh.barrier()
    small.refresh("t")  # a changelog file of t's own; the next FLUSH packs t's files again
    small.execute("INSERT INTO t VALUES (101, 0, 8)")
    small.barrier()
    on_spark.refresh("t")
    on_spark.refresh("s")
    expected = small.execute("SELECT g, count(*), sum(v) FROM t GROUP BY g").fetchall()
    assert sorted(on_spark.execute("SELECT * FROM s").fetchall()) == sorted(expected)
    cache = on_spark.wh.store.cache_dir
    assert not any(n.endswith(".pack") for _, _, names in os.walk(cache) for n in names)
