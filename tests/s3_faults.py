"""S3 faults injected where they happen: in the store's botocore client, through its `before-send`
event, against moto's real HTTP server.

    faults = S3Faults(store.client)
    faults.arm("PUT", "503", times=2)          # the next two PUTs answer 503 SlowDown
    faults.arm("GET", "reset", times=None)     # every GET from now on: the connection drops
    faults.disarm()

Kinds: "500" (InternalError), "503" (SlowDown), "reset" (the connection closes before an answer),
"timeout" (no answer in time), "landed" (a PUT that reaches S3, whose answer is lost: a read
timeout after the object was written). Requests are counted by kind: GET (GetObject, HeadObject),
PUT (PutObject, uploads), LIST (ListObjectsV2), DELETE.
"""
from __future__ import annotations

import threading

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

KINDS = ("500", "503", "reset", "timeout", "landed")
_OPS = {"GetObject": "GET", "HeadObject": "GET", "PutObject": "PUT", "UploadPart": "PUT",
        "CreateMultipartUpload": "PUT", "CompleteMultipartUpload": "PUT", "ListObjectsV2": "LIST",
        "DeleteObject": "DELETE", "DeleteObjects": "DELETE"}
_BODIES = {"500": (500, "InternalError", "We encountered an internal error. Please try again."),
           "503": (503, "SlowDown", "Please reduce your request rate.")}


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_):
        yield self.body


class S3Faults:
    def __init__(self, client):
        self.client = client
        self.lock = threading.Lock()
        self.armed: dict[str, tuple[str, int | None, object]] = {}  # op -> (kind, times left or None, predicate)
        self.fired: list[tuple[str, str, str]] = []  # (op, kind, key)
        self.requests: dict[str, int] = {}
        client.meta.events.register("before-send.s3", self._before_send)

    def arm(self, op: str, kind: str, times: int | None = 1, when=None) -> None:
        """Fail the next `times` requests of `op` (None: every one until disarmed) with `kind`;
        `when(request)`: only requests it accepts."""
        assert kind in KINDS and op in set(_OPS.values())
        with self.lock:
            self.armed[op] = (kind, times, when)

    def disarm(self) -> None:
        with self.lock:
            self.armed.clear()

    def close(self) -> None:
        self.disarm()
        self.client.meta.events.unregister("before-send.s3", self._before_send)

    def _before_send(self, request, event_name=None, **_):
        op = _OPS.get(event_name.rsplit(".", 1)[-1], "OTHER")
        with self.lock:
            self.requests[op] = self.requests.get(op, 0) + 1
            armed = self.armed.get(op)
            if armed is None or (armed[2] is not None and not armed[2](request)):
                return None
            kind, times, when = armed
            if times is not None:
                if times <= 1:
                    del self.armed[op]
                else:
                    self.armed[op] = (kind, times - 1, when)
            self.fired.append((op, kind, request.url.split("?")[0]))
        if kind in _BODIES:
            status, code, message = _BODIES[kind]
            body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}"
                    f"</Message></Error>").encode()
            return AWSResponse(request.url, status, {"Content-Type": "application/xml"}, _Raw(body))
        if kind == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        if kind == "landed":
            import urllib3

            body = request.body
            if hasattr(body, "read"):
                position = body.tell()
                data = body.read()
                body.seek(position)
                body = data
            urllib3.PoolManager().request(request.method, request.url, body=body,
                                          headers=dict(request.headers.items()))
        raise ReadTimeoutError(endpoint_url=request.url)


def conditional(request) -> bool:
    """A conditional PUT (If-None-Match: a commit)."""
    return "If-None-Match" in request.headers
