"""Fetch requests for a topic's partitions sent through a kafka-python consumer's connections.

kafka-python's protocol layer (metadata, SASL, connection retries) carries the requests; the
record sets of the responses are decoded in bulk (kafka_records), not through the consumer's poll,
which builds a Python object per record.

This module imports nothing of dagster_rw (only kafka-python, numpy and kafka_records), as the
modules Spark ships to its workers by value must not.
"""
from __future__ import annotations

import threading
import time

from . import kafka_records

_FETCH_BYTES = 64 << 20  # per fetch response (a broker may send less)
_PARTITION_FETCH_BYTES = 16 << 20
_FETCH_WAIT_MS = 100
_IN_FLIGHT = 3  # fetch requests of one read at a time (kafka-python allows 5 per connection)


def _fail(topic: str):
    def fail(what: str, cause) -> Exception:
        return RuntimeError(f"Kafka topic {topic!r}: {what}: {cause}")

    return fail


class Fetch:
    """Fetch requests sent through a consumer's connections (kafka-python's protocol layer), one
    per partition in flight at a time, and their answers in the order they were sent."""

    def __init__(self, consumer, topic: str, timeout: float, fail=None):
        self.topic = topic
        self.timeout = timeout  # without progress for this long, a read fails
        self.fail = fail or _fail(topic)  # (what, cause) -> the exception to raise
        self.manager = consumer._manager
        self.in_flight: dict[int, tuple[int, object, threading.Event]] = {}  # partition -> (offset, future, done)
        self.last_progress = time.monotonic()

    def send(self, p: int, offset: int) -> None:
        """Send partition p's fetch from `offset` (not when its leader is not known yet: then
        ask for the metadata, and the next send_all tries again)."""
        from kafka import TopicPartition
        from kafka.protocol.consumer import FetchRequest

        node = self.manager.cluster.leader_for_partition(TopicPartition(self.topic, p))
        if node is None or node == -1:
            self.manager.cluster.request_update()
            return
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=_PARTITION_FETCH_BYTES)
        request = FetchRequest(
            max_wait_ms=_FETCH_WAIT_MS, min_bytes=1, max_bytes=_FETCH_BYTES, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[part])],
            forgotten_topics_data=[], rack_id="", max_version=12)
        done = threading.Event()
        future = self.manager.call_soon(self.manager.send, request, node)
        future.add_both(lambda _: done.set())
        self.in_flight[p] = (offset, future, done)

    def send_all(self, positions: dict[int, int]) -> None:
        """A fetch for each partition of `positions` that has none in flight (a few at a time)."""
        for p in sorted(set(positions) - set(self.in_flight)):
            if len(self.in_flight) >= _IN_FLIGHT:
                break
            self.send(p, positions[p])

    def wait(self):
        """The answer to the oldest fetch: (partition, offset fetched, its partition data), the
        data None after a retriable failure. Raises when nothing moved for the topic's timeout."""
        from kafka import errors as Errors

        stalled = time.monotonic() - self.last_progress > self.timeout
        if not self.in_flight:  # no leader known yet: wait for the metadata
            if stalled:
                raise self.fail("cannot fetch", "no leader known for the topic's partitions")
            time.sleep(0.1)
            return None, None, None
        p = next(iter(self.in_flight))  # one connection answers in order; so, mostly, do several
        offset, future, done = self.in_flight.pop(p)
        if not done.wait(self.timeout + 30):
            raise self.fail("cannot fetch", f"no fetch response for partition {p}")
        if future.failed():
            if not isinstance(future.exception, Errors.RetriableError) or stalled:
                raise future.exception
            self.manager.cluster.request_update()
            time.sleep(0.1)
            return p, offset, None
        data = None
        for t in future.value.responses:
            for part in t.partitions:
                if t.topic == self.topic and part.partition_index == p:
                    data = part
        error = Errors.for_code(data.error_code) if data is not None else Errors.NoError
        if error is Errors.OffsetOutOfRangeError:
            raise self.fail("records recorded in an epoch could not be read (retention?)",
                                   f"offset {offset} of partition {p} is out of range")
        if error is not Errors.NoError:
            if not issubclass(error, Errors.RetriableError) or stalled:
                raise error(f"partition {p}")
            self.manager.cluster.request_update()
            time.sleep(0.1)
            return p, offset, None
        return p, offset, data

    def read(self, ranges: dict[int, tuple[int, int]], out: dict[int, list[kafka_records.Records]]) -> None:
        """The records of `ranges` into `out`. A partition's next fetch goes out as soon as a
        response's batch headers say where it stops, before its records are decoded."""
        position = {p: start for p, (start, _) in ranges.items()}
        pending = dict(position)
        while pending:
            self.send_all(pending)
            p, fetched, data = self.wait()
            if data is None:
                continue
            start, end = ranges[p]
            buf = data.records or b""
            nxt = kafka_records.next_offset(buf)
            if nxt is None or nxt <= fetched:
                if time.monotonic() - self.last_progress > self.timeout:
                    raise self.fail("records recorded in an epoch could not be read (retention?)",
                                           f"stalled at {({q: position[q] for q in pending})}, "
                                           f"wanted up to {({q: ranges[q][1] for q in pending})}")
                time.sleep(0.01)  # a broker that answers at once without records is not asked in a busy loop
                continue
            self.last_progress = time.monotonic()
            position[p] = nxt
            if nxt >= end:
                del pending[p]
            else:
                pending[p] = nxt
                self.send(p, nxt)
            records, _ = kafka_records.decode(buf, max(start, fetched), end)
            if len(records):
                out[p].append(records)
