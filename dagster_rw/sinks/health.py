"""A sink's delivery health, kept beside its position: the last error (redacted), how many attempts in
a row failed, and when it last succeeded. Informational: the delivered position itself is committed in
the sink's manifest, never here."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass


@dataclass
class SinkHealth:
    retries: int = 0  # consecutive failed attempts since the last success
    last_error: str | None = None  # redacted; kept after a success for the record
    last_error_at: float | None = None
    failing_since: float | None = None  # first failure of the current run of failures; None when healthy
    last_success_at: float | None = None  # last refresh that delivered everything it set out to
    last_attempt_at: float | None = None
    rows_delivered: int = 0  # changes written to the target, over the sink's life in this warehouse

    def failed(self, message: str) -> None:
        now = time.time()
        self.retries += 1
        self.last_error, self.last_error_at, self.last_attempt_at = message, now, now
        if self.failing_since is None:
            self.failing_since = now

    def succeeded(self, rows: int) -> None:
        now = time.time()
        self.retries, self.failing_since = 0, None
        self.last_success_at = self.last_attempt_at = now
        self.rows_delivered += rows


def health_key(sink: str) -> str:
    from ..storage.catalog import key_name

    return f"sinks/{key_name(sink)}/health.json"


def load(store, sink: str) -> SinkHealth:
    try:
        return SinkHealth(**json.loads(store.read_bytes(health_key(sink))))
    except FileNotFoundError:
        return SinkHealth()


def save(store, sink: str, health: SinkHealth) -> None:
    store.write_bytes(health_key(sink), json.dumps(asdict(health)).encode())
