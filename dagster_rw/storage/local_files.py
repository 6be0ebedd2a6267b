"""Publishing a finished file on a local file system: whole or not at all, and on disk first.

Used by the local store and by Spark tasks writing into a shared warehouse folder.
"""
from __future__ import annotations

import errno
import functools
import os
import shutil
import uuid

from ..errors import OperationalError

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_FULL_TEXT = ("no space left on device", "disk quota exceeded", "file too large")


def is_disk_full(e: BaseException) -> bool:
    """Whether `e` says a file system is full (ENOSPC), over quota or past a file size limit, as an
    OSError, pyarrow's or DuckDB's I/O error (which carry it in their message only)."""
    if isinstance(e, OSError) and e.errno in _FULL:
        return True
    text = str(e).lower()
    return isinstance(e, Exception) and any(t in text for t in _FULL_TEXT) and \
        (isinstance(e, OSError) or type(e).__module__.split(".")[0] in ("duckdb", "pyarrow"))


def disk_full_error(e: BaseException, what: str) -> OperationalError:
    cause = os.strerror(e.errno) if isinstance(e, OSError) and e.errno else str(e).strip().splitlines()[0]
    return OperationalError(f"{what}: the disk is full ({cause}); free space and run it again "
                            "(what was not committed is redone)")


def is_unreadable_file(e: BaseException) -> bool:
    """Whether `e` says a file the warehouse lists is missing or cannot be read as what it should
    be (a truncated or overwritten Parquet file), from the OS, pyarrow or DuckDB."""
    if isinstance(e, FileNotFoundError):
        return True
    module = type(e).__module__.split(".")[0]
    if module == "pyarrow":
        return isinstance(e, (OSError, ValueError))  # ArrowIOError, ArrowInvalid (not a Parquet file...)
    return module in ("duckdb", "_duckdb") and type(e).__name__ in ("IOException", "InvalidInputException") \
        and any(t in str(e) for t in ("parquet", "Parquet", "No files found", "Could not read"))


def reports_file_errors(what):
    """A decorator: a full disk, or a file missing or corrupt, met inside the function is an
    OperationalError saying so (`what` names the work, or is a callable of the call's arguments
    that does)."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if is_disk_full(e):
                    raise disk_full_error(e, what(*args, **kwargs) if callable(what) else what) from e
                if is_unreadable_file(e):
                    work = what(*args, **kwargs) if callable(what) else what
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise OperationalError(f"{work}: a file the warehouse lists is missing or corrupt: {first}") from e
                raise
        return run
    return wrap


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def move_into_place(src: str, dest: str, durable: bool = True) -> None:
    """Move a finished file to `dest` so that `dest` never holds a partial file.

    A rename when both are on one file system; otherwise (EXDEV) a copy to a temporary name beside
    `dest`, then a rename. (shutil.move would copy straight into `dest`: a process killed mid-copy
    would leave a truncated file under a key that a barrier or a manifest may then refer to.)
    Not `durable`: no fsync (a copy whose durable bytes are elsewhere, a pack's: a crash of the
    machine may lose or cut it short, never a crash of the process).
    """
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if durable:
        _fsync_file(src)  # the data is on disk before any commit can name it
    try:
        os.replace(src, dest)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
    tmp = f"{dest}.{uuid.uuid4().hex}.tmp"
    try:
        shutil.copyfile(src, tmp)
        if durable:
            _fsync_file(tmp)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    os.unlink(src)
