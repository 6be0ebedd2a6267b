"""One broken object does not stop a FLUSH.

An object whose step fails for a cause of its own (a file it needs is missing or corrupt, a plan
that no longer fits its inputs: any error but an OperationalError, which is the storage's or the
commit's and concerns every object) is left at its committed epoch, and so is everything
downstream of it; the FLUSH advances and commits the others, then raises BrokenObject naming each
broken object and its cause. A marker (broken/<object>.json) keeps the cause for status() in any
process while the object stays where it broke.
"""
from __future__ import annotations

import json
import logging
import time
import weakref

from ..errors import BrokenObject, OperationalError
from ..storage.catalog import key_name, name_of_key

PREFIX = "broken/"
_marked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # warehouse -> objects it marked broken


def step_all(wh, objects) -> tuple[dict[str, str], list[str]]:
    """Refresh `objects` (in topological order) as a FLUSH's round does; returns (broken object ->
    cause, objects skipped because they are downstream of a broken one)."""
    broken: dict[str, str] = {}
    skipped: list[str] = []
    for obj in objects:
        if any(i in broken or i in skipped for i in obj.inputs):
            skipped.append(obj.name)
            continue
        try:
            wh.refresh(obj.name)
        except OperationalError:
            raise
        except Exception as e:  # noqa: BLE001 - the object's own cause: recorded, raised after the round
            broken[obj.name] = cause(e)
            logging.getLogger("dagster_rw").warning("%r cannot advance: %s", obj.name, broken[obj.name])
    return broken, skipped


def cause(e: Exception) -> str:
    """What broke, in one line: the missing file, or the error's type and first line."""
    if isinstance(e, FileNotFoundError):
        return f"a file it needs is missing: {e.filename or (e.args[0] if e.args else '')}"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:500]


def report(wh, broken: dict[str, str], skipped: list[str]) -> None:
    """After the round committed the others: mark the broken objects and raise BrokenObject; with
    none broken, take back the markers of objects that advanced again."""
    marked = _marked.setdefault(wh, set())
    for name in list(marked):
        if name not in broken and name not in skipped:
            wh.store.delete(PREFIX + key_name(name) + ".json")
            marked.discard(name)
    if not broken:
        return
    for name, why in broken.items():
        obj = wh.catalog().get(name)
        m = wh.manifest(name)
        record = {"object": name, "cause": why, "epoch": m.epoch if m.exists else obj.created_epoch,
                  "created_epoch": obj.created_epoch, "time": time.time()}
        wh.store.write_bytes(PREFIX + key_name(name) + ".json", json.dumps(record).encode(), durable=False)
        marked.add(name)
    parts = [f'"{n}": {why}' for n, why in broken.items()]
    later = f"; not advanced, downstream of it: {', '.join(skipped)}" if skipped else ""
    raise BrokenObject(f"FLUSH advanced every other object, but {len(broken)} could not: {'; '.join(parts)}{later}",
                       broken, skipped)


def broken_objects(wh) -> dict[str, str]:
    """Objects that broke at their committed epoch (and have not advanced since): object -> cause."""
    out = {}
    for key in wh.store.list(PREFIX):
        name = name_of_key(key[len(PREFIX):].removesuffix(".json"))
        obj = wh.catalog().get(name)
        if obj is None:
            continue
        try:
            record = json.loads(wh.store.read_bytes(key))
        except (FileNotFoundError, ValueError):
            continue
        m = wh.manifest(name)
        epoch = m.epoch if m.exists else obj.created_epoch
        if record.get("created_epoch") == obj.created_epoch and record.get("epoch") == epoch:
            out[name] = record["cause"]
    return out
