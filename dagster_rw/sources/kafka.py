"""A Kafka topic read by explicit offset ranges (kafka-python): end offsets, start offsets, splits.

No consumer group and no committed offsets in Kafka: the warehouse records the offsets it reached
with each epoch, so reading is a pure function of (partition, start, end).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ..errors import OperationalError

_CONSUMERS: dict[str, object] = {}  # one consumer per cluster, assigned the partitions of each read
_MAX_CONSUMERS = 8
_LOCK = threading.Lock()


@dataclass
class PartitionRecords:
    """The records of one partition between two offsets: their offsets and raw values."""

    partition: int
    offsets: list[int]
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
        the high watermark of a response that carried records at or after that offset.
        """
        from kafka import TopicPartition

        c = self._consumer()
        parts = [TopicPartition(self.topic, p) for p in self.partitions()]
        try:
            listed = {tp: int(o) for tp, o in c.end_offsets(parts).items()}
        except Exception as e:
            raise self._fail("cannot read end offsets", e) from None
        out = {tp.partition: 0 for tp in parts if listed[tp] == 0}
        waiting = [tp for tp in parts if listed[tp] > 0]
        if not waiting:
            return out
        with _LOCK:
            try:
                c.assign(waiting)
                for tp in waiting:
                    c.seek(tp, listed[tp] - 1)
                deadline = time.monotonic() + self.timeout
                pending = set(waiting)
                while pending:
                    if time.monotonic() > deadline:
                        raise self._fail("no fetch response for end offsets", f"partitions {sorted(t.partition for t in pending)}")
                    for tp, recs in c.poll(timeout_ms=200).items():
                        if tp in pending and recs and recs[-1].offset >= listed[tp] - 1:
                            hw = c.highwater(tp)
                            out[tp.partition] = max(int(hw) if hw is not None else 0, listed[tp])
                            pending.discard(tp)
            except OperationalError:
                raise
            except Exception as e:
                raise self._fail("cannot read end offsets", e) from None
            finally:
                c.assign([])
        return out

    def read(self, ranges: dict[int, tuple[int, int]]) -> list[PartitionRecords]:
        """Every record with start <= offset < end of each partition (partitions in ascending order)."""
        from kafka import TopicPartition

        ranges = {p: r for p, r in ranges.items() if r[1] > r[0]}
        out = {p: PartitionRecords(p, [], []) for p in sorted(ranges)}
        if not ranges:
            return list(out.values())
        c = self._consumer()
        tps = {p: TopicPartition(self.topic, p) for p in ranges}
        with _LOCK:
            try:
                c.assign(list(tps.values()))
                for p, tp in tps.items():
                    c.seek(tp, ranges[p][0])
                pending = set(ranges)
                last_progress = time.monotonic()
                while pending:
                    batch = c.poll(timeout_ms=500)
                    if batch:
                        last_progress = time.monotonic()
                    elif time.monotonic() - last_progress > self.timeout:
                        got = {p: (out[p].offsets[-1] + 1 if out[p].offsets else ranges[p][0]) for p in pending}
                        raise self._fail("records recorded in an epoch could not be read (retention?)",
                                         f"stalled at {got}, wanted up to {({p: ranges[p][1] for p in pending})}")
                    for tp, recs in batch.items():
                        p = tp.partition
                        if p not in pending:
                            continue
                        start, end = ranges[p]
                        part = out[p]
                        for r in recs:
                            if start <= r.offset < end:
                                part.offsets.append(r.offset)
                                part.values.append(r.value)
                        if c.position(tp) >= end:
                            pending.discard(p)
                            c.pause(tp)
            except OperationalError:
                raise
            except Exception as e:
                raise self._fail("cannot read records", e) from None
            finally:
                c.resume(*tps.values())
                c.assign([])
        return list(out.values())
