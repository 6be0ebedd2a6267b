"""Batch SELECTs in-process (DuckDB) against on Spark (`local[2]`), by the size of what they read:
where the threshold between the two (the `spark_threshold_rows` option) belongs.

Per size, a warehouse of that many visits (incremental_vs_full.py's data) is built in-process;
then three queries run through the DB-API on each engine, warm (the best of three): a global
aggregate over the visits, the join + aggregate of the benchmarks' view, and a selective filter
returning a few rows. Prints the times and Spark's over DuckDB's.

    python benchmarks/batch_select.py                     # 1M, 5M and 20M rows
    python benchmarks/batch_select.py 50000000
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import dagster_rw
from dagster_rw.engine.spark import local_session
from _common import best_of
from visit_data import VIEW, info, visits

CHUNK = 5_000_000
QUERIES = {
    "global aggregate": "SELECT count(*), sum(length), max(uid) FROM visit",
    "join + aggregate": VIEW,
    "selective filter": "SELECT id, length FROM visit WHERE uid = 4242 AND length > 3000",
}


def build(path: str, rows: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(rows)
    conn = dagster_rw.connect(path, engine="duckdb")
    conn.execute("CREATE TABLE info (product INT PRIMARY KEY, category INT)")
    conn.execute("CREATE TABLE visit (id BIGINT PRIMARY KEY, product INT, uid INT, length INT)")
    conn.insert("info", info())
    for start in range(0, rows, CHUNK):
        conn.insert("visit", visits(rng, np.arange(start, min(rows, start + CHUNK))))
        conn.flush()
    conn.compact()
    conn.close()


def best_of_three(conn, sql: str) -> float:
    return best_of(lambda: conn.execute(sql).fetchall())


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1_000_000, 5_000_000, 20_000_000]
    spark = local_session(conf={"spark.driver.memory": "4g"})
    root = os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="rw_select_")
    for rows in sizes:
        path = os.path.join(root, f"wh_{rows}")
        build(path, rows)
        engines = {"duckdb": dagster_rw.connect(path, engine="duckdb"),
                   "spark": dagster_rw.connect(path, spark=spark, engine="spark")}
        for name, sql in QUERIES.items():
            got = {e: best_of_three(conn, sql) for e, conn in engines.items()}
            print(f"rows={rows:>11,}  {name:<17} in-process {got['duckdb']:.3f}s  Spark {got['spark']:.3f}s  "
                  f"Spark/in-process {got['spark'] / got['duckdb']:.2f}x", flush=True)
        for conn in engines.values():
            conn.close()
        shutil.rmtree(path, ignore_errors=True)
    if not os.environ.get("BENCH_DIR"):
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
