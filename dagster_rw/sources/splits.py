"""Splits: a large epoch's offset ranges cut into pieces that Spark tasks read in parallel.

Each task reads the raw records of its splits (partition, offset, value) as the in-process read
does: fetch requests through its own consumer's connections, record batches decoded in bulk
(kafka_fetch, kafka_records), the values one Arrow array; it returns them as Arrow batches, and
decoding stays vectorized on the driver. Reading a split is a pure function of (partition, start,
end), so the result equals the in-process read, whatever the number of tasks. This module, like
the two it reads with, imports nothing else of dagster_rw: Spark ships the three by value to the
workers (local or behind Spark Connect), which need only kafka-python, numpy and pyarrow.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import kafka_fetch, kafka_records

SPLIT_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary())])


def cut(ranges: dict[int, tuple[int, int]], max_records: int) -> list[tuple[int, int, int]]:
    """The ranges as (partition, start, end) pieces of at most `max_records` offsets each."""
    out = []
    for p, (start, end) in sorted(ranges.items()):
        at = start
        while at < end:
            out.append((p, at, min(end, at + max_records)))
            at = min(end, at + max_records)
    return out


def read_split(bootstrap: str, topic: str, partition: int, start: int, end: int, timeout: float = 30.0,
               security: dict | None = None) -> pa.RecordBatch:
    """Every record with start <= offset < end of one partition, as one Arrow batch (`security`:
    kafka-python's security_protocol and sasl_* settings, see sources.kafka)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, client_id="dagster-rw",
                      request_timeout_ms=15_000, **(security or {}))
    out: dict[int, list[kafka_records.Records]] = {partition: []}
    try:
        c.assign([TopicPartition(topic, partition)])  # the topic's metadata (its leaders) is then asked for
        if end > start:
            kafka_fetch.Fetch(c, topic, timeout).read({partition: (start, end)}, out)
    finally:
        c.close()
    parts = out[partition]
    offsets = np.concatenate([r.offsets for r in parts]) if parts else np.zeros(0, np.int64)
    values = kafka_records.value_array(parts)
    return pa.record_batch([pa.array(np.full(len(offsets), partition, np.int32)), pa.array(offsets, pa.int64()),
                            values.cast(pa.binary())], schema=SPLIT_SCHEMA)


def read_on_spark(spark, bootstrap: str, topic: str, splits: list[tuple[int, int, int]],
                  security: dict | None = None) -> pa.Table:
    """Read the splits in parallel Spark tasks (one task per split); rows in split order. The
    tasks get `security` (the SASL password in clear) with their closure, as they get the
    addresses."""
    import sys

    from pyspark import cloudpickle

    for module in (kafka_records, kafka_fetch, sys.modules[__name__]):
        cloudpickle.register_pickle_by_value(module)

    def read_batches(batches):
        for batch in batches:
            for p, s, e in zip(*(batch.column(i).to_pylist() for i in range(3))):
                yield read_split(bootstrap, topic, p, s, e, security=security)

    df = spark.createDataFrame([tuple(s) for s in splits], "partition int, start long, end long") \
        .repartition(len(splits))
    out = df.mapInArrow(read_batches, "partition int, offset long, value binary")
    table = out.toArrow() if hasattr(out, "toArrow") else pa.Table.from_pandas(out.toPandas(), preserve_index=False)
    return table.cast(SPLIT_SCHEMA).sort_by([("partition", "ascending"), ("offset", "ascending")])
