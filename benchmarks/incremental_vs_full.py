"""Incremental FLUSH versus recomputing the view in batch on Spark, at two data sizes.

The view joins a large fact table with a dimension table and aggregates with a MAX:

    SELECT i.category, count(*), sum(v.length), max(v.length)
    FROM visit v JOIN info i ON v.product = i.product GROUP BY i.category

Each size gets its own warehouse, loaded first; then the FLUSHes of the sizes alternate in one
process, so a slow spell of this shared machine hits every size alike and the growth between sizes is
a ratio measured side by side. Per size: change 0.1% of the visits (random rows replaced by rows
with new random values, so nearly every one moves to another product and category) and time the
FLUSH that makes the change visible: the median of fifteen, after one such epoch that builds the
process's key indexes (reported separately); then the median of five with a fixed 5,000-row change;
then a sustained run of 0.1% epochs, long enough for state files to be merged (in the background),
whose mean, 90th percentile and maximum are printed. In the same process, on the same data, time
Spark recomputing the same query over the table's Parquet files (warm: the best of three runs).
Prints both times, their ratio, and the FLUSH growth between sizes.

    python benchmarks/incremental_vs_full.py            # 5M and 50M rows
    python benchmarks/incremental_vs_full.py 1000000    # other sizes
    python benchmarks/incremental_vs_full.py --write-docs   # the table into docs/performance.md
"""
from __future__ import annotations

import argparse
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

warnings.filterwarnings("ignore")

import dagster_rw
from dagster_rw.engine.spark import local_session
from _common import (add_docs_arguments, best_of, check_docs, command, figures_block, load_average,
                     markdown_table, write_docs)
from visit_data import VIEW, info, visits

FIXED_CHANGE = 5_000
RUNS = 15  # 0.1% FLUSHes per size; the median is quoted
FIXED_RUNS = 5  # FLUSHes of the fixed change per size
SUSTAINED = 40  # further 0.1% FLUSHes per size, through state-file merges


def load(conn, rows: int, rng) -> None:
    conn.execute("CREATE TABLE info (product INT PRIMARY KEY, category INT)")
    conn.execute("CREATE TABLE visit (id BIGINT PRIMARY KEY, product INT, uid INT, length INT)")
    conn.insert("info", info())
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
    return best_of(lambda: spark.sql(VIEW).collect())


