"""Nexmark-style queries over bid files: dagster-rw's file source beside Spark Structured Streaming
(and Flink SQL when PyFlink is installed), the same JSON files, one run.

Data: N Nexmark-style bid events (auction, bidder, price, channel, url, date_time, extra) as JSON
lines, generated from a fixed seed and spread over F files, each file a contiguous stretch of event
time (500 events per second of event time, 2 ms apart). A bid goes to one of about 100 open
auctions, the newest ones most often (one auction opens per second); so a 10 s window holds 5,000
bids over about 100 auctions.

Queries (Nexmark's, on bids):

  q0   SELECT * (pass-through)
  q1   currency conversion: auction, bidder, price * 0.908, date_time
  q2   filter: auction, price WHERE auction % 123 = 0
  q5   hot items: bids per auction per HOP window (2 s slide, 10 s size), then per window the
       largest count
  q7w  per auction and 10 s TUMBLE window: count(*) and max(price)

Engines, each given the same files and each query on its own, one query at a time:

  dagster-rw  a fresh warehouse per query (in-process, default options), `CREATE SOURCE bid (...)
              WITH (connector = 'posix_fs', posix_fs.root = ..., match_pattern = '*.json') FORMAT
              PLAIN ENCODE JSON` and one materialized view; timed from the start of FLUSH until
              every view has committed (FLUSH again while `pending_inputs()` shows unread files).
              Every view's row count is checked against DuckDB over the same files.
  Spark       Structured Streaming in local[2] (dagster_rw.engine.spark.local_session: 4 shuffle
              partitions, UTC), `spark.readStream.format("json").schema(...)` over the folder,
              the query in Spark SQL, `trigger(availableNow=True)`, the `noop` sink, a fresh
              checkpoint folder; timed from `start()` until the query terminates (planning,
              listing and checkpoint commits included, as FLUSH includes its own). Aggregates
              run in update mode without a watermark (all state kept, as dagster-rw keeps it);
              q5's second aggregate needs Spark's chained stateful operators, which want append
              mode and a watermark (10 s). The input row count is checked from the progress.
  Flink       PyFlink's Table API in streaming mode, parallelism 2, a `filesystem` source (json)
              with a 10 s watermark, the query into a `blackhole` sink; timed from submitting the
              INSERT until the job ends. PyFlink pins versions of pyarrow and pandas that
              dagster-rw cannot use, so it runs in its own interpreter (`--flink-python`, default:
              this one when `pyflink` imports here), as a long-lived worker process that keeps one
              Flink environment warm across queries. Without PyFlink: "skipped".

Warm: before measuring, each engine runs q7w once over the files (not counted), so JIT, imports and
Python workers are warm. Then the engines take turns, query by query (dagster-rw q0, Spark q0,
dagster-rw q1, ...), so that a change in the machine's load falls on all of them alike. Prints per query each engine's seconds and events per second, and
dagster-rw's speed against the fastest peer (peer seconds / dagster-rw seconds: above 1 is faster).

    python benchmarks/nexmark.py                              # 1M events in 4 files, all queries
    python benchmarks/nexmark.py --events 50000 --queries q1,q7w --engines dagster-rw,spark
    python benchmarks/nexmark.py --runs 3                     # the median of three measured runs

    # Flink beside them, from a virtual environment of its own:
    python -m venv /opt/flinkenv && /opt/flinkenv/bin/pip install apache-flink==2.3.0
    python benchmarks/nexmark.py --flink-python /opt/flinkenv/bin/python
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")

SEED = 27
BASE_MS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
MS_PER_EVENT = 2  # 500 events per second of event time
OPEN_AUCTIONS = 100
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")

COLUMNS = (("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "BIGINT"), ("channel", "VARCHAR"),
           ("url", "VARCHAR"), ("date_time", "TIMESTAMP"), ("extra", "VARCHAR"))

# Each query in the SQL that dagster-rw and DuckDB take ({src}: the relation of bids).
QUERIES = {
    "q0": "SELECT * FROM {src}",
    "q1": "SELECT auction, bidder, price * 0.908 AS price, date_time FROM {src}",
    "q2": "SELECT auction, price FROM {src} WHERE auction % 123 = 0",
    "q5": ("SELECT window_start, max(n) AS top FROM ("
           "SELECT auction, window_start, count(*) AS n "
           "FROM HOP({src}, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) "
           "GROUP BY auction, window_start) AS per_auction GROUP BY window_start"),
    "q7w": ("SELECT auction, window_start, count(*) AS bids, max(price) AS top "
            "FROM TUMBLE({src}, date_time, INTERVAL '10' SECOND) GROUP BY auction, window_start"),
}

# The same queries in Spark SQL, and the output mode each runs in.
SPARK_QUERIES = {
    "q0": ("SELECT * FROM bid", "append"),
    "q1": ("SELECT auction, bidder, price * 0.908 AS price, date_time FROM bid", "append"),
    "q2": ("SELECT auction, price FROM bid WHERE auction % 123 = 0", "append"),
    "q5": ("SELECT window_time(w) AS window_time, max(n) AS top FROM ("
           "SELECT window(date_time, '10 seconds', '2 seconds') AS w, auction, count(*) AS n "
           "FROM bid_wm GROUP BY window(date_time, '10 seconds', '2 seconds'), auction) "
           "GROUP BY window_time(w)", "append"),
    "q7w": ("SELECT auction, window(date_time, '10 seconds') AS w, count(*) AS bids, max(price) AS top "
            "FROM bid GROUP BY auction, window(date_time, '10 seconds')", "update"),
}

# The same queries in Flink SQL (window table-valued functions over the watermarked source).
FLINK_QUERIES = {
    "q0": "SELECT * FROM bid",
    "q1": "SELECT auction, bidder, price * 0.908 AS price, date_time FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q5": ("SELECT window_start, window_end, max(n) AS top FROM ("
           "SELECT window_start, window_end, auction, count(*) AS n FROM TABLE(HOP(TABLE bid, "
           "DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
           "GROUP BY window_start, window_end, auction) GROUP BY window_start, window_end"),
    "q7w": ("SELECT auction, window_start, count(*) AS bids, max(price) AS top FROM TABLE(TUMBLE(TABLE bid, "
            "DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY auction, window_start, window_end"),
}


# -- data ----------------------------------------------------------------------------------------

def generate(folder: str, events: int, files: int) -> int:
    """Write the bids as JSON lines into files bids-000.json...; returns the bytes written."""
    rng = np.random.default_rng(SEED)
    i = np.arange(events, dtype=np.int64)
    ms = BASE_MS + i * MS_PER_EVENT
    newest = 1000 + ms // 1000 - BASE_MS // 1000  # one auction opens per second of event time
    age = np.minimum(rng.geometric(0.05, events) - 1, OPEN_AUCTIONS - 1)  # the newest bid on most
    auction = newest - age
    bidder = rng.integers(1000, 11000, events)
    price = np.round(rng.lognormal(7.0, 1.0, events)).astype(np.int64) + 1
    channel = rng.integers(0, len(CHANNELS), events)
    item = rng.integers(0, 10_000, events)
    extra_len = rng.integers(0, 24, events)
    seconds: dict[int, str] = {}
    written = 0
    bounds = np.linspace(0, events, files + 1).astype(int)
    for f in range(files):
        lines = []
        for j in range(bounds[f], bounds[f + 1]):
            sec, milli = divmod(int(ms[j]), 1000)
            stamp = seconds.get(sec)
            if stamp is None:
                stamp = seconds[sec] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))
            ch = CHANNELS[channel[j]]
            lines.append(f'{{"auction": {auction[j]}, "bidder": {bidder[j]}, "price": {price[j]}, '
                         f'"channel": "{ch}", "url": "https://www.nexmark.com/{ch.lower()}/item.htm?'
                         f'query=1&item={item[j]}", "date_time": "{stamp}.{milli:03d}", '
                         f'"extra": "{"x" * int(extra_len[j])}"}}\n')
        data = "".join(lines).encode()
        with open(os.path.join(folder, f"bids-{f:03d}.json"), "wb") as out:
            out.write(data)
        written += len(data)
    return written


def expected_rows(folder: str) -> dict[str, int]:
    """Each query's row count, by DuckDB over the files (what every dagster-rw view must hold)."""
    import duckdb

    db = duckdb.connect()
    cols = "{" + ", ".join(f"'{c}': '{t}'" for c, t in COLUMNS) + "}"
    db.execute(f"CREATE VIEW bid AS SELECT * FROM read_json('{folder}/*.json', format = 'newline_delimited', "
               f"columns = {cols}, timestampformat = '%Y-%m-%d %H:%M:%S.%g')")
    out = {}
    for q, sql in QUERIES.items():
        duck = sql.format(src="bid")
        duck = duck.replace("HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
                            "(SELECT *, unnest(generate_series(time_bucket(INTERVAL 2 SECOND, date_time) - "
                            "INTERVAL 8 SECOND, time_bucket(INTERVAL 2 SECOND, date_time), INTERVAL 2 SECOND)) "
                            "AS window_start FROM bid)")
        duck = duck.replace("TUMBLE(bid, date_time, INTERVAL '10' SECOND)",
                            "(SELECT *, time_bucket(INTERVAL 10 SECOND, date_time) AS window_start FROM bid)")
        out[q] = db.execute(f"SELECT count(*) FROM ({duck})").fetchone()[0]
    return out


