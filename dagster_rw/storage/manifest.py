"""An object's manifest: the epoch it committed and the immutable files that hold its state and change log.

A new version of the manifest is the one atomic act of a step: until it is committed, nothing the
step wrote is visible; files of a step that never committed are garbage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .log import conflict, log_of
from .object_store import ObjectStore, delete_in_background


@dataclass
class SstFile:
    """One immutable, key-sorted Parquet file covering the epochs (epoch_from, epoch_to].

    A large step on Spark writes its output as a run: several files, one per key range, each
    written by the task that computed it. They share `run`, cover disjoint key ranges (`key_min`,
    `key_max`: the first and last row's sort key, where JSON can hold the values) and are listed
    in key order; readers treat the run like one file, and merges take or leave it whole."""

    key: str
    epoch_from: int
    epoch_to: int
    rows: int
    bytes: int
    key_min: list | None = None
    key_max: list | None = None
    run: str | None = None
    # a change file's: whether its step took rows away (None: not recorded, as before it was)
    retracts: bool | None = None

    @classmethod
    def from_json(cls, d: dict) -> SstFile:
        return cls(**d)

    def to_json(self) -> dict:
        d = {"key": self.key, "epoch_from": self.epoch_from, "epoch_to": self.epoch_to, "rows": self.rows,
             "bytes": self.bytes}
        if self.run is not None:
            d.update(key_min=self.key_min, key_max=self.key_max, run=self.run)
        if self.retracts is not None:
            d["retracts"] = self.retracts
        return d


def runs(files: list[SstFile]) -> list[list[SstFile]]:
    """`files` grouped into runs (a file written alone is a run of its own), oldest first."""
    out: list[list[SstFile]] = []
    for f in files:
        if out and f.run is not None and out[-1][-1].run == f.run:
            out[-1].append(f)
        else:
            out.append([f])
    return out


@dataclass
class Manifest:
    object: str
    version: int = 0
    epoch: int = 0  # committed epoch
    state: dict[str, list[SstFile]] = field(default_factory=dict)  # state table -> files, oldest first
    changelog: list[SstFile] = field(default_factory=list)  # oldest first
    garbage: list[dict] = field(default_factory=list)  # files no longer listed, deleted after a grace period
    stats: dict = field(default_factory=dict)  # figures of the last step, for status and Dagster metadata
    positions: dict = field(default_factory=dict)  # per-input positions (sources, sinks)
    # state tables not built yet: a join side kept as its input's own rows until the other side
    # first changes (operators.join), by name (`op<id>.<table>`)
    deferred: list[str] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.version > 0

    def to_json(self) -> dict:
        return {"object": self.object, "version": self.version, "epoch": self.epoch,
                "state": {k: [f.to_json() for f in v] for k, v in self.state.items()},
                "changelog": [f.to_json() for f in self.changelog], "garbage": list(self.garbage),
                "stats": dict(self.stats), "positions": self.positions,
                **({"deferred": list(self.deferred)} if self.deferred else {})}

    @classmethod
    def from_json(cls, d: dict) -> Manifest:
        return cls(
            object=d["object"],
            version=d["version"],
            epoch=d["epoch"],
            state={k: [SstFile.from_json(f) for f in v] for k, v in d.get("state", {}).items()},
            changelog=[SstFile.from_json(f) for f in d.get("changelog", [])],
            garbage=d.get("garbage", []),
            stats=d.get("stats", {}),
            positions=d.get("positions", {}),
            deferred=list(d.get("deferred", [])),
        )

    def state_rows(self) -> int:
        return sum(f.rows for files in self.state.values() for f in files)

    def state_bytes(self) -> int:
        return sum(f.bytes for files in self.state.values() for f in files)

    def sst_count(self) -> int:
        return sum(len(files) for files in self.state.values()) + len(self.changelog)


def load(store: ObjectStore, obj: str, refresh: bool = False) -> Manifest:
    """`obj`'s newest manifest as this process last read the log (`refresh`: read it first)."""
    log = log_of(store)
    doc = (log.refresh() if refresh else log.current()).manifests.get(obj)
    if doc is None:
        return Manifest(object=obj)
    return Manifest.from_json(doc)


def successor(manifest: Manifest, dropped: list[str], grace_seconds: float) -> tuple[Manifest, list[str]]:
    """The next version of `manifest`, whose garbage lists the files it no longer lists (`dropped`),
    and the garbage older than the grace period, to delete once the version is committed."""
    now = time.time()
    keep, expired = [], []
    for g in manifest.garbage:
        (expired if now - g["dropped_at"] >= grace_seconds else keep).append(g)
    if grace_seconds > 0:
        keep.extend({"key": k, "dropped_at": now} for k in dropped)
    nxt = Manifest(
        object=manifest.object, version=manifest.version + 1, epoch=manifest.epoch, state=manifest.state,
        changelog=manifest.changelog, garbage=keep, stats=manifest.stats, positions=manifest.positions,
        deferred=manifest.deferred,
    )
    return nxt, [g["key"] for g in expired] + ([] if grace_seconds > 0 else list(dropped))


# a step whose output depends on the catalog it read (a source decoding only the columns its views
# read, a step that wrote no change file because nothing read its object) records {"catalog": version,
# "step": id} in its positions; its commit conflicts when the
# catalog has moved on since (the retry reads it anew). A later commit carrying the same record
# (compaction) is not such a step.
PLANNED_UNDER = "planned_under_catalog"


def publish(store: ObjectStore, versions: list[Manifest], what: str, extra=None) -> int:
    """Commit manifest versions (each one after the version its object has now) in one log entry,
    with `extra` fields (a dict, or a function of the log's state giving one: staging collected,
    say); CommitConflict if another process committed one
    of the objects first. Returns the entry's position."""
    docs = {m.object: m.to_json() for m in versions}

    def build(state):
        commits = {}
        for m in versions:
            base = state.manifests.get(m.object, {})
            if base.get("version", 0) != m.version - 1:
                raise conflict(f"commit of {m.object!r}",
                               f"version {m.version} was committed by another process at the same time")
            planned = m.positions.get(PLANNED_UNDER)
            if planned is not None and planned != base.get("positions", {}).get(PLANNED_UNDER) and \
                    planned["catalog"] != (state.catalog or {}).get("version", 0):
                raise conflict(f"commit of {m.object!r}", "the catalog changed while its step ran")
            commits[m.object] = garbage_as_change(base, docs[m.object])
        entry = {"commits": commits}
        entry.update((extra(state) if callable(extra) else extra) or {})
        return entry

    return log_of(store).append(build, what)


def garbage_as_change(base: dict, doc: dict) -> dict:
    """`doc` for the log, its garbage list written as the change from `base` (the version it
    follows): files still waiting out the grace period are not written again with every commit.
    LogState.apply rebuilds the whole list."""
    old, new = base.get("garbage", []), doc["garbage"]
    new_keys = {g["key"] for g in new}
    kept = [g for g in old if g["key"] in new_keys]
    if new[:len(kept)] != kept:  # not old-minus-some-plus-new: write it whole
        return doc
    out = {k: v for k, v in doc.items() if k != "garbage"}
    out["garbage_change"] = {"drop": [g["key"] for g in old if g["key"] not in new_keys], "add": new[len(kept):]}
    return out


def commit(store: ObjectStore, manifest: Manifest, dropped: list[str], grace_seconds: float) -> Manifest:
    """Publish the next version of `manifest`; files it no longer lists become garbage.

    Garbage older than the grace period is deleted after the commit, on a background thread (a
    reader that loaded an older version a moment ago can still finish reading it); with no grace
    period, the files this commit drops are deleted before it returns.
    """
    nxt, expired = successor(manifest, dropped, grace_seconds)
    publish(store, [nxt], f"commit of {manifest.object!r}")
    settle_garbage(store, expired, grace_seconds)
    return nxt


def settle_garbage(store: ObjectStore, expired: list[str], grace_seconds: float) -> None:
    """After a commit: delete the files no manifest lists any more (in the background when they
    were dropped a grace period ago, at once when there is no grace period)."""
    if grace_seconds <= 0:
        for k in expired:
            store.delete(k)
    else:
        delete_in_background(store, expired)