class Size:
    """One data size: its warehouse, connection and measurements."""

    def __init__(self, rows: int, spark, root: str):
        self.rows, self.rng = rows, np.random.default_rng(rows)
        self.change = max(1, rows // 1000)
        wh = os.path.join(root, f"wh_{rows}")
        shutil.rmtree(wh, ignore_errors=True)
        # setup: the bulk load runs in-process (DuckDB), which loads faster than a local Spark here
        loader = dagster_rw.connect(wh, engine="duckdb")
        t0 = time.perf_counter()
        load(loader, rows, self.rng)
        self.load_s = time.perf_counter() - t0
        loader.close()
        # the load left up to gigabytes of dirty pages; written back while epochs run, they would
        # stall each commit's fsync: flush them first, so the figures are an epoch's own cost
        os.sync()
        self.conn = dagster_rw.connect(wh, spark=spark)  # engine 'auto': each step picks its path by size
        self.conn.flush()
        self.times: dict[str, list[float]] = {"flush": [], "fixed": [], "sustained": []}

    def flush(self, rows: int) -> float:
        ids = self.rng.choice(self.rows, rows, replace=False)
        self.conn.insert("visit", visits(self.rng, ids))  # same keys: each row is replaced (an update)
        gc.collect()
        t0 = time.perf_counter()
        self.conn.flush()
        return time.perf_counter() - t0

    def finish(self, spark) -> None:
        conn = self.conn
        conn.compact("visit")  # one file per table, so Spark reads the rows without merging versions
        conn.compact("info")
        self.full = spark_recompute(spark, conn)
        got = sorted(conn.execute("SELECT * FROM longest_visit").fetchall())
        want = sorted(tuple(r) for r in spark.sql(VIEW).collect())
        assert got == want, "the incremental view differs from Spark's batch answer"
        conn.close()


def markdown(runs: list[Size], warmup: dict[int, float]) -> str:
    """The figures main() prints, as a table for the docs."""
    rows = []
    for r in runs:
        sustained = sorted(r.times["sustained"])
        p90 = sustained[int(0.9 * len(sustained))]
        rows.append([f"{r.rows:,}", f"{r.change:,}", f"{warmup[r.rows]:.3f} s", f"{r.flush_s:.3f} s",
                     f"{r.fixed_s:.3f} s", f"{statistics.mean(sustained):.3f} s / {p90:.3f} s / {sustained[-1]:.3f} s",
                     f"{r.full:.3f} s", f"{r.full / r.flush_s:.1f}x"])
    out = markdown_table(["rows", "change per epoch", "first FLUSH", f"FLUSH (median of {RUNS})",
                          f"FLUSH of {FIXED_CHANGE:,} rows (median of {FIXED_RUNS})",
                          f"{SUSTAINED} more: mean / p90 / max", "Spark full recompute", "ratio"], rows)
    if len(runs) >= 2:
        first, last = runs[0], runs[-1]
        out += (f"\n\nFLUSH growth from {first.rows:,} to {last.rows:,} rows: {last.flush_s / first.flush_s:.2f}x "
                f"(the change {last.change / first.change:.0f}x); with a fixed {FIXED_CHANGE:,}-row change "
                f"{last.fixed_s / first.fixed_s:.2f}x.")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, help="rows of the fact table per size (default 5M and 50M)")
    add_docs_arguments(parser)
    args = parser.parse_args(argv)
    sizes = args.sizes or [5_000_000, 50_000_000]
    if args.write_docs:
        check_docs(args.docs_path, "incremental_vs_full")
    load_start = load_average()
    spark = local_session(conf={"spark.driver.memory": "8g"})
    root = os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="rw_bench_")
    runs = [Size(rows, spark, root) for rows in sizes]
    # one epoch of the same size first: a process builds its in-memory key indexes (sorted key
    # arrays, sparse indexes) on its first lookups; reported, not counted in the median
    warmup = {r.rows: r.flush(r.change) for r in runs}
    for kind, count, n in (("flush", RUNS, None), ("fixed", FIXED_RUNS, FIXED_CHANGE),
                           ("sustained", SUSTAINED, None)):
        for _ in range(count):
            for r in runs:  # the sizes alternate, FLUSH by FLUSH
                r.times[kind].append(r.flush(n or r.change))
    for r in runs:
        r.finish(spark)
        flush, fixed, sustained = (statistics.median(r.times["flush"]), statistics.median(r.times["fixed"]),
                                   sorted(r.times["sustained"]))
        r.flush_s, r.fixed_s = flush, fixed
        print(f"rows={r.rows:>11,}  change={r.change:>7,}  load={r.load_s:7.1f}s  "
              f"FLUSH={flush:.3f}s (runs: {', '.join(f'{x:.3f}' for x in r.times['flush'])})  "
              f"Spark full recompute={r.full:.3f}s  ratio={r.full / flush:.1f}x", flush=True)
        print(f"    first FLUSH of this process (builds the key indexes): {warmup[r.rows]:.3f}s; "
              f"FLUSH of a fixed {FIXED_CHANGE:,}-row change: {fixed:.3f}s; "
              f"{SUSTAINED} more 0.1% FLUSHes (state files merged in the background meanwhile): "
              f"mean {statistics.mean(sustained):.3f}s, median {statistics.median(sustained):.3f}s, "
              f"p90 {sustained[int(0.9 * len(sustained))]:.3f}s, "
              f"max {sustained[-1]:.3f}s", flush=True)
    if len(runs) >= 2:
        first, last = runs[0], runs[-1]
        print(f"FLUSH growth from {first.rows:,} to {last.rows:,} rows: {last.flush_s / first.flush_s:.2f}x "
              f"(the change grows {last.change / first.change:.0f}x with it); with a fixed "
              f"{FIXED_CHANGE:,}-row change: {last.fixed_s / first.fixed_s:.2f}x; sustained, mean over mean: "
              f"{statistics.mean(last.times['sustained']) / statistics.mean(first.times['sustained']):.2f}x, "
              f"median over median: "
              f"{statistics.median(last.times['sustained']) / statistics.median(first.times['sustained']):.2f}x")
    shutil.rmtree(root, ignore_errors=True)
    if args.write_docs:
        write_docs(args.docs_path, "incremental_vs_full",
                   figures_block(command(__file__, argv), load_start, markdown(runs, warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
