"""The object store under a warehouse: a local folder or an S3 prefix, with an atomic put-if-absent.

Every commit in dagster-rw (catalog versions, epochs, manifests) is a put-if-absent of a new
versioned key: an atomic hard link on local disk, a conditional put (IfNoneMatch) on S3.
Data files are immutable once written, so a local cache of S3 objects never goes stale.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlparse

from ..errors import OperationalError
from . import pack
from .local_files import disk_full_error, is_disk_full, move_into_place


class ObjectStore:
    url: str
    packs_files = False  # whether a commit's small files go into one packed object (storage.pack)
    locate_packed = None  # key -> (pack key, layout) | None, for packed files (set by storage.log)

    def read_bytes(self, key: str) -> bytes: ...
    def read_range(self, key: str, offset: int, length: int) -> bytes: ...
    def write_bytes(self, key: str, data: bytes, durable: bool = True) -> None: ...
    def put_if_absent(self, key: str, data: bytes) -> bool: ...
    def list(self, prefix: str) -> list[str]: ...
    def list_modified(self, prefix: str) -> list[tuple[str, float]]:
        """(key, last modified as a Unix time) of the objects under `prefix`, partial writes a
        crash left included (for the sweep, storage/sweep.py)."""
        ...
    def delete(self, key: str) -> None: ...
    def exists(self, key: str) -> bool: ...
    def local_path(self, key: str) -> str: ...
    def upload_file(self, path: str, key: str) -> None: ...

    def cache_path(self, key: str) -> str:
        """Where local_path() finds the object, without fetching it (it may not exist yet)."""
        return self.local_path(key)

    def path_for_cache(self, key: str) -> str:
        """The path sst_cache knows the object by, for reading through it: local_path(), except
        that a copy this process has not written yet stays unwritten (the cache writes it if it
        must read the file: pack.ensure_copy)."""
        return self.local_path(key)

    def known_whole(self, key: str) -> None:
        """This process put packed file `key`'s copy in place itself (storage.pack): whole."""

    def write_copies(self) -> None:
        """Write the copies of packed files this process left unwritten (`lazy_copies`)."""

    def scratch_dir(self) -> str:
        d = os.path.join(tempfile.gettempdir(), "dagster_rw_scratch")
        os.makedirs(d, exist_ok=True)
        return d

    def local_folders(self) -> list[str]:
        """The folders that local_path() and scratch_dir() give paths in: all the in-process
        engine may read or write for this store (its DuckDB reaches no other file)."""
        return [self.scratch_dir()]

    def warehouse_files(self):
        """How Spark executors reach this store's files (storage.warehouse_files.WarehouseFiles)."""
        raise NotImplementedError

    def parquet_rows(self, key: str) -> int:
        """A Parquet object's row count, from its footer."""
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.local_path(key)).metadata.num_rows


_WHOLE_KEPT = 100_000  # packed files a LocalStore remembers having found whole


