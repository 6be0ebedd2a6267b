"""Freshness under continuous mode: the time from an INSERT to every view having committed it.

The pipeline of benchmarks/epoch_cost.py (tables t, 100,000 rows, and d; `--views` materialized
views: one join, the others GROUP BY aggregates) in a local folder. `dagster-rw run --interval S`
runs in a subprocess, as a deployment runs it. This process then makes `--changes` changes, each an
INSERT of 10 rows of t that replace existing keys, at random moments (a pause of 0 to 1.5 intervals
between them, so they land anywhere in the loop's tick), and for each measures the time from the
start of the INSERT until every view has committed the epoch that sealed it: the epoch whose
barrier record lists the INSERT's staged batch, read from the warehouse log, and the views'
manifests at or past it. The log is read again every 5 ms while waiting (so a figure can be up to
5 ms late).

Prints p50, p90, p99 and the maximum, and the loop's own figures (epochs, median tick).

    python benchmarks/continuous_freshness.py                      # 100 changes, 13 views, 1 s
    python benchmarks/continuous_freshness.py --changes 20 --views 3 --interval 0.5
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

import epoch_cost  # the same pipeline
from _common import percentile

from dagster_rw.storage.log import log_of

POLL_SECONDS = 0.005


def sealing_epoch(state, table: str, batch: str) -> int | None:
    for e, record in state.epochs.items():
        if batch in record["batches"].get(table, []):
            return e
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--views", type=int, default=13)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)

    root = os.path.join(tempfile.gettempdir(), f"freshness-{uuid.uuid4().hex[:8]}")
    conn = epoch_cost.build(root, args.views, None)
    views = list(epoch_cost.views(args.views))
    loop = subprocess.Popen([sys.executable, "-m", "dagster_rw.cli", "--warehouse", root, "--engine", "duckdb",
                             "run", "--interval", str(args.interval)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rng = np.random.default_rng(7)
    log = log_of(conn.wh.store)
    times = []
    try:
        for i in range(args.changes + 3):
            time.sleep(rng.uniform(0, 1.5 * args.interval))
            change = epoch_cost.t_rows(rng, rng.choice(epoch_cost.T_ROWS, size=10, replace=False))
            t0 = time.perf_counter()
            conn.insert("t", change)
            batch = log.current().unsealed["t"][-1]  # this process is the only writer of t
            while True:
                conn.wh.sync()
                state = log.current()
                epoch = sealing_epoch(state, "t", batch)
                if epoch is not None and all(state.manifests.get(v, {}).get("epoch", 0) >= epoch for v in views):
                    break
                if loop.poll() is not None:
                    raise RuntimeError(f"the loop stopped: {loop.stdout.read()[-2000:]}")
                time.sleep(POLL_SECONDS)
            if i >= 3:  # the first changes warm the loop's caches
                times.append(time.perf_counter() - t0)
    finally:
        loop.send_signal(signal.SIGTERM)
        out, _ = loop.communicate(timeout=600)
        conn.close()
        shutil.rmtree(root, ignore_errors=True)
    ticks = [float(s) for s in re.findall(r"advanced in ([0-9.]+) s", out)]
    print(f"continuous mode, {args.views} views over {epoch_cost.T_ROWS:,} rows, interval {args.interval:g} s, "
          f"{len(times)} changes of 10 rows (local folder, engine duckdb)")
    print(f"INSERT -> every view committed: p50 {percentile(times, 0.5):.3f} s, p90 {percentile(times, 0.9):.3f} s, "
          f"p99 {percentile(times, 0.99):.3f} s, max {max(times):.3f} s")
    if ticks:
        print(f"the loop: {len(ticks)} epochs, median tick {statistics.median(ticks) * 1000:.0f} ms, "
              f"slowest {max(ticks) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
