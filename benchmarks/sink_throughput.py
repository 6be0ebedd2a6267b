"""Rows per second a sink delivers to PostgreSQL and to Kafka, from a view changing 100k rows per epoch.

A table of N rows (id primary key, grp, v) feeds the view `SELECT id, grp, v * 2 AS v2 FROM t`; every
epoch rewrites v of all N rows, so the view's change log holds N deletes and N inserts per epoch, which
each sink turns into N upserts keyed by id. The sinks do not deliver at FLUSH (flush_delivers_sinks is
off); each epoch is delivered by `refresh(sink)` and timed alone: reading the change log, the key
conversion, and the write until the target acknowledged it (a committed PostgreSQL transaction; Kafka
acks=all for every message), then the commit of the sink's position. The first delivery (the snapshot,
N inserts) is timed separately.

    python benchmarks/sink_throughput.py                  # 100k rows, 3 epochs
    python benchmarks/sink_throughput.py 200000 5         # rows, epochs

PostgreSQL: 127.0.0.1:5432, database `test`, user postgres (a scratch schema, dropped at the end).
Kafka: the Tansu broker of the tests, started on a free port (or KAFKA_BOOTSTRAP=host:port).
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings

import numpy as np
import pyarrow as pa

warnings.filterwarnings("ignore")

import psycopg
from _common import tansu_broker

import dagster_rw


def rows(n: int, epoch: int) -> pa.Table:
    ids = np.arange(n, dtype=np.int32)
    return pa.table({"id": ids, "grp": ids % 100, "v": np.full(n, epoch, dtype=np.int32)})


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    folder = tempfile.mkdtemp(prefix="rw-sink-bench-")
    schema = f"rw_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(host="127.0.0.1", user="postgres", dbname="test", autocommit=True)
    admin.execute(f'CREATE SCHEMA "{schema}"')
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        broker = tansu_broker()
        bootstrap = broker.bootstrap
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        if broker is not None:
            broker.create_topic(topic, partitions=3)
        conn = dagster_rw.connect(folder, engine="duckdb", flush_delivers_sinks=False)
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, grp INT, v INT)")
        conn.insert("t", rows(n, 0))
        conn.execute("FLUSH")
        conn.execute("CREATE MATERIALIZED VIEW doubled AS SELECT id, grp, v * 2 AS v2 FROM t")
        conn.execute(f"CREATE SINK to_pg FROM doubled WITH (connector = 'postgres', host = '127.0.0.1', "
                     f"user = 'postgres', database = 'test', schema = '{schema}', table = 'doubled', "
                     "type = 'upsert', primary_key = 'id', auto_create = 'true')")
        conn.execute(f"CREATE SINK to_kafka FROM doubled WITH (connector = 'kafka', topic = '{topic}', "
                     f"properties.bootstrap.server = '{bootstrap}', primary_key = 'id') FORMAT UPSERT ENCODE JSON")
        figures = {"to_pg": [], "to_kafka": []}
        snapshot = {}
        for sink in figures:
            t0 = time.perf_counter()
            conn.refresh(sink)
            snapshot[sink] = n / (time.perf_counter() - t0)
        for epoch in range(1, epochs + 1):
            conn.insert("t", rows(n, epoch))  # every key replaced: N changed rows in the view
            t0 = time.perf_counter()
            conn.execute("FLUSH")
            flush = time.perf_counter() - t0
            for sink, rates in figures.items():
                t0 = time.perf_counter()
                conn.refresh(sink)
                rates.append(n / (time.perf_counter() - t0))
            print(f"epoch {epoch}: FLUSH of the views {flush:.2f}s; delivered {n} upserts: "
                  f"postgres {figures['to_pg'][-1]:,.0f} rows/s, kafka {figures['to_kafka'][-1]:,.0f} rows/s")
        check = admin.execute(f'SELECT count(*), sum(v2) FROM "{schema}".doubled').fetchone()
        assert check == (n, 2 * epochs * n), f"the PostgreSQL table is not the view: {check}"
        print(f"\nview changing {n:,} rows per epoch, {epochs} epochs, one process, in-process engine")
        print(f"snapshot ({n:,} inserts): postgres {snapshot['to_pg']:,.0f} rows/s, "
              f"kafka {snapshot['to_kafka']:,.0f} rows/s")
        for sink, label in (("to_pg", "postgres (COPY + upsert, one transaction)"),
                            ("to_kafka", "kafka (JSON, UPSERT, acks=all)")):
            print(f"{label}: median {statistics.median(figures[sink]):,.0f} rows/s "
                  f"(min {min(figures[sink]):,.0f}, max {max(figures[sink]):,.0f})")
        conn.close()
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
        if broker is not None:
            broker.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
