"""Publishing a finished file on a local file system: whole or not at all, and on disk first.

Used by the local store and by Spark tasks writing into a shared warehouse folder.
"""
from __future__ import annotations

import errno
import os
import shutil
import uuid


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def move_into_place(src: str, dest: str) -> None:
    """Move a finished file to `dest` so that `dest` never holds a partial file.

    A rename when both are on one file system; otherwise (EXDEV) a copy to a temporary name beside
    `dest`, then a rename. (shutil.move would copy straight into `dest`: a process killed mid-copy
    would leave a truncated file under a key that a barrier or a manifest may then refer to.)
    """
    os.makedirs(os.path.dirname(dest), exist_ok=True)
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
        _fsync_file(tmp)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    os.unlink(src)
