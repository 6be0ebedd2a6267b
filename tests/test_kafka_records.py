"""The bulk decoder of Kafka record sets (sources.kafka_records) against kafka-python's own reading.

Record sets built by kafka-python's record builder (every message format, compression codecs,
control batches, a batch cut short at the end) decode to the records kafka-python's reader finds
in them; and over a real broker (Tansu), topics written by kafka-python's producers (several
batches, gzip and zstd batches, a committed transaction's marker, null keys and values, empty
values, headers, timestamps out of order) read by offset ranges to the same (partition, offset,
key, value, timestamp) as kafka-python's consumer reads.
"""
from __future__ import annotations

import random
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from dagster_rw.errors import OperationalError
from dagster_rw.sources import kafka_records
from dagster_rw.sources.kafka import KafkaTopic

CODECS = [0, 1] + ([4] if kafka_codec.has_zstd() else [])

big = st.integers(8200, 8300).map(lambda n: bytes(range(256)) * (n // 256))  # a 3-byte varint length
payloads = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.binary(min_size=60, max_size=300), big)
records_st = st.lists(st.tuples(st.integers(-5_000, 5_000), payloads, payloads,
                                st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=8))),
                                         max_size=2)),
                      min_size=1, max_size=12)
batches_st = st.lists(st.tuples(st.sampled_from([0, 1, 2, 2, 2]), st.sampled_from(CODECS), st.booleans(), records_st),
                      min_size=1, max_size=5)


def build(batches, base_ts=1_700_000_000_000):
    """A record set of `batches` (magic, codec, control, records), offsets from 0, and the
    offset after it."""
    out, offset = [], 0
    for magic, codec, control, records in batches:
        if magic < 2 and codec == 4:
            codec = 1  # the older formats predate zstd
        b = MemoryRecordsBuilder(magic, codec, batch_size=1 << 22, offset=offset)
        for ts, key, value, headers in records:
            if key is None and value is None:
                value = b""
            b.append(timestamp=base_ts + ts if magic else None, key=key, value=value,
                     headers=headers if magic == 2 else None)
        b.close()
        buf = bytearray(b.buffer())
        if magic == 2 and control:
            buf[22] |= kafka_records.CONTROL_MASK  # attributes' low byte: a transaction marker's batch
        out.append(bytes(buf))
        offset += len(records)
    return b"".join(out), offset


def reference(buf: bytes, start: int, end: int):
    """(offset, timestamp, key, value) of the records kafka-python's reader finds, as its consumer
    returns them (control batches skipped)."""
    out = []
    records = MemoryRecords(buf)
    while (batch := records.next_batch()) is not None:
        if getattr(batch, "is_control_batch", False):
            continue
        for r in batch:
            if start <= r.offset < end:
                out.append((r.offset, r.timestamp if r.timestamp is not None else -1, r.key, r.value))
    return out


def reference_next(buf: bytes):
    """The offset after the last complete batch, by kafka-python's reader."""
    nxt = None
    records = MemoryRecords(buf)
    while (batch := records.next_batch()) is not None:
        if batch.magic == 2:
            nxt = batch.base_offset + batch.last_offset_delta + 1
        else:
            nxt = max(r.offset for r in batch) + 1
    return nxt


def decoded(records: kafka_records.Records):
    return list(zip(records.offsets.tolist(), records.timestamps.tolist(), records.keys(), records.values()))