class LocalStore(ObjectStore):
    packs_files = True  # a FLUSH's small files: one fsync for all of them, not one each
    lazy_copies = True  # their copies in the folder: written when something reads them from disk

    def __init__(self, root: str, spark_url: str | None = None):
        self.root = os.path.abspath(root)
        self._prefix = os.path.join(self.root, "")
        self.url = self.root
        self.spark_url = spark_url
        self._whole: set[str] = set()  # packed files whose copy was found whole (storage.pack)
        os.makedirs(self.root, exist_ok=True)

    def warehouse_files(self):
        """Executors read and write the folder itself: on a cluster it must be shared (the same
        path on every host, or `spark_url` naming where the cluster mounts it)."""
        from .warehouse_files import WarehouseFiles

        return WarehouseFiles("local", self.root, spark_url=self.spark_url or f"file://{self.root}")

    def _path(self, key: str) -> str:
        return self._prefix + key  # (os.path.join's checks cost more than the rest of a cached lookup)

    def read_bytes(self, key: str) -> bytes:
        with open(self._path(key), "rb") as f:
            return f.read()

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        with open(self._path(key), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def write_bytes(self, key: str, data: bytes, durable: bool = True) -> None:
        """Replace the object atomically; synced to disk first unless not `durable` (a hint a
        crash may lose: an fsync also commits the file system's journal, deletions and all)."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if is_disk_full(e):
                raise disk_full_error(e, f"writing {key} in {self.root}") from e
            raise

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)  # atomic, and fails if the key exists
            return True
        except FileExistsError:
            return False
        except OSError as e:
            if is_disk_full(e):
                raise disk_full_error(e, f"committing {key} in {self.root}") from e
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not os.path.isdir(base):
            return []
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.endswith(".tmp"):
                    continue
                full = os.path.join(dirpath, name)
                out.append(os.path.relpath(full, self.root).replace(os.sep, "/"))
        return sorted(out)

    def list_modified(self, prefix: str) -> list[tuple[str, float]]:
        base = self._path(prefix)
        out = []
        for dirpath, _dirs, files in os.walk(base):  # (nothing when the folder is absent)
            for name in files:  # `.tmp` files too: a write a crash cut short is never renamed
                full = os.path.join(dirpath, name)
                try:
                    modified = os.stat(full).st_mtime
                except FileNotFoundError:  # renamed or deleted since: not there to sweep
                    continue
                out.append((os.path.relpath(full, self.root).replace(os.sep, "/"), modified))
        return sorted(out)

    def delete(self, key: str) -> None:
        pack.drop_copy(self._path(key))
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def delete_gradually(self, key: str) -> None:
        """delete(), a large file first shrunk a slice at a time: freeing all of its blocks at once
        holds up every fsync on the file system meanwhile (commits of steps stall for a tenth of a
        second per few hundred megabytes), as RocksDB's rate-limited deletions also avoid. Only for
        garbage past its grace period: unlike an unlink, shrinking also cuts off a reader that still
        has the file open."""
        path = self._path(key)
        pack.drop_copy(path)
        try:
            size = os.path.getsize(path)
            while size > _SHRINK_STEP:
                size -= _SHRINK_STEP
                os.truncate(path, size)
                time.sleep(_SHRINK_PAUSE)
        except FileNotFoundError:
            return
        self.delete(key)

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def cache_path(self, key: str) -> str:
        return self._path(key)

    def write_copies(self) -> None:
        pack.write_copies(self.root)

    def path_for_cache(self, key: str) -> str:
        path = self._path(key)
        return path if pack.copy_pending(path) else self.local_path(key)

    def local_path(self, key: str) -> str:
        path = self._path(key)
        pack.ensure_copy(path)  # a packed file of this process whose copy is not written yet
        if self.locate_packed is None or key in self._whole:
            return path
        where = self.locate_packed(key)
        if where is not None:
            if not pack.whole(path, key, where[1]):  # lost or cut short in a crash of the machine
                pack.restore(self, key, *where)
            self.known_whole(key)
        return path

    def known_whole(self, key: str) -> None:
        if len(self._whole) >= _WHOLE_KEPT:
            self._whole.clear()
        self._whole.add(key)

    def local_folders(self) -> list[str]:
        return [self.root, self.scratch_dir()]

    def upload_file(self, path: str, key: str) -> None:
        try:
            move_into_place(path, self._path(key))
        except OSError as e:
            if is_disk_full(e):
                raise disk_full_error(e, f"writing {key} in {self.root}") from e
            raise


def _not_found(error) -> bool:
    return error.response.get("Error", {}).get("Code", "") in ("404", "NoSuchKey", "NotFound")


# S3 requests are retried by botocore's standard mode: 500, 502, 503 and 504 answers, throttling
# (503 SlowDown), timeouts and dropped connections, with exponential backoff and jitter (up to 1 s
# before the second attempt, doubling, at most 20 s). What still fails after the last attempt is an
# OperationalError naming the request and the key.
S3_MAX_ATTEMPTS = 6
S3_CONNECT_TIMEOUT = 10.0
S3_READ_TIMEOUT = 60.0


def s3_config(max_attempts: int | None = None):
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": max_attempts or S3_MAX_ATTEMPTS},
                  connect_timeout=S3_CONNECT_TIMEOUT, read_timeout=S3_READ_TIMEOUT)


def _failure(e: Exception) -> str:
    """What went wrong in an S3 request, for a message (the code and status, or the exception)."""
    from botocore.exceptions import ClientError

    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        meta = e.response.get("ResponseMetadata", {})
        status = meta.get("HTTPStatusCode")
        attempts = meta.get("RetryAttempts", 0) + 1
        return f"{err.get('Code', '?')}{f' (HTTP {status})' if status else ''} after {attempts} attempt(s)"
    return f"{type(e).__name__}: {e}"


class S3Store(ObjectStore):
    packs_files = True  # a request per file is what small epochs cost most on S3

    def __init__(self, url: str, endpoint_url: str | None = None, client=None, cache_dir: str | None = None,
                 spark_url: str | None = None, **client_options):
        import boto3

        parsed = urlparse(url)
        self.url = url
        self.spark_url = spark_url
        self._client_options = {k: v for k, v in client_options.items() if v}
        self._files = None
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self._endpoint_url = endpoint_url
        self._own_client = client is None
        self.client = client or boto3.client("s3", endpoint_url=endpoint_url, config=s3_config(),
                                                   **{k: v for k, v in client_options.items() if v})
        from ..after_fork import track_store

        track_store(self)
        digest = hashlib.sha1(url.encode()).hexdigest()[:12]
        self.cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "dagster_rw_cache", digest)
        os.makedirs(self.cache_dir, exist_ok=True)

    def reopen_after_fork(self) -> None:
        """In a forked child: a client of its own (a boto3 client's connections are the parent's);
        a client the caller passed in stays as it is."""
        if not self._own_client:
            return
        import boto3

        from ..after_fork import keep

        keep(self.client)
        self.client = boto3.client("s3", endpoint_url=self._endpoint_url, config=s3_config(),
                                   **self._client_options)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _packed(self, key: str):
        return self.locate_packed(key) if self.locate_packed is not None else None

    def parquet_rows(self, key: str) -> int:
        """From the local copy if there is one, else from the footer alone (ranged reads)."""
        import pyarrow.parquet as pq

        path = self.cache_path(key)
        if os.path.exists(path) or self._packed(key):
            path = self.local_path(key)
            return pq.ParquetFile(path).metadata.num_rows
        try:
            with self.warehouse_files().open_input(key) as f:
                return pq.ParquetFile(f).metadata.num_rows
        except OSError as e:
            if "NoSuchKey" in str(e) or "does not exist" in str(e) or "Path does not exist" in str(e):
                raise FileNotFoundError(f"{self.url}/{key}") from None
            raise

    def warehouse_files(self):
        if self._files is None:
            self._files = self._resolve_files()
        return self._files

    def _resolve_files(self):
        """Executors reach the bucket with the endpoint and credentials boto3 resolved here
        (options, environment or profile). Spark's own reader is used only where `spark_url` says
        how the cluster reads the bucket (an `s3a://` URL, with the cluster's S3 settings)."""
        import boto3

        from .warehouse_files import WarehouseFiles

        creds = boto3.Session(**{k: v for k, v in self._client_options.items() if k != "region_name"}).get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
        return WarehouseFiles(
            "s3", f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket, spark_url=self.spark_url,
            endpoint_url=self.client.meta.endpoint_url, region=self.client.meta.region_name,
            access_key=frozen.access_key if frozen else None, secret_key=frozen.secret_key if frozen else None,
            session_token=frozen.token if frozen else None)

    def _failed(self, what: str, key: str, e: Exception) -> OperationalError:
        return OperationalError(f"S3 {what} of {self.url}/{key} failed: {_failure(e)}")

    def read_bytes(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(S3_MAX_ATTEMPTS):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except self.client.exceptions.NoSuchKey as e:
                raise FileNotFoundError(key) from e
            except (ClientError, BotoCoreError) as e:  # (botocore retried what can be retried)
                raise self._failed("GET", key, e) from e
            try:
                return response["Body"].read()
            except BotoCoreError as e:  # the body broke off after the answer began: ask again
                if attempt == S3_MAX_ATTEMPTS - 1:
                    raise self._failed("GET", key, e) from e

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key),
                                              Range=f"bytes={offset}-{offset + length - 1}")
            return response["Body"].read()
        except self.client.exceptions.NoSuchKey as e:
            raise FileNotFoundError(key) from e
        except (ClientError, BotoCoreError) as e:
            raise self._failed("GET", key, e) from e

    def write_bytes(self, key: str, data: bytes, durable: bool = True) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (ClientError, BotoCoreError) as e:
            raise self._failed("PUT", key, e) from e

    def put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                if e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0):
                    # an attempt before this one may have landed with its answer lost (a timeout, a
                    # reset): then the key holds these very bytes, and the put succeeded
                    return self._holds(key, data)
                return False
            raise self._failed("conditional PUT", key, e) from e
        except BotoCoreError as e:
            raise self._failed("conditional PUT", key, e) from e

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.read_bytes(key) == data
        except FileNotFoundError:  # taken and deleted since: not this writer's
            return False

    def list(self, prefix: str) -> list[str]:
        return [key for key, _ in self.list_modified(prefix)]

    def list_modified(self, prefix: str) -> list[tuple[str, float]]:
        from botocore.exceptions import BotoCoreError, ClientError

        out = []
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                               Prefix=self._key(prefix)):
                out.extend((item["Key"][strip:], item["LastModified"].timestamp())
                           for item in page.get("Contents", []))
        except (ClientError, BotoCoreError) as e:
            raise self._failed("LIST", prefix + "*", e) from e
        return sorted(out)

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if self._packed(key):  # a file in a pack goes with its pack (storage.log checkpoints)
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as e:
            raise self._failed("DELETE", key, e) from e

    def delete_many(self, keys: list[str]) -> None:
        """Delete objects, a thousand per request (S3's DeleteObjects)."""
        from botocore.exceptions import BotoCoreError, ClientError

        keys = [k for k in keys if not self._packed(k)]
        for i in range(0, len(keys), 1000):
            chunk = keys[i:i + 1000]
            if len(chunk) == 1:
                self.delete(chunk[0])
                continue
            try:
                self.client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self._key(k)} for k in chunk], "Quiet": True})
            except (ClientError, BotoCoreError) as e:
                raise self._failed("DELETE", f"{chunk[0]} (and {len(chunk) - 1} more)", e) from e

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as e:
            if _not_found(e):
                return False
            raise self._failed("HEAD", key, e) from e  # no permission, no bucket...: not "absent"
        except BotoCoreError as e:
            raise self._failed("HEAD", key, e) from e

    def cache_path(self, key: str) -> str:
        """Where local_path() keeps the object, without fetching it (it may not exist yet)."""
        return os.path.join(self.cache_dir, key)

    def local_folders(self) -> list[str]:
        return [self.cache_dir, self.scratch_dir()]

    def local_path(self, key: str) -> str:
        """A local copy of an immutable object, downloaded once into the cache."""
        path = os.path.join(self.cache_dir, key)
        where = self._packed(key)
        if where is not None and not pack.whole(path, key, where[1]):
            if os.path.exists(path):  # cut short by a crash of the machine
                pack.restore(self, key, *where)
            else:
                pack.unpack(self, *where)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            from botocore.exceptions import ClientError

            from boto3.exceptions import RetriesExceededError
            from botocore.exceptions import BotoCoreError
            from s3transfer.exceptions import RetriesExceededError as TransferRetriesExceeded

            try:
                self.client.download_file(self.bucket, self._key(key), tmp)
            except ClientError as e:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                if _not_found(e):  # as for a local file (and read_bytes): FileNotFoundError
                    raise FileNotFoundError(f"{self.url}/{key}") from e
                raise self._failed("GET", key, e) from e
            except (BotoCoreError, RetriesExceededError, TransferRetriesExceeded) as e:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise self._failed("GET", key, e) from e
            os.replace(tmp, path)
        return path

    def upload_file(self, path: str, key: str) -> None:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.upload_file(path, self.bucket, self._key(key))
        except (ClientError, BotoCoreError, S3UploadFailedError) as e:
            raise self._failed("PUT", key, e) from e
        move_into_place(path, os.path.join(self.cache_dir, key))  # a cached file is never partial