# -- engines -------------------------------------------------------------------------------------

def run_dagster_rw(folder: str, query: str, expect: int | None) -> float:
    import dagster_rw

    with tempfile.TemporaryDirectory() as wh:
        conn = dagster_rw.connect(wh)
        cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
        conn.execute(f"CREATE SOURCE bid ({cols}) WITH (connector = 'posix_fs', posix_fs.root = '{folder}', "
                     f"match_pattern = '*.json') FORMAT PLAIN ENCODE JSON")
        conn.execute(f"CREATE MATERIALIZED VIEW {query} AS {QUERIES[query].format(src='bid')}")
        t0 = time.perf_counter()
        conn.flush()
        while conn.pending_inputs():
            conn.flush()
        secs = time.perf_counter() - t0
        got = conn.execute(f"SELECT count(*) FROM {query}").fetchone()[0]
        conn.close()
    if expect is not None and got != expect:
        raise SystemExit(f"dagster-rw {query}: {got:,} rows, DuckDB over the files says {expect:,}")
    return secs


class Spark:
    def __init__(self, folder: str, events: int):
        from pyspark.sql import types as T

        from dagster_rw.engine.spark import local_session

        self.spark = local_session("nexmark", cores=2)
        self.folder, self.events = folder, events
        kinds = {"BIGINT": T.LongType(), "VARCHAR": T.StringType(), "TIMESTAMP": T.TimestampType()}
        self.schema = T.StructType([T.StructField(c, kinds[t]) for c, t in COLUMNS])

    def run(self, query: str) -> float:
        sql, mode = SPARK_QUERIES[query]
        bid = (self.spark.readStream.format("json").schema(self.schema)
               .option("timestampFormat", "yyyy-MM-dd HH:mm:ss.SSS").load(self.folder))
        bid.createOrReplaceTempView("bid")
        bid.withWatermark("date_time", "10 seconds").createOrReplaceTempView("bid_wm")
        with tempfile.TemporaryDirectory() as checkpoint:
            writer = (self.spark.sql(sql).writeStream.format("noop").outputMode(mode)
                      .option("checkpointLocation", checkpoint).trigger(availableNow=True))
            t0 = time.perf_counter()
            q = writer.start()
            q.awaitTermination()
            secs = time.perf_counter() - t0
            read = sum(p["numInputRows"] for p in q.recentProgress)
        if read != self.events:
            raise SystemExit(f"Spark {query}: read {read:,} rows of {self.events:,}")
        return secs

    def stop(self) -> None:
        self.spark.stop()