@settings(max_examples=80, deadline=None)
@given(batches=batches_st, cut=st.integers(0, 40), bounds=st.tuples(st.integers(0, 80), st.integers(0, 80)))
def test_record_sets_decode_as_kafka_python_reads_them(batches, cut, bounds):
    buf, total = build(batches)
    start, end = min(bounds), max(bounds)
    got, nxt = kafka_records.decode(buf, start, end)
    assert decoded(got) == reference(buf, start, end)
    assert nxt == total == kafka_records.next_offset(buf) == reference_next(buf)
    assert got.value_array().to_pylist() == got.values()
    # the values of several record sets (a partition's fetches) as one array, each set's buffer a view's
    halves = [got.take(np.arange(len(got)) < len(got) // 2), got, got.take(np.arange(len(got)) >= len(got) // 2)]
    assert kafka_records.value_array(halves).to_pylist() == [v for h in halves for v in h.values()]
    # a batch cut short at the end (a fetch response's size limit) is left for the next fetch
    last = len(buf) - len(build(batches[-1:])[0])
    short = buf[:len(buf) - 1 - cut % max(1, len(buf) - last)]
    got, nxt = kafka_records.decode(short, start, end)
    assert decoded(got) == reference(short, start, end)
    assert nxt == kafka_records.next_offset(short) == reference_next(short)


def test_a_record_set_that_breaks_the_format_is_refused():
    buf, _ = build([(2, 0, False, [(0, b"k", b"value", [])] * 3)])
    broken = bytearray(buf)
    broken[61] = 0x7E  # the first record's length: 63 bytes, past its batch
    with pytest.raises(kafka_records.CorruptRecords):
        kafka_records.decode(bytes(broken))
    unknown = bytearray(buf)
    unknown[22] |= 0x07  # compression codec 7: none such
    with pytest.raises(kafka_records.CorruptRecords, match="codec 7"):
        kafka_records.decode(bytes(unknown))


def test_topics_read_in_bulk_as_kafka_pythons_consumer_reads_them(kafka_broker):
    from kafka import KafkaProducer

    topic = f"r-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=3)
    rng = random.Random(7)

    def payload():
        kind = rng.random()
        if kind < 0.1:
            return None
        if kind < 0.2:
            return b""
        if kind < 0.3:
            return rng.randbytes(rng.randint(1, 9000))
        return f'{{"n": {rng.randint(0, 10**9)}, "s": "{"x" * rng.randint(0, 200)}"}}'.encode()

    producers = [dict(batch_size=700), dict(compression_type="gzip", batch_size=4000)]
    if kafka_codec.has_zstd():
        producers.append(dict(compression_type="zstd"))
    for config in producers:
        p = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, **config)
        for i in range(400):
            key, value = payload(), payload()
            if key is None and value is None:
                key = b"k"
            headers = [("h", rng.randbytes(3)), ("empty", b"")] if rng.random() < 0.3 else None
            ts = 1_700_000_000_000 + rng.randint(-10_000, 10_000) if rng.random() < 0.5 else None
            p.send(topic, key=key, value=value, headers=headers, partition=i % 3, timestamp_ms=ts)
        p.flush()
        p.close()
    p = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, transactional_id=f"tx-{topic}")
    p.init_transactions()
    p.begin_transaction()
    for i in range(30):
        p.send(topic, value=f'{{"tx": {i}}}'.encode(), partition=1)
    p.commit_transaction()  # a control batch (the commit marker) after the records
    p.close()
    kafka_broker.produce(topic, [b'{"last": 1}'], partition=1)

    expected = [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in kafka_broker.consume_all(topic)]
    ends = kafka_broker.end_offsets(topic)
    t = KafkaTopic(kafka_broker.bootstrap, topic)
    assert t.end_offsets() == ends
    assert ends[1] > sum(1 for r in expected if r[0] == 1)  # the marker takes an offset

    def read(ranges):
        out = []
        for p, parts in sorted(t.read_records(ranges).items()):
            for r in parts:
                out.extend((p, o, k, v, ts) for o, ts, k, v in decoded(r))
        return out

    assert read({p: (0, e) for p, e in ends.items()}) == expected
    plain = t.read({p: (0, e) for p, e in ends.items()})
    assert [(pr.partition, o, v) for pr in plain for o, v in zip(pr.offsets.tolist(), pr.values)] == \
        [(p, o, v) for p, o, _, v, _ in expected]
    for _ in range(6):  # ranges that start and stop inside batches
        ranges = {}
        for p, e in ends.items():
            a, b = sorted(rng.randint(0, e) for _ in range(2))
            ranges[p] = (a, b)
        assert read(ranges) == [r for r in expected if ranges[r[0]][0] <= r[1] < ranges[r[0]][1]]


def test_reading_past_the_end_fails_naming_the_topic(kafka_broker):
    topic = f"r-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=1)
    kafka_broker.produce(topic, [b"a", b"b"])
    t = KafkaTopic(kafka_broker.bootstrap, topic, timeout=1.0)
    assert [list(p.values) for p in t.read({0: (1, 2)})] == [[b"b"]]
    with pytest.raises(OperationalError, match=topic):
        t.read({0: (0, 5)})
    assert np.asarray(t.read({0: (0, 2)})[0].offsets).tolist() == [0, 1]
