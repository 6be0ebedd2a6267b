"""One deliverer per sink at a time: a lease in the object store, taken by put-if-absent.

Two processes delivering the same sink at once could write an older batch after a newer one and leave
the target behind the view, so a delivery first takes the sink's lease. A lease names its holder
(host, process, a random token) and an expiry; it is renewed after every committed batch. A lease
whose holder is a dead process on this host, or whose time ran out, is taken over.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass

from ..errors import OperationalError

DEFAULT_SECONDS = 300.0


def lease_key(sink: str) -> str:
    from ..storage.catalog import key_name

    return f"sinks/{key_name(sink)}/lease.json"


@dataclass
class Lease:
    store: object
    sink: str
    token: str
    seconds: float

    def _document(self) -> bytes:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                           "expires": time.time() + self.seconds}).encode()

    def renew(self) -> None:
        holder = _holder(self.store, self.sink)
        if holder is None or holder.get("token") != self.token:
            raise OperationalError(f"sink {self.sink!r}: another process took over its delivery "
                                   "(this process held the lease too long); nothing more was committed here")
        self.store.write_bytes(lease_key(self.sink), self._document())

    def release(self) -> None:
        holder = _holder(self.store, self.sink)
        if holder is not None and holder.get("token") == self.token:
            self.store.delete(lease_key(self.sink))


def _holder(store, sink: str) -> dict | None:
    try:
        return json.loads(store.read_bytes(lease_key(sink)))
    except (FileNotFoundError, ValueError):
        return None


def _stale(holder: dict) -> bool:
    if holder.get("expires", 0) < time.time():
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True  # its process is gone (killed mid-delivery)
        except (PermissionError, KeyError, ValueError):
            return False
    return False


def acquire(store, sink: str, seconds: float = DEFAULT_SECONDS) -> Lease:
    """The sink's lease, or OperationalError naming who holds it."""
    lease = Lease(store, sink, uuid.uuid4().hex, seconds)
    for _ in range(3):
        if store.put_if_absent(lease_key(sink), lease._document()):
            return lease
        holder = _holder(store, sink)
        if holder is None:
            continue  # released meanwhile
        if not _stale(holder):
            raise OperationalError(
                f"sink {sink!r} is being delivered by process {holder.get('pid')} on {holder.get('host')} "
                f"(lease until {time.strftime('%H:%M:%S', time.localtime(holder.get('expires', 0)))}); "
                "try again later")
        store.delete(lease_key(sink))
    raise OperationalError(f"sink {sink!r}: could not take its delivery lease; try again later")
