"""The Spark path at scale: a backfill and a large epoch against Spark's own batch query, the
driver's memory meanwhile, and (optionally) the same on a standalone cluster with an S3 warehouse.

The view is incremental_vs_full.py's join + aggregate with a MAX:

    SELECT i.category, count(*), sum(v.length), max(v.length)
    FROM visit v JOIN info i ON v.product = i.product GROUP BY i.category

Per size, on a local Spark (`local[2]`, driver heap `--driver-memory`, 1g by default) and a local
warehouse: load the visits in 5M-row inserts and apply them in one FLUSH (a large table step on
Spark), CREATE the view (its backfill), then change 10% of the visits (rows replaced by new random
rows, by key) and FLUSH (a large epoch through the join and the aggregate), then change one product's
category and FLUSH: the first change of `info`, the epoch that builds the visits' join state, which
the backfill defers (`deferred_join_state`; `--eager-join-state` builds it in the backfill instead).
In the same process,
Spark runs the view's query in batch over the same tables' files (warm: the best of three), and
once the grouping the MAX's state needs (the count of each category's lengths), the floor of any
backfill that builds that state. Prints
each time, the ratios, the number of files each step wrote, and the driver's peak memory: the
Python process's and the JVM's resident set (VmHWM) and the JVM heap's peak use.

    python benchmarks/spark_scale.py                        # 50M and 200M rows
    python benchmarks/spark_scale.py 2000000                # other sizes
    python benchmarks/spark_scale.py --cluster-s3 20000000  # on a private-/tmp cluster, S3 warehouse
    python benchmarks/spark_scale.py --backfill-only 200000000  # the load and the backfill alone

`--cluster-s3 N` starts a standalone cluster (its worker with a /tmp of its own, as the tests do)
and moto's S3 server, and measures the backfill and the 10% epoch of N rows there.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import dagster_rw
from _common import _suite_module, tree_cpu_seconds
from visit_data import VALUE_COUNTS, VIEW, info, visits
from dagster_rw.engine.spark import local_session

CHUNK = 5_000_000


class DriverMemory:
    """The driver's peak memory: this process's and the JVM's resident sets, the JVM heap's peak
    use (sampled every 0.2 s from the JVM's memory pools)."""

    def __init__(self, spark):
        self.spark = spark
        self.jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
        self.heap_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        runtime = self.spark._jvm.java.lang.Runtime.getRuntime()
        while not self._stop.wait(0.2):
            try:
                self.heap_peak = max(self.heap_peak, runtime.totalMemory() - runtime.freeMemory())
            except Exception:  # noqa: BLE001 - the gateway is closing
                return

    def report(self) -> str:
        with open(f"/proc/{self.jvm_pid}/status") as f:
            hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))
        max_heap = self.spark._jvm.java.lang.Runtime.getRuntime().maxMemory()
        python = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return (f"driver peak memory: Python RSS {python / 2**20:.0f} MB, JVM RSS {hwm / 2**20:.0f} MB, "
                f"JVM heap used {self.heap_peak / 2**20:.0f} MB of {max_heap / 2**20:.0f} MB")

    def stop(self) -> None:
        self._stop.set()


def spark_batch(spark, conn) -> tuple[float, float]:
    """The view's query run in batch by Spark over the tables' current files (newest versions):
    the best wall-clock time of three runs, and the CPU seconds of one."""
    register(conn)
    times, cpu = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), tree_cpu_seconds()
        spark.sql(VIEW).collect()
        times.append(time.perf_counter() - t0)
        cpu.append(tree_cpu_seconds() - c0)
    return min(times), min(cpu)


def spark_value_counts(spark) -> tuple[float, float]:
    """What the view's MAX keeps beside its result, as Spark's own batch query over the same
    registered tables: the count of each (category, length) pair of the joined rows (the grouping
    a backfill cannot avoid while it builds that state), written nowhere. Wall-clock and CPU
    seconds of one run."""
    t0, c0 = time.perf_counter(), tree_cpu_seconds()
    spark.sql(VALUE_COUNTS).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0, tree_cpu_seconds() - c0


class Phase:
    """Wall-clock and CPU seconds (this process and its descendants) of a `with` block."""

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), tree_cpu_seconds()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.t0, tree_cpu_seconds() - self.c0


def files_of(conn, name: str) -> str:
    m = conn.wh.manifest(name)
    return ", ".join(f"{table} {len(files)}" for table, files in sorted(m.state.items()))


