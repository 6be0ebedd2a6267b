"""A throwaway S3 for tests: moto's threaded server on a free loopback port, with fake credentials.

    with MotoS3() as s3:          # or s3.start() / s3.stop()
        s3.create_bucket("warehouse")
        url = s3.url("warehouse", "some/prefix")   # s3://warehouse/some/prefix
        s3.env                                      # what a child process needs to reach it

While it runs, the process environment points boto3 at it (AWS_ENDPOINT_URL, fake keys, a region),
so `dagster_rw.connect("s3://...")` needs no options; stop() restores the previous environment.
Child processes inherit that environment (or take `s3.env` explicitly).
"""
from __future__ import annotations

import logging
import os
import socket
import uuid

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class MotoS3:
    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.port: int | None = None
        self.endpoint: str | None = None
        self._server = None
        self._saved_env: dict[str, str | None] = {}

    @property
    def env(self) -> dict[str, str]:
        return {**ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> MotoS3:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request
        last = None
        for _ in range(5):  # the port is free when picked; retry in the rare case someone takes it first
            self.port = free_port(self.host)
            server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
            try:
                server.start()
            except OSError as e:
                last = e
                continue
            self._server = server
            break
        else:
            raise RuntimeError(f"could not start moto's S3 server: {last}")
        self.endpoint = f"http://{self.host}:{self.port}"
        for k, v in self.env.items():
            self._saved_env[k] = os.environ.get(k)
            os.environ[k] = v
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}

    def __enter__(self) -> MotoS3:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=ENV["AWS_DEFAULT_REGION"],
                            aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"])

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    @staticmethod
    def url(bucket: str, prefix: str | None = None) -> str:
        """`s3://bucket/prefix`, with a fresh unique prefix when none is given."""
        return f"s3://{bucket}/{prefix or 'wh-' + uuid.uuid4().hex[:12]}"
