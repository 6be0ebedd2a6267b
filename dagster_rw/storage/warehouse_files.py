"""How a process other than the driver reaches a warehouse's files: a picklable description.

Spark executors read state and change files and write their own outputs without going through
the driver. They get a `WarehouseFiles` (inside the task's closure) and open the files with
pyarrow's file systems (the local file system for a folder the cluster shares; S3, with the
connection's endpoint and credentials, for a bucket) and upload to a bucket with boto3. `spark_url`, when set, is where Spark's own
Parquet reader finds the warehouse (`file:///shared/wh`, `s3a://bucket/prefix`); without it the
files are read by Python tasks. Credentials are kept out of `repr`, so they never reach a log, a
plan or an error message.
"""
from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from .local_files import move_into_place


@dataclass(frozen=True)
class WarehouseFiles:
    kind: str  # "local" or "s3"
    root: str  # local: the warehouse folder; s3: "bucket/prefix"
    spark_url: str | None = None  # where Spark's own reader finds the warehouse, if it can
    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    def path(self, key: str) -> str:
        """The object's path in filesystem()."""
        return f"{self.root.rstrip('/')}/{key}"

    def spark_path(self, key: str) -> str | None:
        """The object's URL for Spark's own reader, or None when Spark cannot read the warehouse."""
        return f"{self.spark_url.rstrip('/')}/{key}" if self.spark_url else None

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow file system reaching the warehouse (one per process and warehouse)."""
        with _lock:
            fs = _filesystems.get(self)
            if fs is None:
                fs = _filesystems[self] = self._open()
            return fs

    def _open(self) -> pafs.FileSystem:
        if self.kind == "local":
            return pafs.LocalFileSystem()
        options: dict = {"region": self.region or "us-east-1"}
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            if parsed.scheme:
                options.update(endpoint_override=parsed.netloc + parsed.path.rstrip("/"), scheme=parsed.scheme)
            else:
                options["endpoint_override"] = self.endpoint_url
        if self.access_key:
            options.update(access_key=self.access_key, secret_key=self.secret_key,
                           session_token=self.session_token)
        return pafs.S3FileSystem(**options)

    def open_input(self, key: str):
        """A random-access file for a Parquet reader (only the ranges it reads are fetched)."""
        return self.filesystem().open_input_file(self.path(key))

    def open_range(self, key: str, offset: int, length: int):
        """A file holding `length` bytes of object `key` from `offset` (a packed file)."""
        with self.filesystem().open_input_file(self.path(key)) as f:
            f.seek(offset)
            return pa.BufferReader(f.read(length))

    def put_file(self, local: str, key: str) -> None:
        """Publish a finished local file under `key`: whole or not at all, as the stores do."""
        if self.kind == "local":
            move_into_place(local, self.path(key))
            return
        bucket, _, prefix = self.root.partition("/")
        self.s3_client().upload_file(local, bucket, f"{prefix}/{key}" if prefix else key)
        os.unlink(local)

    def s3_client(self):
        """boto3's client for the bucket (uploads: one PUT, or a multipart upload for large files)."""
        with _lock:
            client = _clients.get(self)
            if client is None:
                import boto3

                client = _clients[self] = boto3.client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region,
                    aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                    aws_session_token=self.session_token)
            return client

    def scratch_file(self) -> str:
        """A fresh local path for a file being written (the executor's own temporary folder)."""
        import tempfile

        folder = os.path.join(tempfile.gettempdir(), "dagster_rw_task")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f"{uuid.uuid4().hex}.parquet")


_filesystems: dict[WarehouseFiles, pafs.FileSystem] = {}
_clients: dict[WarehouseFiles, object] = {}
_lock = threading.Lock()