def run_size(spark, warehouse: str, rows: int, backfill_only: bool = False, **options) -> None:
    rng = np.random.default_rng(rows)
    conn = dagster_rw.connect(warehouse, spark=spark, engine="spark", **options)
    conn.execute("CREATE TABLE info (product INT PRIMARY KEY, category INT)")
    conn.execute("CREATE TABLE visit (id BIGINT PRIMARY KEY, product INT, uid INT, length INT)")
    conn.insert("info", info())
    t0 = time.perf_counter()
    for start in range(0, rows, CHUNK):
        conn.insert("visit", visits(rng, np.arange(start, min(rows, start + CHUNK))))
    staged = time.perf_counter() - t0
    with Phase() as load:
        conn.flush()
    with Phase() as backfill:
        conn.execute(f"CREATE MATERIALIZED VIEW longest_visit AS {VIEW}")
    batch, batch_cpu = spark_batch(spark, conn)
    print(f"rows={rows:>11,}  staged in {staged:.1f}s; table FLUSH on Spark {load.wall:.1f}s (files: "
          f"{files_of(conn, 'visit')}); backfill {backfill.wall:.1f}s (files: {files_of(conn, 'longest_visit')}); "
          f"Spark batch query {batch:.1f}s; backfill / batch = {backfill.wall / batch:.2f}x", flush=True)
    print(f"    CPU seconds: table FLUSH {load.cpu:.1f}, backfill {backfill.cpu:.1f}, batch query {batch_cpu:.1f}; "
          f"backfill / batch = {backfill.cpu / batch_cpu:.2f}x", flush=True)
    counts, counts_cpu = spark_value_counts(spark)
    print(f"    Spark batch query of MAX's value counts alone (GROUP BY category, length) {counts:.1f}s, "
          f"{counts_cpu:.1f} CPU s: {counts / batch:.2f}x the view's batch query ({counts_cpu / batch_cpu:.2f}x in CPU)",
          flush=True)
    if backfill_only:
        check(spark, conn, rows)
        conn.close()
        return
    change = rows // 10
    conn.insert("visit", visits(rng, rng.choice(rows, change, replace=False)))
    with Phase() as epoch:
        conn.flush()
    batch, batch_cpu = spark_batch(spark, conn)
    print(f"    10% epoch ({change:,} rows replaced) {epoch.wall:.1f}s; Spark batch query {batch:.1f}s; "
          f"epoch / batch = {epoch.wall / batch:.2f}x; CPU seconds {epoch.cpu:.1f} / {batch_cpu:.1f} = "
          f"{epoch.cpu / batch_cpu:.2f}x", flush=True)
    check(spark, conn, rows)
    conn.execute("UPDATE info SET category = category + 1 WHERE product = 1")
    with Phase() as other:
        conn.flush()
    print(f"    first change of info (one row; builds the visits' join state when the backfill deferred it) "
          f"{other.wall:.1f}s, {other.cpu:.1f} CPU s (files: {files_of(conn, 'longest_visit')})", flush=True)
    check(spark, conn, rows)
    conn.close()


def register(conn) -> None:
    """The tables' current files (newest versions) as Spark's temporary views of their names."""
    from dagster_rw.runtime.step import output_table

    engine = conn.wh.spark_engine()
    for name in ("visit", "info"):
        obj = conn.wh.catalog().get(name)
        engine.sql("SELECT * FROM s", s=output_table(conn.wh, obj, conn.wh.manifest(name), engine)
                   .read_all()).createOrReplaceTempView(name)


def check(spark, conn, rows: int) -> None:
    """The view equals Spark's batch answer over the tables' newest files, and counts every visit
    (each visits a product of `info`)."""
    register(conn)
    got = sorted(conn.execute("SELECT * FROM longest_visit").fetchall())
    want = sorted(tuple(r) for r in spark.sql(VIEW).collect())
    assert got == want, "the view differs from Spark's batch answer"
    assert sum(r[1] for r in got) == rows, f"the view counts {sum(r[1] for r in got):,} visits, not {rows:,}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--cluster-s3", type=int, default=None, metavar="ROWS")
    parser.add_argument("--eager-join-state", action="store_true", help="build every join side in the backfill")
    parser.add_argument("--eager-value-counts", action="store_true", help="build MAX's value counts in the backfill")
    parser.add_argument("--backfill-only", action="store_true", help="stop after the backfill and its batch queries")
    args = parser.parse_args(argv)
    options = {**({"deferred_join_state": False} if args.eager_join_state else {}),
               **({"deferred_value_counts": False} if args.eager_value_counts else {})}
    root = os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="rw_spark_scale_", dir="/var/tmp")
    if args.cluster_s3:
        return cluster_s3(args.cluster_s3, root, args.driver_memory, options)
    spark = local_session(conf={"spark.driver.memory": args.driver_memory, "spark.local.dir": root})
    memory = DriverMemory(spark)
    for rows in args.sizes or [50_000_000, 200_000_000]:
        wh = os.path.join(root, f"wh_{rows}")
        shutil.rmtree(wh, ignore_errors=True)
        run_size(spark, wh, rows, backfill_only=args.backfill_only, **options)
        shutil.rmtree(wh, ignore_errors=True)
        print("    " + memory.report(), flush=True)
    memory.stop()
    shutil.rmtree(root, ignore_errors=True)
    return 0


def cluster_s3(rows: int, root: str, driver_memory: str, options: dict) -> int:
    MotoS3 = _suite_module("s3_server").MotoS3
    SparkCluster = _suite_module("spark_cluster").SparkCluster

    with SparkCluster() as cluster, MotoS3() as s3:
        s3.create_bucket("bench")
        spark = local_session(master=cluster.master_url, conf={
            "spark.driver.memory": driver_memory, "spark.cores.max": "2", "spark.executor.memory": "4g",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
        memory = DriverMemory(spark)
        print(f"standalone cluster, worker with its own /tmp: {cluster.private_tmp}; warehouse on moto's S3",
              flush=True)
        run_size(spark, "s3://bench/wh", rows, s3_endpoint_url=s3.endpoint, **options)
        print("    " + memory.report(), flush=True)
        memory.stop()
        spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
