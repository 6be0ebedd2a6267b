"""Small epochs over state larger than the cache, in-process, against the same change over state
that fits it.

The view is incremental_vs_full.py's join + aggregate with a MAX. Two warehouses are built
in-process, the visits loaded in 5M-row FLUSHes with the view already there and the state merged
at the end: a smaller one (50M rows by default) and a larger one (200M). Then, in one process,
blocks alternate: the smaller warehouse with a cache that holds all of its state (decoded files),
the larger with a 1 GB cache (its files are mapped, storage.mapped_columns). Each block first runs
one epoch that is not counted (it decodes or maps the files and builds the key indexes), then
times five FLUSHes that each replace a fixed number of random visits (20,000 by default: 0.01% of
200M). Prints the medians, their ratio, and the process's memory: its resident set split into
anonymous memory (the heap: decoded files, indexes) and mapped file pages (which the operating
system drops under pressure), and the cache's own count.

    python benchmarks/partial_state.py                          # 50M cached vs 200M with 1 GB
    python benchmarks/partial_state.py 5000000 20000000 --cache-mb 64
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import dagster_rw
from dagster_rw.storage import sst_cache
from visit_data import VIEW, info, visits

CHUNK = 5_000_000
BLOCKS = 3
RUNS = 5


def build(path: str, rows: int) -> float:
    """A warehouse of `rows` visits, the view maintained as they arrive, its state merged."""
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(rows)
    t0 = time.perf_counter()
    conn = dagster_rw.connect(path, engine="duckdb")
    conn.execute("CREATE TABLE info (product INT PRIMARY KEY, category INT)")
    conn.execute("CREATE TABLE visit (id BIGINT PRIMARY KEY, product INT, uid INT, length INT)")
    conn.execute(f"CREATE MATERIALIZED VIEW longest_visit AS {VIEW}")
    conn.insert("info", info())
    for start in range(0, rows, CHUNK):
        conn.insert("visit", visits(rng, np.arange(start, min(rows, start + CHUNK))))
        conn.flush()
        sst_cache.clear()  # the build's decoded files go: only the measured blocks fill the cache
        gc.collect()
    for name in ("visit", "longest_visit"):
        conn.compact(name)
    conn.close()
    sst_cache.clear()
    os.sync()
    return time.perf_counter() - t0


def memory() -> dict[str, int]:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {k: int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssFile", "VmHWM")}


class Warehouse:
    def __init__(self, path: str, rows: int, cache: int):
        self.rows, self.cache = rows, cache
        self.rng = np.random.default_rng(rows + 1)
        self.conn = dagster_rw.connect(path, engine="duckdb")
        self.times: list[float] = []
        self.peak_anon = 0

    def epoch(self, change: int) -> float:
        ids = self.rng.choice(self.rows, change, replace=False)
        self.conn.insert("visit", visits(self.rng, ids))  # same keys: each row is replaced
        gc.collect()
        t0 = time.perf_counter()
        self.conn.flush()
        took = time.perf_counter() - t0
        self.peak_anon = max(self.peak_anon, memory()["RssAnon"])
        return took

    def block(self, change: int) -> None:
        sst_cache.set_limit(self.cache)
        self.epoch(change)  # decodes or maps the files, builds the key indexes: not counted
        self.times += [self.epoch(change) for _ in range(RUNS)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[50_000_000, 200_000_000])
    parser.add_argument("--change", type=int, default=20_000)
    parser.add_argument("--cache-mb", type=int, default=1024, help="the larger warehouse's cache")
    args = parser.parse_args(argv)
    small_rows, large_rows = args.sizes
    root = os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="rw_partial_")
    os.environ.setdefault("DAGSTER_RW_MAP_DIR", root)  # the mapped columns beside the warehouses
    built = {rows: build(os.path.join(root, f"wh_{rows}"), rows) for rows in (small_rows, large_rows)}
    for rows, took in built.items():
        print(f"built {rows:,} rows in {took:.0f}s", flush=True)
    small = Warehouse(os.path.join(root, f"wh_{small_rows}"), small_rows, 64 << 30)
    large = Warehouse(os.path.join(root, f"wh_{large_rows}"), large_rows, args.cache_mb << 20)
    for _ in range(BLOCKS):
        for w in (small, large):
            w.block(args.change)
            if w is large:
                mem = memory()
                print(f"  after a block of {large_rows:,}: RssAnon {mem['RssAnon'] / 2**20:.0f} MB, "
                      f"RssFile {mem['RssFile'] / 2**20:.0f} MB, cache {sst_cache.files._bytes / 2**20:.0f} MB, "
                      f"mapped files {len(sst_cache.mapped_columns.mapped_files())}", flush=True)
    s, la = statistics.median(small.times), statistics.median(large.times)
    print(f"{args.change:,}-row epoch over {small_rows:,} rows, fully cached: median {s:.3f}s "
          f"(runs {', '.join(f'{t:.3f}' for t in small.times)})")
    print(f"{args.change:,}-row epoch over {large_rows:,} rows, {args.cache_mb} MB cache: median {la:.3f}s "
          f"(runs {', '.join(f'{t:.3f}' for t in large.times)}); peak anonymous memory in its epochs "
          f"{large.peak_anon / 2**20:.0f} MB")
    print(f"ratio: {la / s:.2f}x")
    for w in (small, large):
        w.conn.close()
    if not os.environ.get("BENCH_DIR"):
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
