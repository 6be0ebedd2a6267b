"""A Kafka topic read by explicit offset ranges (kafka-python): end offsets, start offsets, splits.

No consumer group and no committed offsets in Kafka: the warehouse records the offsets it reached
with each epoch, so reading is a pure function of (partition, start, end).

Records are not read through the consumer's poll, which builds a Python object per record: fetch
requests go out through the consumer's connections (its protocol layer: metadata, SASL, retries
of the connection) and the record sets they return are decoded in bulk (kafka_records).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from ..errors import OperationalError
from . import kafka_records
from .kafka_fetch import Fetch

_CONSUMERS: dict[str, object] = {}  # one consumer per cluster and login, its connections shared by reads
_MAX_CONSUMERS = 8
_LOCK = threading.Lock()


@dataclass
class PartitionRecords:
    """The records of one partition between two offsets: their offsets (int64) and raw values."""

    partition: int
    offsets: np.ndarray
    values: list[bytes | None]


def redact(text: str, security: dict | None) -> str:
    """`text` (a message of kafka-python's) with the SASL password cut out."""
    password = (security or {}).get("sasl_plain_password")
    return text.replace(password, "***") if password else text


def _consumer(bootstrap: str, topic: str, fresh: bool = False, timeout: float = 20.0, security: dict | None = None):
    """A consumer of the cluster at `bootstrap`; `security`: kafka-python's security_protocol and
    sasl_* settings, the password in clear (runtime.ingest.client_security)."""
    try:
        from kafka import KafkaConsumer
    except ImportError:
        raise OperationalError(f"Kafka topic {topic!r}: Kafka sources need kafka-python "
                               "(pip install 'dagster-rw[kafka]')") from None

    security = security or {}
    key = (bootstrap, tuple(sorted(security.items())))  # in memory only: one consumer per cluster and login
    with _LOCK:
        c = None if fresh else _CONSUMERS.get(key)
        if c is None:
            try:
                c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                  client_id="dagster-rw", max_poll_records=200_000, fetch_max_bytes=64 << 20,
                                  max_partition_fetch_bytes=16 << 20, fetch_max_wait_ms=100,
                                  request_timeout_ms=15_000, auto_offset_reset="earliest",
                                  check_crcs=False, bootstrap_timeout_ms=int(timeout * 1000), **security)
            except Exception as e:
                raise OperationalError(f"Kafka at {bootstrap!r} (topic {topic!r}) is unreachable: "
                                       f"{redact(str(e), security)}") from None
            if not fresh:
                while len(_CONSUMERS) >= _MAX_CONSUMERS:  # clusters long gone (tests) or rarely used
                    _CONSUMERS.pop(next(iter(_CONSUMERS))).close()
                _CONSUMERS[key] = c
        return c


class KafkaTopic:
    """One topic on one cluster. Methods raise OperationalError naming the topic when Kafka fails."""

    def __init__(self, bootstrap: str, topic: str, timeout: float = 10.0, security: dict | None = None):
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout = timeout
        self.security = security or {}  # see _consumer

    def _fail(self, what: str, cause) -> OperationalError:
        return OperationalError(f"Kafka topic {self.topic!r} at {self.bootstrap!r}: {what}: "
                                f"{redact(str(cause), self.security)}")

    def _consumer(self):
        return _consumer(self.bootstrap, self.topic, timeout=self.timeout, security=self.security)

    def partitions(self) -> list[int]:
        c = self._consumer()
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                parts = c.partitions_for_topic(self.topic)
            except Exception as e:
                raise self._fail("cannot list partitions", e) from None
            if parts:
                return sorted(parts)
            if time.monotonic() > deadline:
                raise self._fail("cannot list partitions", "the topic does not exist")
            time.sleep(0.2)

    def start_offsets(self) -> dict[int, int]:
        from kafka import TopicPartition

        c = self._consumer()
        parts = [TopicPartition(self.topic, p) for p in self.partitions()]
        try:
            return {tp.partition: int(o) for tp, o in c.beginning_offsets(parts).items()}
        except Exception as e:
            raise self._fail("cannot read start offsets", e) from None

    def end_offsets(self) -> dict[int, int]:
        """The true end offset (high watermark) of every partition.

        ListOffsets(latest) is not trusted (Tansu answers the base offset of the last batch plus
        one); a fetch response's high watermark is. So fetch from one before the listed end and take
        the high watermark of a response that carried a batch ending at or after that offset (a
        transaction marker counts: it holds no record for a reader, but it has an offset).
        """
        from kafka import TopicPartition

        c = self._consumer()
        parts = [TopicPartition(self.topic, p) for p in self.partitions()]
        try:
            listed = {tp.partition: int(o) for tp, o in c.end_offsets(parts).items()}
        except Exception as e:
            raise self._fail("cannot read end offsets", e) from None
        out = {p: 0 for p, o in listed.items() if o == 0}
        waiting = {p: o - 1 for p, o in listed.items() if o > 0}
        if not waiting:
            return out
        with _LOCK:
            try:
                fetch = Fetch(c, self.topic, self.timeout, self._fail)
                deadline = time.monotonic() + self.timeout
                while waiting:
                    if time.monotonic() > deadline:
                        raise self._fail("no fetch response for end offsets", f"partitions {sorted(waiting)}")
                    fetch.send_all(waiting)
                    p, at, data = fetch.wait()
                    nxt = kafka_records.next_offset(data.records or b"") if data is not None else None
                    if nxt is not None and nxt > at:
                        out[p] = max(int(data.high_watermark), listed[p])
                        del waiting[p]
            except OperationalError:
                raise
            except Exception as e:
                raise self._fail("cannot read end offsets", e) from None
        return out

    def read(self, ranges: dict[int, tuple[int, int]]) -> list[PartitionRecords]:
        """Every record with start <= offset < end of each partition (partitions in ascending order)."""
        out = []
        records = self.read_records(ranges)
        for p in sorted(records):
            parts = records.pop(p)
            offsets = np.concatenate([r.offsets for r in parts]) if parts else np.zeros(0, np.int64)
            values: list[bytes | None] = []
            while parts:  # each response's buffer goes as soon as its values are out
                values.extend(parts.pop(0).values())
            out.append(PartitionRecords(p, offsets, values))
        return out

    def read_records(self, ranges: dict[int, tuple[int, int]]) -> dict[int, list[kafka_records.Records]]:
        """The records with start <= offset < end of each partition, decoded in bulk from the
        record sets of fetch requests sent through kafka-python's connections: one request per
        partition in flight at a time, the next one sent as soon as a response's batch headers
        say where it stops, before its records are decoded."""
        ranges = {p: r for p, r in ranges.items() if r[1] > r[0]}
        out: dict[int, list[kafka_records.Records]] = {p: [] for p in ranges}
        if not ranges:
            return out
        c = self._consumer()
        with _LOCK:
            try:
                Fetch(c, self.topic, self.timeout, self._fail).read(ranges, out)
            except OperationalError:
                raise
            except kafka_records.CorruptRecords as e:
                raise self._fail("cannot decode records", e) from None
            except Exception as e:
                raise self._fail("cannot read records", e) from None
        return out
