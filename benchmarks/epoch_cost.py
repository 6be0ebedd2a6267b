"""What a small epoch costs as a pipeline grows: its time, and on S3 its requests and their price.

Two tables, `t (id BIGINT PRIMARY KEY, k INT, v INT)` with 100,000 rows and `d (k INT PRIMARY KEY,
name VARCHAR)` with 100, under pipelines of 3, 13 and 50 materialized views: view 0 joins t and d
(a count and a sum per name), the others are GROUP BY aggregates over t, each with its own grouping
(k, k % 7, v % 13, ...) and aggregates (count, sum, min, max), picked deterministically. Per
pipeline a fresh warehouse is built in-process (engine='duckdb'), on a local folder and on moto's
S3 server (tests/s3_server.py). Then an epoch is an INSERT of 10 or of 10,000 rows of t that
replace existing keys (new k and v, through `conn.insert`), followed by `FLUSH`: three warm-up
epochs, then 20 measured ones (5 for 10,000 rows or 50 views; `--epochs` sets them all), timed
from the insert to the end of the FLUSH.

Prints per configuration the median and p99 epoch time in milliseconds (p99 by nearest rank: with
20 epochs it is the slowest one), and on S3 the requests per measured epoch by kind (LIST, GET,
HEAD, PUT, DELETE, other) and what they would cost per day at one epoch a second at S3 Standard's
list prices. Then the ratio of each pipeline's median to the next smaller one's (50 views over 13
among them).

How the requests are counted: on the connection's own boto3 client (`conn.wh.store.client`), with
botocore's `before-call.s3` event, once per API call. Downloads and uploads through boto3's
transfer manager count their HeadObject / GetObject / PutObject, or the parts of a multipart
upload. A call botocore retried counts once; its retries are counted apart (`before-send.s3`) and
printed under the table when there are any (moto answers 500 when a LIST races a DELETE on another
thread). Background work (merges of state files; deletion of garbage, which waits
`gc_grace_seconds`, 30 s by default) is counted when it happens, so its requests land on whichever
measured epochs are running. Not counted: the store's other path to the bucket, pyarrow's S3 file
system (`S3Store.parquet_rows` reads a Parquet footer with it when the object is not in the local
cache; Spark tasks read through it too, and Spark is not used here). moto runs in this process, on
threads: the S3 epoch times include its work on the same interpreter, not the real service's
latency.

    python benchmarks/epoch_cost.py                                  # everything
    python benchmarks/epoch_cost.py --views 3,13 --rows 10 --where local,s3 --epochs 5
    python benchmarks/epoch_cost.py --write-docs   # the table into docs/performance.md (epoch_cost markers)
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter

import numpy as np
import pyarrow as pa
from _common import (add_docs_arguments, check_docs, command, figures_block, load_average, markdown_table,
                     moto_s3, percentile, write_docs)

warnings.filterwarnings("ignore")

import dagster_rw
from dagster_rw.storage import sst_cache
from dagster_rw.storage.object_store import wait_for_deletions

T_ROWS = 100_000
D_ROWS = 100
WARMUP = 3
EPOCHS = 20  # measured epochs for a small configuration
EPOCHS_LARGE = 5  # for 10,000-row epochs, and for 50 views
BUCKET = "epoch-cost"

# S3 Standard request prices, us-east-1 (https://aws.amazon.com/s3/pricing/, "Requests & data
# retrievals"): PUT, COPY, POST, LIST $0.005 per 1,000 requests; GET, SELECT and all other requests
# $0.0004 per 1,000; DELETE and CANCEL requests are free.
PRICE_PUT_COPY_POST_LIST = 0.005 / 1000
PRICE_GET_AND_OTHER = 0.0004 / 1000
PRICE_DELETE = 0.0
EPOCHS_PER_DAY = 86_400  # one epoch a second

KINDS = ("LIST", "GET", "HEAD", "PUT", "DELETE", "other")
KIND_OF = {
    "ListObjectsV2": "LIST", "ListObjects": "LIST", "ListMultipartUploads": "LIST", "ListParts": "LIST",
    "GetObject": "GET",
    "HeadObject": "HEAD",
    "PutObject": "PUT", "CopyObject": "PUT", "UploadPart": "PUT", "UploadPartCopy": "PUT",
    "CreateMultipartUpload": "PUT", "CompleteMultipartUpload": "PUT",  # POSTs: priced as PUTs
    "DeleteObject": "DELETE", "DeleteObjects": "DELETE", "AbortMultipartUpload": "DELETE",  # CANCEL: free
}
PRICE_OF = {"LIST": PRICE_PUT_COPY_POST_LIST, "PUT": PRICE_PUT_COPY_POST_LIST, "GET": PRICE_GET_AND_OTHER,
            "HEAD": PRICE_GET_AND_OTHER, "other": PRICE_GET_AND_OTHER, "DELETE": PRICE_DELETE}

# the views besides the join: 7 groupings x 7 sets of aggregates, every view a different pair
GROUPS = [("k",), ("k % 7",), ("k % 10",), ("v % 13",), ("v % 100",), ("k % 4", "v % 4"), ("(k + v) % 50",)]
AGGS = [("count(*)",), ("sum(v)",), ("min(v)",), ("max(v)",), ("count(*)", "sum(v)"), ("min(v)", "max(v)"),
        ("count(*)", "sum(k)", "max(v)")]


def views(n: int) -> dict[str, str]:
    """The pipeline of `n` views: always the same ones for the same `n`, the first of a larger
    pipeline the same as a smaller one's."""
    out = {"v00": "SELECT d.name, count(*) AS n, sum(t.v) AS sv FROM t JOIN d ON t.k = d.k GROUP BY d.name"}
    for i in range(1, n):
        j = i - 1
        group, aggs = GROUPS[j % len(GROUPS)], AGGS[(j // len(GROUPS)) % len(AGGS)]
        keys = ", ".join(f"{g} AS g{x}" for x, g in enumerate(group))
        values = ", ".join(f"{a} AS a{x}" for x, a in enumerate(aggs))
        out[f"v{i:02d}"] = f"SELECT {keys}, {values} FROM t GROUP BY {', '.join(group)}"
    return out


def t_rows(rng, ids: np.ndarray) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "k": pa.array(rng.integers(0, D_ROWS, len(ids)), pa.int32()),
                     "v": pa.array(rng.integers(0, 1_000, len(ids)), pa.int32())})


