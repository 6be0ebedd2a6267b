"""Versioned JSON documents committed by put-if-absent: the pattern behind catalogs and manifests."""
from __future__ import annotations

import json

from ..errors import CommitConflict
from .object_store import ObjectStore

_WIDTH = 20
KEEP = 16  # versions kept behind the newest (older ones are pruned)


def version_key(prefix: str, version: int) -> str:
    return f"{prefix}/v{version:0{_WIDTH}d}.json"


def latest(store: ObjectStore, prefix: str) -> tuple[int, dict | None]:
    """The newest committed version under `prefix` and its document, or (0, None)."""
    keys = [k for k in store.list(prefix + "/") if k.rsplit("/", 1)[-1].startswith("v") and k.endswith(".json")]
    if not keys:
        return 0, None
    key = max(keys)
    version = int(key.rsplit("/", 1)[-1][1:-5])
    return version, json.loads(store.read_bytes(key))


def _versions(store: ObjectStore, prefix: str) -> list[int]:
    return sorted(int(k.rsplit("/", 1)[-1][1:-5]) for k in store.list(prefix + "/")
                  if k.rsplit("/", 1)[-1].startswith("v") and k.endswith(".json"))


def commit(store: ObjectStore, prefix: str, version: int, document: dict, what: str) -> None:
    """Atomically publish `document` as `version`; CommitConflict if another writer got there first.

    Old versions are pruned, so a writer that started from a long-pruned version could find its
    key free: the versions are listed first, and a newer one there means this writer is stale.
    """
    data = json.dumps(document, indent=1, sort_keys=True, default=str).encode()
    conflict = CommitConflict(
        f"{what}: version {version} was committed by another process at the same time; "
        "this attempt was discarded (nothing partial is visible), retry it"
    )
    versions = _versions(store, prefix)
    if versions and versions[-1] >= version:
        raise conflict
    if not store.put_if_absent(version_key(prefix, version), data):
        raise conflict
    for old in versions:
        if old < version - KEEP:
            store.delete(version_key(prefix, old))
