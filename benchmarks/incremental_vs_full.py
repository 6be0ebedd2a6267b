"""Incremental FLUSH versus recomputing the view in batch on Spark, at two data sizes.

The view joins a large fact table with a dimension table and aggregates with a MAX:

    SELECT i.category, count(*), sum(v.length), max(v.length)
    FROM visit v JOIN info i ON v.product = i.product GROUP BY i.category

For each size: load the data, create the view, then change 0.1% of the visits (random rows
replaced by rows with new random values, so nearly every one moves to another product and category)
and time the FLUSH that makes the change visible: the median of five, after one such epoch that
builds the process's key indexes (reported separately). In the same process, on the same data, time
Spark recomputing the same query over the table's Parquet files (warm: the best of three runs).
Prints both times, their ratio, and the FLUSH growth between sizes.

    python benchmarks/incremental_vs_full.py            # 5M and 50M rows
    python benchmarks/incremental_vs_full.py 1000000    # other sizes
"""
from __future__ import annotations

import gc
import os

# the benchmark's state (tens of millions of rows) should fit the decoded-file cache
os.environ.setdefault("DAGSTER_RW_SST_CACHE_BYTES", str(12 << 30))

import shutil
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import pyarrow as pa

warnings.filterwarnings("ignore")

import dagster_rw
from dagster_rw.engine.spark import local_session

FIXED_CHANGE = 5_000
RUNS = 5  # FLUSHes per measurement; the median is quoted (the first also builds the lookup indexes)
PRODUCTS = 100_000
CATEGORIES = 1_000
VIEW = ("SELECT i.category, count(*) AS visits, sum(v.length) AS total, max(v.length) AS longest "
        "FROM visit v JOIN info i ON v.product = i.product GROUP BY i.category")


def visits(rng, ids: np.ndarray) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "product": pa.array(rng.integers(0, PRODUCTS, len(ids)), pa.int32()),
        "uid": pa.array(rng.integers(0, 1_000_000, len(ids)), pa.int32()),
        "length": pa.array(rng.integers(1, 3_600, len(ids)), pa.int32()),
    })


def load(conn, rows: int, rng) -> None:
    conn.execute("CREATE TABLE info (product INT PRIMARY KEY, category INT)")
    conn.execute("CREATE TABLE visit (id BIGINT PRIMARY KEY, product INT, uid INT, length INT)")
    conn.insert("info", pa.table({"product": pa.array(np.arange(PRODUCTS), pa.int32()),
                                  "category": pa.array(np.arange(PRODUCTS) % CATEGORIES, pa.int32())}))
    chunk = 5_000_000
    for start in range(0, rows, chunk):
        conn.insert("visit", visits(rng, np.arange(start, min(rows, start + chunk))))
    conn.flush()
    conn.execute(f"CREATE MATERIALIZED VIEW longest_visit AS {VIEW}")


def spark_recompute(spark, conn) -> float:
    """The view's query run in batch by Spark over the tables' current Parquet files."""
    wh = conn.wh
    for name in ("visit", "info"):
        m = wh.manifest(name)
        paths = [wh.store.local_path(f.key) for f in m.state["output"]]
        spark.read.parquet(*paths).filter("NOT _del").createOrReplaceTempView(name)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        spark.sql(VIEW).collect()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(rows: int, spark, root: str) -> dict:
    rng = np.random.default_rng(rows)
    wh = os.path.join(root, f"wh_{rows}")
    shutil.rmtree(wh, ignore_errors=True)
    # setup: the bulk load runs in-process (DuckDB), which loads faster than a local Spark here
    loader = dagster_rw.connect(wh, engine="duckdb")
    t0 = time.perf_counter()
    load(loader, rows, rng)
    load_s = time.perf_counter() - t0
    loader.close()
    # the load left up to gigabytes of dirty pages; written back while epochs run, they would
    # stall each commit's fsync: flush them first, so the figures are an epoch's own cost
    os.sync()
    gc.collect()
    conn = dagster_rw.connect(wh, spark=spark)  # engine 'auto': each step picks its path by size
    conn.flush()
    change = max(1, rows // 1000)
    # one epoch of the same size first: a process builds its in-memory key indexes (sorted key
    # arrays, sparse indexes) on its first lookups; reported, not counted in the median
    conn.insert("visit", visits(rng, rng.choice(rows, change, replace=False)))
    t0 = time.perf_counter()
    conn.flush()
    warmup = time.perf_counter() - t0
    flushes = []
    for _ in range(RUNS):
        ids = rng.choice(rows, change, replace=False)
        conn.insert("visit", visits(rng, ids))  # same keys: each row is replaced (an update)
        t0 = time.perf_counter()
        conn.flush()
        flushes.append(time.perf_counter() - t0)
    flush = statistics.median(flushes)
    fixed = []  # the same-sized change at every data size: the cost should not follow the data
    for _ in range(RUNS):
        conn.insert("visit", visits(rng, rng.choice(rows, FIXED_CHANGE, replace=False)))
        t0 = time.perf_counter()
        conn.flush()
        fixed.append(time.perf_counter() - t0)
    conn.compact("visit")  # one file per table, so Spark reads the rows without merging versions
    conn.compact("info")
    full = spark_recompute(spark, conn)
    got = sorted(conn.execute("SELECT * FROM longest_visit").fetchall())
    want = sorted(tuple(r) for r in spark.sql(VIEW).collect())
    assert got == want, "the incremental view differs from Spark's batch answer"
    step = {s["name"]: s.get("step_seconds") for s in conn.status()}
    conn.close()
    return {"rows": rows, "change": change, "load_s": load_s, "flush_s": flush, "flushes": flushes,
            "warmup_s": warmup,
            "fixed_s": statistics.median(fixed),
            "spark_full_s": full, "ratio": full / flush, "steps": step}


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [5_000_000, 50_000_000]
    spark = local_session(conf={"spark.driver.memory": "8g"})
    root = os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="rw_bench_")
    results = []
    for rows in sizes:
        r = measure(rows, spark, root)
        results.append(r)
        print(f"rows={r['rows']:>11,}  change={r['change']:>7,}  load={r['load_s']:7.1f}s  "
              f"FLUSH={r['flush_s']:.3f}s (runs: {', '.join(f'{x:.3f}' for x in r['flushes'])})  "
              f"Spark full recompute={r['spark_full_s']:.3f}s  ratio={r['ratio']:.1f}x", flush=True)
        print(f"    first FLUSH of this process (builds the key indexes): {r['warmup_s']:.3f}s; "
              f"FLUSH of a fixed {FIXED_CHANGE:,}-row change: {r['fixed_s']:.3f}s; "
              f"step seconds per object (last FLUSH): {r['steps']}", flush=True)
    if len(results) >= 2:
        growth = results[-1]["flush_s"] / results[0]["flush_s"]
        print(f"FLUSH growth from {results[0]['rows']:,} to {results[-1]['rows']:,} rows: {growth:.2f}x "
              f"(the change grows {results[-1]['change'] / results[0]['change']:.0f}x with it); with a fixed "
              f"{FIXED_CHANGE:,}-row change: {results[-1]['fixed_s'] / results[0]['fixed_s']:.2f}x")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