def d_rows() -> pa.Table:
    return pa.table({"k": pa.array(np.arange(D_ROWS), pa.int32()),
                     "name": pa.array([f"name-{k % 37}" for k in range(D_ROWS)], pa.string())})


class Requests:
    """Counts the S3 API calls made through a boto3 client, by operation, and the HTTP requests
    they took (more when botocore retried one)."""

    def __init__(self, client):
        self.ops: Counter = Counter()
        self.sent = 0
        self._lock = threading.Lock()
        client.meta.events.register("before-call.s3", self._count)
        client.meta.events.register("before-send.s3", self._count_sent)

    def _count(self, model, **_):
        with self._lock:
            self.ops[model.name] += 1

    def _count_sent(self, **_):
        with self._lock:
            self.sent += 1

    def take(self) -> tuple[Counter, int]:
        """The calls since the last take, and how many of their HTTP requests were retries."""
        with self._lock:
            got, sent, self.ops, self.sent = self.ops, self.sent, Counter(), 0
        return got, sent - sum(got.values())


def by_kind(ops: Counter) -> dict[str, int]:
    kinds = dict.fromkeys(KINDS, 0)
    for op, n in ops.items():
        kinds[KIND_OF.get(op, "other")] += n
    return kinds


def build(url: str, n_views: int, endpoint: str | None):
    options = {"s3_endpoint_url": endpoint} if endpoint else {}
    conn = dagster_rw.connect(url, engine="duckdb", **options)
    conn.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k INT, v INT)")
    conn.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
    conn.insert("t", t_rows(np.random.default_rng(0), np.arange(T_ROWS)))
    conn.insert("d", d_rows())
    conn.execute("FLUSH")
    for name, sql in views(n_views).items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    conn.execute("FLUSH")
    return conn


