"""The planned SQL project, kept in a file keyed by what the plan depends on, so that a process that
loads the same definitions again (a run worker, a restarted code server) reads the plan instead of
creating every object in a scratch warehouse.

The key is a hash of the project's files (every `.sql` file and `expectations.yaml`, their paths and
bytes) and of the planner that read them (dagster-rw's version and its modules' sizes and modification
times, sqlglot's and DuckDB's versions): any edit to either plans the folder again. The file holds what
planning learned (columns, keys, dependencies, lineage, expectations); the statements' text as written,
which may name credentials, is not written there but read back from the project's files.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import sqlglot

import dagster_rw

FORMAT = 1
DEFAULT = object()  # RwProject's plan_cache when not given: default_dir() at that moment


def default_dir() -> Path:
    """`$DAGSTER_RW_PLAN_CACHE`, else `dagster_rw/plans` in the user's cache folder."""
    if os.environ.get("DAGSTER_RW_PLAN_CACHE"):
        return Path(os.environ["DAGSTER_RW_PLAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dagster_rw" / "plans"


def _planner_fingerprint() -> list:
    import duckdb

    package = Path(dagster_rw.__file__).parent
    modules = sorted((str(p.relative_to(package)), s.st_size, s.st_mtime_ns)
                     for p in package.rglob("*.py") for s in [p.stat()])
    return [FORMAT, dagster_rw.__version__, sqlglot.__version__, duckdb.__version__, modules]


def plan_key(project_dir: Path, files: list[Path]) -> str:
    """The hash of the project's `files` (their paths inside `project_dir` and bytes) and of the planner."""
    digest = hashlib.sha256(json.dumps(_planner_fingerprint()).encode())
    for path in files:
        digest.update(str(path.relative_to(project_dir)).encode() + b"\0")
        data = path.read_bytes()
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def load(cache_dir: Path, key: str) -> list[dict] | None:
    """The planned objects stored under `key` (as `store` got them); None when there are none or the
    file cannot be read."""
    try:
        doc = json.loads((cache_dir / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc.get("objects") if isinstance(doc, dict) and doc.get("format") == FORMAT else None


def store(cache_dir: Path, key: str, objects: list[dict]) -> None:
    """Write the planned objects under `key` atomically (a reader sees the whole file or none); a
    folder that cannot be written to keeps nothing, and the next process plans again."""
    tmp = None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{key}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FORMAT, "objects": objects}, f)
        os.replace(tmp, cache_dir / f"{key}.json")
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