def open_store(warehouse: str | None, s3_endpoint_url: str | None = None, spark_url: str | None = None,
               **s3_client_options) -> ObjectStore:
    """A store for a warehouse URL; `s3_client_options` (aws_access_key_id, aws_secret_access_key,
    region_name) go to boto3's client when given, else boto3 finds them the usual way. `spark_url`
    is the warehouse as the Spark cluster's own file system sees it (`s3a://bucket/prefix`, a
    shared mount), when it can read it."""
    if warehouse is None:
        warehouse = os.path.join(os.getcwd(), ".dagster_rw")
    if warehouse.startswith("s3://"):
        return S3Store(warehouse, endpoint_url=s3_endpoint_url, spark_url=spark_url, **s3_client_options)
    if warehouse.startswith("file://"):
        warehouse = urlparse(warehouse).path
    return LocalStore(warehouse, spark_url=spark_url)


# Deleting a large file takes time (about 0.17 s for 300 MB on these machines: the file system frees
# its blocks and the page cache its pages), so garbage that nothing reads any more is deleted on a
# background thread instead of inside the commit that found it expired.
_deleter: ThreadPoolExecutor | None = None
_deletions: list[Future] = []
_SHRINK_STEP = 16 << 20  # bytes freed per slice of a gradual deletion
_SHRINK_PAUSE = 0.01  # seconds between slices
_deletions_lock = threading.Lock()


def delete_in_background(store: ObjectStore, keys: list[str]) -> None:
    """Delete objects nobody reads any more, on a background thread; a process that exits first
    leaves them behind (unreferenced, as a crashed step leaves its files)."""
    global _deleter
    if not keys:
        return

    def run() -> None:
        for key in keys:
            try:
                getattr(store, "delete_gradually", store.delete)(key)
            except Exception:  # noqa: BLE001 - a file left behind is garbage, not an error of the step
                logging.getLogger("dagster_rw").warning("could not delete %s", key, exc_info=True)

    with _deletions_lock:
        if _deleter is None:
            _deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rw-delete")
        _deletions[:] = [f for f in _deletions if not f.done()]
        _deletions.append(_deleter.submit(run))


def forget_parent_work() -> None:
    """In a forked child: the deleting thread and its queue are the parent's (the parent deletes
    what it queued); the child starts its own on first use."""
    global _deleter
    from ..after_fork import keep, reinit

    keep(_deleter)
    _deleter = None
    _deletions.clear()
    reinit(_deletions_lock)


def wait_for_deletions() -> None:
    """Wait until the background deletions submitted so far have run."""
    with _deletions_lock:
        pending, _deletions[:] = list(_deletions), []
    for f in pending:
        f.result()