def epoch(conn, rng, rows: int) -> float:
    ids = rng.choice(T_ROWS, size=rows, replace=False)
    change = t_rows(rng, ids)
    t0 = time.perf_counter()
    conn.insert("t", change)
    conn.execute("FLUSH")
    return time.perf_counter() - t0


def run(where: str, n_views: int, row_counts: list[int], epochs: int | None, s3) -> list[dict]:
    """One warehouse with `n_views` views; per epoch size, the warm-up and measured epochs."""
    if where == "s3":
        url, endpoint = s3.url(BUCKET, f"wh-{n_views}-{uuid.uuid4().hex[:8]}"), s3.endpoint
    else:
        url, endpoint = os.path.join(tempfile.gettempdir(), f"wh-{n_views}-{uuid.uuid4().hex[:8]}"), None
    t0 = time.perf_counter()
    conn = build(url, n_views, endpoint)
    print(f"[{where}] built {n_views} views over {T_ROWS:,} rows in {time.perf_counter() - t0:.1f}s", flush=True)
    counter = Requests(conn.wh.store.client) if where == "s3" else None
    rng = np.random.default_rng(n_views)
    results = []
    for rows in row_counts:
        measured = epochs or (EPOCHS_LARGE if rows > 1_000 or n_views > 13 else EPOCHS)
        for _ in range(WARMUP):
            epoch(conn, rng, rows)
        if counter:
            counter.take()
        times = [epoch(conn, rng, rows) for _ in range(measured)]
        kinds, retries = None, 0
        if counter:
            ops, retries = counter.take()
            kinds = {k: n / measured for k, n in by_kind(ops).items()}
        results.append({"where": where, "views": n_views, "rows": rows, "epochs": measured,
                        "median": statistics.median(times), "p99": percentile(times, 0.99), "kinds": kinds,
                        "retries": retries})
        print(f"[{where}] {n_views} views, {rows:,}-row epochs: median {statistics.median(times) * 1000:.0f} ms",
              flush=True)
    conn.close()
    wait_for_deletions()
    sst_cache.clear()
    gc.collect()
    if where == "local":
        shutil.rmtree(url, ignore_errors=True)
    return results


def per_day(kinds: dict[str, float]) -> float:
    return sum(n * PRICE_OF[k] for k, n in kinds.items()) * EPOCHS_PER_DAY


def report(results: list[dict]) -> None:
    head = f"{'where':<6}{'views':>6}{'rows':>8}{'epochs':>7}{'median ms':>11}{'p99 ms':>9}"
    head += "".join(f"{k:>8}" for k in KINDS) + f"{'$/day @1/s':>12}"
    print()
    print(head)
    for r in results:
        line = f"{r['where']:<6}{r['views']:>6}{r['rows']:>8,}{r['epochs']:>7}{r['median'] * 1000:>11.1f}{r['p99'] * 1000:>9.1f}"
        if r["kinds"] is None:
            line += "".join(f"{'-':>8}" for _ in KINDS) + f"{'-':>12}"
        else:
            line += "".join(f"{r['kinds'][k]:>8.1f}" for k in KINDS) + f"{per_day(r['kinds']):>12.2f}"
        print(line)
    print("(requests per measured epoch, through the store's boto3 client; $/day: S3 Standard request "
          "prices, us-east-1, at one epoch a second)")
    for r in results:
        if r["retries"]:
            print(f"{r['where']} {r['views']} views, {r['rows']:,}-row epochs: {r['retries']} HTTP request(s) "
                  f"retried by botocore, not counted above (moto answers 500 when a LIST races a DELETE)")
    print()
    for where in dict.fromkeys(r["where"] for r in results):
        for rows in dict.fromkeys(r["rows"] for r in results):
            got = {r["views"]: r["median"] for r in results if r["where"] == where and r["rows"] == rows}
            sizes = sorted(got)
            for small, large in zip(sizes, sizes[1:]):
                print(f"{where:<6}{rows:>7,}-row epochs: {large} views / {small} views median = "
                      f"{got[large] / got[small]:.2f}x  (views {large / small:.2f}x)")


