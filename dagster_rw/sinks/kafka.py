"""The Kafka connector (kafka-python): one message per change, JSON-encoded; the message key is the
sink's primary key as a JSON object. FORMAT UPSERT writes a delete as a tombstone (a null value);
FORMAT PLAIN writes inserted rows only. A batch is acknowledged when the broker acknowledged every
message of it (acks=all)."""
from __future__ import annotations

from . import json_rows
from .key_conversion import OP, UPSERT_OP
from .target import Changes, Target, TargetError


class KafkaTarget(Target):
    def __init__(self, spec, columns):
        o = spec.options
        self.topic = o["topic"]
        self.bootstrap = o["properties.bootstrap.server"]
        self.max_bytes = int(o.get("properties.message.max.bytes", 1_048_576))
        self.bootstrap_timeout_ms = int(o.get("properties.bootstrap.timeout.ms", 10_000))
        self.description = f"kafka topic {self.topic!r} at {self.bootstrap}"
        self.producer = None

    def _producer(self):
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        if self.producer is None:
            try:
                self.producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=20,
                                              batch_size=256 * 1024, max_request_size=self.max_bytes,
                                              retries=0, request_timeout_ms=15000, max_block_ms=15000,
                                              bootstrap_timeout_ms=self.bootstrap_timeout_ms)
            except KafkaError as e:
                raise TargetError(f"cannot connect: {e}") from None
        return self.producer

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=5)
            self.producer = None

    def write(self, changes: Changes) -> None:
        from kafka.errors import KafkaError

        producer = self._producer()
        key_cols = changes.key
        futures = []
        try:
            for row in changes.table.to_pylist():
                op = row.pop(OP)
                key = json_rows.encode({k: row[k] for k in key_cols}) if key_cols else None
                value = json_rows.encode(row) if op == UPSERT_OP else None
                futures.append(producer.send(self.topic, key=key, value=value))
            producer.flush(timeout=60)
            for f in futures:
                f.get(timeout=0)  # raises the error of a message the broker did not acknowledge
        except KafkaError as e:
            self.close()
            raise TargetError(f"not acknowledged: {e}") from None
