"""Packed files: the small files of one commit, uploaded as one object.

A FLUSH that advances many objects by a few rows writes many small files (a state file per
operator, a change file per object). On S3 each would be a PUT of its own, on a local folder an
fsync of its own; instead they are uploaded together as one object, `packs/<id>.pack` (one PUT, or
one fsync), just before the commit's log entry, which records where each file lies in it (its key
-> the pack, offset and length). Each also gets a copy in this process's cache, named as usual and
never fsynced: on S3 at once; on a local folder, where the cache is the warehouse folder itself,
only when something reads the file from disk or the connection closes (`ensure_copy`), since this
process's steps read the rows decoded and most small files are merged away first. The pack is the
durable copy: a file's own copy that a crash of the machine lost or cut short is written again
from it when read (`restore`). Readers in other processes find a file they lack through the log:
on S3 the whole pack is fetched once and every file in it lands in their cache. Spark tasks read
a packed file's byte range. Files too large to be worth packing are uploaded alone.

A pack is deleted once no manifest lists any of its files, not even as garbage still readable by
others (worked out when the log writes a checkpoint). Later merges of state files move the rows
of packed files into files of their own, as they merge any small files.
"""
from __future__ import annotations

import os
import threading
import time
import uuid

from .local_files import move_into_place

PACKS = "packs"
PART_BYTES = 4 << 20  # a file larger than this is uploaded alone
PACK_BYTES = 64 << 20  # files beyond this many bytes in one pack are uploaded alone
_folders: set[str] = set()  # cache folders known to exist (a step's files go to a few, again and again)


class Pack:
    """The files of one commit, kept in the cache until `upload` puts them in one object."""

    def __init__(self, store):
        self.store = store
        self.key = f"{PACKS}/{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.pack"
        self.parts: dict[str, bytes | None] = {}  # file key -> its bytes (None: read from its copy), in order
        self.size = 0
        self._lock = threading.Lock()

    def take(self, path: str, key: str) -> bool:
        """Take the finished local file `path` as `key` (moved into the cache); False when it is
        too large for the pack (the caller uploads it alone)."""
        if not self._reserve(key, os.path.getsize(path), None):
            return False
        move_into_place(path, self.store.cache_path(key), durable=False)  # (the pack is durable)
        self.store.known_whole(key)
        return True

    def add(self, key: str, data: bytes) -> bool:
        """Take file `key` as its bytes, kept for the upload; False when it is too large for the
        pack. Its copy in the cache is written from them (no temporary file first, no reading it
        back): at once, or on a store with `lazy_copies` only when something reads it from disk
        (ensure_copy): this process's readers mostly find its rows decoded in sst_cache."""
        if not self._reserve(key, len(data), data):
            return False
        path = self.store.cache_path(key)
        if getattr(self.store, "lazy_copies", False):
            with _copies_lock:
                _copies[path] = data
        else:
            _write_copy(path, data)
        self.store.known_whole(key)
        return True

    def _reserve(self, key: str, size: int, data: bytes | None) -> bool:
        with self._lock:
            if size > PART_BYTES or self.size + size > PACK_BYTES:
                return False
            self.parts[key] = data
            self.size += size
        return True

    def upload(self) -> dict:
        """Put the pack (one request); returns what the log entry records of it."""
        with self._lock:
            parts = dict(self.parts)
        if not parts:
            return {}
        layout, chunks, offset = {}, [], 0
        for key, data in parts.items():
            if data is None:
                with open(self.store.cache_path(key), "rb") as f:
                    data = f.read()
            chunks.append(data)
            layout[key] = [offset, len(data)]
            offset += len(data)
        self.store.write_bytes(self.key, b"".join(chunks))
        return {self.key: layout}

    def discard(self) -> None:
        """The commit did not happen: the pack (if it was put) is garbage."""
        try:
            self.store.delete(self.key)
        except Exception:  # noqa: BLE001 - a pack left behind is unreferenced, like a crashed step's files
            pass


_copies: dict[str, bytes] = {}  # path -> bytes of a packed file whose copy is not written yet
_copies_lock = threading.Lock()
_path_locks = [threading.Lock() for _ in range(64)]


def _path_lock(path: str) -> threading.Lock:
    return _path_locks[hash(path) % len(_path_locks)]


def copy_pending(path: str) -> bool:
    """Whether `path` is the copy of a packed file of this process not written yet."""
    return path in _copies


def ensure_copy(path: str) -> None:
    """Write the copy of a packed file Pack.add took, if it is not written yet."""
    if path not in _copies:
        return
    with _path_lock(path):
        with _copies_lock:
            data = _copies.get(path)
        if data is None:  # written (or dropped) meanwhile
            return
        _write_copy(path, data)
        with _copies_lock:
            _copies.pop(path, None)


def write_copies(folder: str) -> None:
    """Write the copies not written yet of the packed files under `folder` (a closing connection's
    warehouse: they are not kept in memory beyond it)."""
    prefix = os.path.join(folder, "")
    for path in [p for p in list(_copies) if p.startswith(prefix)]:
        ensure_copy(path)


def drop_copy(path: str) -> None:
    """The file is being deleted: its copy, if not written yet, never is."""
    if path in _copies:
        with _path_lock(path), _copies_lock:
            _copies.pop(path, None)


def _write_copy(path: str, data: bytes) -> None:
    folder = os.path.dirname(path)
    if folder not in _folders:
        os.makedirs(folder, exist_ok=True)
        _folders.add(folder)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"  # (readers in this process may look for it: whole or absent)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
    except FileNotFoundError:  # the folder was removed meanwhile (a dropped object's, a test's)
        _folders.discard(folder)
        os.makedirs(folder, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
    os.replace(tmp, path)


def whole(path: str, key: str, layout: dict[str, list[int]]) -> bool:
    """Whether the copy of packed file `key` at `path` is there and whole. The copy is written
    without fsync: after a crash of the machine it may be missing or cut short (a file system that
    writes data before the metadata naming it, as ext4 does by default, leaves no other damage)."""
    try:
        return os.path.getsize(path) == layout[key][1]
    except OSError:
        return False


def restore(store, key: str, pack_key: str, layout: dict[str, list[int]]) -> None:
    """Write packed file `key`'s copy again, from its byte range of the pack on the store (local:
    read in place, S3: a ranged read)."""
    offset, length = layout[key]
    data = store.read_range(pack_key, offset, length)
    path = store.cache_path(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def unpack(store, pack_key: str, layout: dict[str, list[int]]) -> None:
    """Fetch a pack once and put every file in it into the store's cache."""
    data = store.read_bytes(pack_key)
    for key, (offset, length) in layout.items():
        path = store.cache_path(key)
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data[offset:offset + length])
        os.replace(tmp, path)
