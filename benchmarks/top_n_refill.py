"""A top-N view whose window empties every epoch: the refill reads past the old window, not the input.

    SELECT id, score FROM players ORDER BY score DESC, id LIMIT 10

Each epoch deletes the ten players at the top, so the new window comes from rows outside the old
one. The operator reads its sorted input state from the old window's last row on, a few rows per
file; this prints that FLUSH next to the same FLUSH with the refill switched to a full read of the
input state (what a step did before), on the same data in the same process, at two sizes.

    python benchmarks/top_n_refill.py                   # 1M and 5M rows
    python benchmarks/top_n_refill.py 200000 2000000    # other sizes
"""
from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

import dagster_rw
from dagster_rw.operators import top_n

RUNS = 5


def measure(rows: int, root: str, full_read: bool) -> float:
    wh = f"{root}/wh_{rows}_{int(full_read)}"
    conn = dagster_rw.connect(wh, engine="duckdb")
    conn.execute("CREATE TABLE players (id BIGINT PRIMARY KEY, score BIGINT)")
    rng = np.random.default_rng(rows)
    conn.insert("players", pa.table({"id": np.arange(rows, dtype=np.int64),
                                     "score": rng.permutation(rows).astype(np.int64)}))
    conn.flush()
    conn.execute("CREATE MATERIALIZED VIEW leaders AS SELECT id, score FROM players ORDER BY score DESC, id LIMIT 10")
    original = top_n.TopNOp.refill
    if full_read:
        top_n.TopNOp.refill = lambda self, *a: None
    try:
        times = []
        for _ in range(RUNS + 1):  # the first epoch warms the process's indexes: not counted
            top = conn.execute("SELECT id FROM leaders").fetchall()
            conn.execute(f"DELETE FROM players WHERE id IN ({', '.join(str(r[0]) for r in top)})")
            t0 = time.perf_counter()
            conn.flush()
            times.append(time.perf_counter() - t0)
        want = conn.execute("SELECT id, score FROM players ORDER BY score DESC, id LIMIT 10").fetchall()
        assert sorted(conn.execute("SELECT * FROM leaders").fetchall()) == sorted(want)
    finally:
        top_n.TopNOp.refill = original
    conn.close()
    return statistics.median(times[1:])


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1_000_000, 5_000_000]
    root = tempfile.mkdtemp(prefix="rw_topn_")
    for rows in sizes:
        partial, full = measure(rows, root, False), measure(rows, root, True)
        print(f"rows={rows:>10,}  FLUSH with the refill read past the window={partial:.3f}s  "
              f"with a full read of the input state={full:.3f}s  ratio={full / partial:.1f}x", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