def markdown(results: list[dict]) -> str:
    """report()'s table and ratios for the docs."""
    rows = []
    for r in results:
        row = ["folder" if r["where"] == "local" else "moto S3", r["views"], f"{r['rows']:,}", r["epochs"],
               f"{r['median'] * 1000:,.0f} ms", f"{r['p99'] * 1000:,.0f} ms"]
        if r["kinds"] is None:
            row += [""] * (len(KINDS) + 1)
        else:
            row += [f"{r['kinds'][k]:.1f}" for k in KINDS] + [f"{per_day(r['kinds']):.2f}"]
        rows.append(row)
    out = [markdown_table(["where", "views", "rows per epoch", "epochs", "median", "p99"] + list(KINDS)
                          + ["requests $/day at 1 epoch/s"], rows)]
    ratios = []
    for where in dict.fromkeys(r["where"] for r in results):
        for rows_per_epoch in dict.fromkeys(r["rows"] for r in results):
            got = {r["views"]: r["median"] for r in results if r["where"] == where and r["rows"] == rows_per_epoch}
            sizes = sorted(got)
            place = "folder" if where == "local" else "moto S3"
            ratios += [f"{place}, {rows_per_epoch:,}-row epochs: {large} views over {small}, "
                       f"{got[large] / got[small]:.2f}x the median (the views {large / small:.2f}x)"
                       for small, large in zip(sizes, sizes[1:])]
    if ratios:
        out.append("\n".join(f"- {line}" for line in ratios))
    return "\n\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--views", default="3,13,50", help="pipeline sizes, comma-separated")
    parser.add_argument("--rows", default="10,10000", help="rows changed per epoch, comma-separated")
    parser.add_argument("--where", default="local,s3", help="local, s3 or both")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"measured epochs per configuration (default {EPOCHS}, {EPOCHS_LARGE} for "
                             f"10,000 rows or 50 views)")
    add_docs_arguments(parser)
    args = parser.parse_args(argv)
    view_counts = [int(x) for x in args.views.split(",")]
    row_counts = [int(x) for x in args.rows.split(",")]
    wheres = [w.strip() for w in args.where.split(",")]
    if any(w not in ("local", "s3") for w in wheres):
        parser.error("--where takes local and/or s3")
    if args.write_docs:
        check_docs(args.docs_path, "epoch_cost")
    load_start = load_average()

    scratch = tempfile.mkdtemp(prefix="epoch_cost-")
    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = scratch  # the local warehouses, the S3 cache and the scratch files go here
    s3 = None
    results: list[dict] = []
    try:
        if "s3" in wheres:
            s3 = moto_s3()
            # moto's server lists a bucket's keys while other threads delete some and then answers
            # 500 (botocore retries; report() says how often): no traceback for each
            logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
            s3.create_bucket(BUCKET)
        for where in wheres:
            for n_views in view_counts:
                results += run(where, n_views, row_counts, args.epochs, s3)
    finally:
        if s3 is not None:
            s3.stop()
        tempfile.tempdir = saved_tempdir
        shutil.rmtree(scratch, ignore_errors=True)
    report(results)
    if args.write_docs:
        write_docs(args.docs_path, "epoch_cost", figures_block(command(__file__, argv), load_start, markdown(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
