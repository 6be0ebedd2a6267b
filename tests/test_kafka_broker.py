"""The test broker itself: kafka-python can create a partitioned topic, produce to it and read it back."""
from __future__ import annotations

import uuid


def test_broker_round_trip(kafka_broker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    for p in range(3):
        kafka_broker.produce(topic, [f'{{"p": {p}, "i": {i}}}' for i in range(5)], partition=p)
    assert kafka_broker.end_offsets(topic) == {0: 5, 1: 5, 2: 5}
    recs = kafka_broker.consume_all(topic)
    assert [(r.partition, r.offset) for r in recs] == [(p, i) for p in range(3) for i in range(5)]
    assert recs[7].value == b'{"p": 1, "i": 2}'