class Flink:
    """PyFlink in a worker process of its own interpreter: it first counts the source's rows (not
    timed), then reads a query name per line on stdin and answers with the seconds the job took."""

    def __init__(self, folder: str, python: str, events: int):
        import subprocess

        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--flink-worker", folder],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        read = self._answer()  # the environment is ready; it counted the source's rows
        if read != events:
            raise SystemExit(f"Flink: read {read:,} rows of {events:,}")

    def _answer(self) -> float:
        line = self.proc.stdout.readline()
        if not line.startswith("ok"):
            raise SystemExit(f"Flink worker: {line.strip() or 'ended'}")
        return float(line.split()[1])

    def run(self, query: str) -> float:
        self.proc.stdin.write(query + "\n")
        return self._answer()

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def flink_worker(folder: str) -> None:
    """The Flink side of the benchmark, run by an interpreter that has PyFlink."""
    from pyflink.table import EnvironmentSettings, TableDescriptor, TableEnvironment

    cols = ", ".join(f"{c} {'TIMESTAMP(3)' if t == 'TIMESTAMP' else 'STRING' if t == 'VARCHAR' else t}"
                     for c, t in COLUMNS)
    ddl = (f"CREATE TABLE bid ({cols}, WATERMARK FOR date_time AS date_time - INTERVAL '10' SECOND) WITH "
           f"('connector' = 'filesystem', 'path' = 'file://{folder}', 'format' = 'json', "
           f"'json.timestamp-format.standard' = 'SQL')")
    batch = TableEnvironment.create(EnvironmentSettings.in_batch_mode())  # not timed: reads every file?
    batch.execute_sql(ddl)
    with batch.execute_sql("SELECT count(*) FROM bid").collect() as rows:
        count = next(iter(rows))[0]
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "2")
    env.execute_sql(ddl)
    print(f"ok {count}", flush=True)
    for line in sys.stdin:
        try:
            table = env.sql_query(FLINK_QUERIES[line.strip()])
            sink = TableDescriptor.for_connector("blackhole").build()  # its schema is the query's
            t0 = time.perf_counter()
            table.execute_insert(sink).wait()
            print(f"ok {time.perf_counter() - t0}", flush=True)
        except Exception as e:  # reported to the driver, which stops the benchmark
            print(f"error {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)


# -- main ----------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--engines", default="dagster-rw,spark,flink")
    ap.add_argument("--runs", type=int, default=1, help="measured runs per query and engine (the median)")
    ap.add_argument("--data", default=None, help="a folder for the files (default: a temporary one)")
    ap.add_argument("--flink-python", default=None,
                    help="an interpreter that has PyFlink (default: this one, when pyflink imports)")
    ap.add_argument("--flink-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flink_worker:
        return flink_worker(args.flink_worker)
    queries = [q for q in args.queries.split(",") if q]
    engines = [e for e in args.engines.split(",") if e]
    unknown = [q for q in queries if q not in QUERIES]
    if unknown:
        raise SystemExit(f"unknown queries: {unknown}")

    load0 = os.getloadavg()[0]  # other work on the machine, named with the figures
    folder = args.data or tempfile.mkdtemp(prefix="nexmark-")
    os.makedirs(folder, exist_ok=True)
    try:
        t0 = time.perf_counter()
        size = generate(folder, args.events, args.files)
        print(f"{args.events:,} bids in {args.files} JSON files, {size / 1e6:.0f} MB, "
              f"generated in {time.perf_counter() - t0:.1f} s (seed {SEED})")
        expect = expected_rows(folder)
        print("rows per query (DuckDB over the files): "
              + ", ".join(f"{q} {expect[q]:,}" for q in queries))

        runners, stops = {}, []
        if "dagster-rw" in engines:
            runners["dagster-rw"] = lambda q: run_dagster_rw(folder, q, expect[q])
        if "spark" in engines:
            spark = Spark(folder, args.events)
            runners["spark"], stops = spark.run, [spark.stop]
        if "flink" in engines:
            python = args.flink_python
            if python is None:
                try:
                    import pyflink.table  # noqa: F401
                    python = sys.executable
                except ImportError:
                    print("  flink: skipped: pyflink not installed (see --flink-python)")
            if python is not None:
                flink = Flink(folder, python, args.events)
                runners["flink"] = flink.run
                stops.append(flink.stop)
        times: dict[tuple[str, str], float] = {}
        try:
            for run in runners.values():
                run("q7w")  # warm-up, not counted
            # engines take turns on each query, so a change in the machine's load falls on all of them
            for q in queries:
                for engine, run in runners.items():
                    times[(engine, q)] = statistics.median(run(q) for _ in range(args.runs))
                    print(f"  {engine:<10} {q:<4} {times[(engine, q)]:6.2f} s", flush=True)
        finally:
            for stop in stops:
                stop()

        ran = [e for e in ("dagster-rw", "spark", "flink") if any((e, q) in times for q in queries)]
        print(f"\n{'query':<6}" + "".join(f"{e + ' s':>14}{'events/s':>12}" for e in ran)
              + "  dagster-rw vs fastest peer")
        for q in queries:
            line = f"{q:<6}"
            for e in ran:
                s = times[(e, q)]
                line += f"{s:>14.2f}{args.events / s:>12,.0f}"
            peers = [(times[(e, q)], e) for e in ran if e != "dagster-rw"]
            if "dagster-rw" in ran and peers:
                best, who = min(peers)
                line += f"  {best / times[('dagster-rw', q)]:.2f}x ({who})"
            print(line)
        print("(x > 1: dagster-rw is faster than the fastest peer; the target is 1.2x)")
        print(f"load average at the start {load0:.1f}, at the end {os.getloadavg()[0]:.1f} "
              f"({os.cpu_count()} cores)")
    finally:
        if args.data is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
