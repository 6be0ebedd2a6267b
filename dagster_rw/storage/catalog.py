"""The catalog: every object's definition, one atomically committed version per DDL statement."""
from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass, field

from ..errors import ProgrammingError
from .log import conflict, log_of
from .manifest import garbage_as_change
from .object_store import ObjectStore

TABLE = "table"
MATERIALIZED_VIEW = "materialized_view"
SOURCE = "source"  # fed by a connector; keeps no rows of its own, only its change log
SINK = "sink"


@dataclass
class Column:
    name: str
    type: str
    hidden: bool = False
    default: str | None = None  # DEFAULT: the value's expression as DuckDB SQL, cast to the type


@dataclass
class CatalogObject:
    name: str
    kind: str
    sql: str
    columns: list[Column]
    pk: list[str]  # primary key (tables) - may be empty
    stream_key: list[str]  # unique key of the object's rows (hidden row id for tables without pk)
    inputs: list[str] = field(default_factory=list)
    created_epoch: int = 0
    append_only: bool = False
    options: dict = field(default_factory=dict)
    # the segment its files live under (objects/<folder>/...); empty: key_name(name). A renamed
    # object keeps the folder of the name it was created with, its manifest listing those files
    folder: str = ""

    @property
    def key_folder(self) -> str:
        return self.folder or key_name(self.name)

    @property
    def visible_columns(self) -> list[Column]:
        return [c for c in self.columns if not c.hidden]

    def to_json(self) -> dict:
        d = asdict(self)
        if not d["folder"]:
            del d["folder"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> CatalogObject:
        d = dict(d)
        d["columns"] = [Column(**c) for c in d["columns"]]
        return cls(**d)


@dataclass
class Catalog:
    version: int = 0
    objects: dict[str, CatalogObject] = field(default_factory=dict)  # in creation order
    functions: dict[str, dict] = field(default_factory=dict)  # SQL functions: name -> definition (JSON)
    # secrets: name -> {"name", "backend", "value" (encrypted, storage.secrets)}; None in a catalog
    # handed to commit(): the committed version's secrets, unchanged
    secrets: dict[str, dict] | None = None

    def get(self, name: str) -> CatalogObject | None:
        return self.objects.get(name)

    def indexes_of(self, name: str) -> list[CatalogObject]:
        """The indexes on object `name` (CREATE INDEX), in creation order."""
        return indexes_among(self.objects.values(), name)

    def consumers(self, name: str) -> list[CatalogObject]:
        return [o for o in self.objects.values() if name in o.inputs]

    def topological(self) -> list[CatalogObject]:
        """Objects in creation order, which is a topological order (inputs exist before consumers)."""
        return list(self.objects.values())


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_SEGMENT_BYTES = 255  # one path segment on the common local file systems (S3 keys take 1024 bytes)


def key_name(name: str) -> str:
    """An object's name as its keys spell it (objects/<key_name>/..., staging/<key_name>/...,
    sinks/<key_name>/...): the name itself when it has only lower-case ASCII letters, digits and
    underscores (every unquoted ASCII identifier), else those characters kept and each byte of
    every other character's UTF-8 form written as '-' and two hex digits ("Sales 2024" ->
    "-53ales-202024"). Safe as a folder on any local disk (no '/', never '.' or '..', no upper case
    for a case-insensitive disk to fold) and as part of an S3 key, and one-to-one: a plain name has
    no '-'. Raises ProgrammingError for a name no key can hold."""
    if name and all(c in _PLAIN for c in name):
        out = name
    else:
        check_storable(name)
        out = "".join(c if c in _PLAIN else "".join(f"-{b:02x}" for b in c.encode()) for c in name)
    if len(out) > _SEGMENT_BYTES:
        raise ProgrammingError(f"the name {shown_name(name)} is too long to be stored "
                               f"({len(name.encode())} bytes)")
    return out


def name_of_key(segment: str) -> str:
    """The object name that key_name() spelled as `segment`."""
    if "-" not in segment:
        return segment
    out, i = bytearray(), 0
    while i < len(segment):
        if segment[i] == "-":
            out.append(int(segment[i + 1:i + 3], 16))
            i += 3
        else:
            out += segment[i].encode()
            i += 1
    return out.decode()


def check_storable(name: str) -> None:
    """Raise ProgrammingError unless `name` can name an object: not empty, no control characters
    (NUL included), valid Unicode."""
    if not name:
        raise ProgrammingError("an object's name cannot be empty")
    for c in name:
        if c.isprintable() or c == " ":
            continue
        category = unicodedata.category(c)
        if category in ("Cc", "Cs"):  # controls (NUL too), lone surrogates (not Unicode text)
            what = "the control character" if category == "Cc" else "the lone surrogate"
            raise ProgrammingError(f"invalid name {shown_name(name)}: it contains {what} U+{ord(c):04X}")


def shown_name(name: str, limit: int = 63) -> str:
    """A name for an error message: quoted, control characters escaped, cut after `limit` characters."""
    text = "".join(c if c.isprintable() or c == " " else f"\\u{ord(c):04x}" for c in name[:limit])
    return '"' + text + ("..." if len(name) > limit else "") + '"'


def load(store: ObjectStore, refresh: bool = True) -> Catalog:
    """The newest catalog version (`refresh`: after reading what other processes committed)."""
    log = log_of(store)
    doc = (log.refresh() if refresh else log.current()).catalog
    if doc is None:
        return Catalog()
    return Catalog(version=doc["version"],
                   objects={o["name"]: CatalogObject.from_json(o) for o in doc["objects"]},
                   functions={f["name"]: f for f in doc.get("functions", [])},
                   secrets={x["name"]: x for x in doc.get("secrets", [])})


def commit(store: ObjectStore, catalog: Catalog, what: str, dropped: list[str] = (),
           renamed: dict[str, str] | None = None, versions: list | None = None) -> Catalog:
    """Publish the catalog after `catalog.version`; CommitConflict if another process published
    one first. `dropped`: objects whose manifests go with this version; `renamed`: old name ->
    new name of objects whose manifests and epoch records the log files under the new name
    (storage/log.py); `versions`: manifest versions (storage.manifest.Manifest) committed in the
    same entry, each after the version its object has now (a table whose columns change has its
    rows rewritten with them). `catalog.secrets` None: the secrets of the version it follows."""

    nxt = Catalog(version=catalog.version + 1, objects=dict(catalog.objects), functions=dict(catalog.functions),
                  secrets=None if catalog.secrets is None else dict(catalog.secrets))
    doc = {"version": nxt.version, "objects": [o.to_json() for o in nxt.objects.values()],
           "functions": list(nxt.functions.values())}

    def build(state):
        current = state.catalog["version"] if state.catalog else 0
        if current != catalog.version:
            raise conflict(what, f"version {nxt.version} was committed by another process at the same time")
        if catalog.secrets is None:
            nxt.secrets = {x["name"]: x for x in (state.catalog or {}).get("secrets", [])}
        doc.pop("secrets", None)
        if nxt.secrets:
            doc["secrets"] = list(nxt.secrets.values())
        commits = {}
        for m in versions or []:
            base = state.manifests.get(m.object, {})
            if base.get("version", 0) != m.version - 1:
                raise conflict(what, f"{m.object!r} was committed by another process at the same time")
            commits[m.object] = garbage_as_change(base, m.to_json())
        return {"catalog": doc, **({"drop": list(dropped)} if dropped else {}),
                **({"rename": dict(renamed)} if renamed else {}), **({"commits": commits} if commits else {})}

    log_of(store).append(build, what)
    return nxt


def indexes_among(objects, name: str) -> list[CatalogObject]:
    """The objects among `objects` that are indexes on `name`, in their order."""
    return [o for o in objects if (o.options or {}).get("index_of") == name]
