"""Splits: a large epoch's offset ranges cut into pieces that Spark tasks read in parallel.

Each task reads the raw records of its splits (partition, offset, value) with its own consumer and
returns them as Arrow batches; decoding stays vectorized on the driver. Reading a split is a pure
function of (partition, start, end), so the result equals the in-process read, whatever the
number of tasks. This module imports nothing of dagster_rw: Spark ships its functions by value
to the workers (local or behind Spark Connect), which need only kafka-python and pyarrow.
"""
from __future__ import annotations

import pyarrow as pa

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
    import time

    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, check_crcs=False,
                      max_poll_records=200_000, fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20,
                      fetch_max_wait_ms=100, auto_offset_reset="earliest", **(security or {}))
    offsets, values = [], []
    try:
        c.assign([tp])
        c.seek(tp, start)
        last = time.monotonic()
        while c.position(tp) < end:
            recs = c.poll(timeout_ms=500).get(tp, [])
            if recs:
                last = time.monotonic()
            elif time.monotonic() - last > timeout:
                raise RuntimeError(f"Kafka topic {topic!r} partition {partition}: records {start}..{end} could "
                                   f"not be read (stalled at {c.position(tp)})")
            for r in recs:
                if start <= r.offset < end:
                    offsets.append(r.offset)
                    values.append(r.value)
    finally:
        c.close()
    return pa.record_batch([pa.array([partition] * len(offsets), pa.int32()), pa.array(offsets, pa.int64()),
                            pa.array(values, pa.binary())], schema=SPLIT_SCHEMA)


def read_on_spark(spark, bootstrap: str, topic: str, splits: list[tuple[int, int, int]],
                  security: dict | None = None) -> pa.Table:
    """Read the splits in parallel Spark tasks (one task per split); rows in split order. The
    tasks get `security` (the SASL password in clear) with their closure, as they get the
    addresses."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def read_batches(batches):
        for batch in batches:
            for p, s, e in zip(*(batch.column(i).to_pylist() for i in range(3))):
                yield read_split(bootstrap, topic, p, s, e, security=security)

    df = spark.createDataFrame([tuple(s) for s in splits], "partition int, start long, end long") \
        .repartition(len(splits))
    out = df.mapInArrow(read_batches, "partition int, offset long, value binary")
    table = out.toArrow() if hasattr(out, "toArrow") else pa.Table.from_pandas(out.toPandas(), preserve_index=False)
    return table.cast(SPLIT_SCHEMA).sort_by([("partition", "ascending"), ("offset", "ascending")])
