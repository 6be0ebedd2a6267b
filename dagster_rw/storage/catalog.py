"""The catalog: every object's definition, one atomically committed version per DDL statement."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from . import versioned
from .object_store import ObjectStore

PREFIX = "catalog"

TABLE = "table"
MATERIALIZED_VIEW = "materialized_view"
SOURCE = "source"  # fed by a connector; keeps no rows of its own, only its change log
SINK = "sink"


@dataclass
class Column:
    name: str
    type: str
    hidden: bool = False


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

    @property
    def visible_columns(self) -> list[Column]:
        return [c for c in self.columns if not c.hidden]

    def to_json(self) -> dict:
        return asdict(self)

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

    def get(self, name: str) -> CatalogObject | None:
        return self.objects.get(name)

    def consumers(self, name: str) -> list[CatalogObject]:
        return [o for o in self.objects.values() if name in o.inputs]

    def topological(self) -> list[CatalogObject]:
        """Objects in creation order, which is a topological order (inputs exist before consumers)."""
        return list(self.objects.values())


def load(store: ObjectStore) -> Catalog:
    version, doc = versioned.latest(store, PREFIX)
    if doc is None:
        return Catalog()
    return Catalog(version=version,
                   objects={o["name"]: CatalogObject.from_json(o) for o in doc["objects"]},
                   functions={f["name"]: f for f in doc.get("functions", [])})


def commit(store: ObjectStore, catalog: Catalog, what: str) -> Catalog:
    nxt = Catalog(version=catalog.version + 1, objects=dict(catalog.objects), functions=dict(catalog.functions))
    doc = {"objects": [o.to_json() for o in nxt.objects.values()],
           "functions": list(nxt.functions.values())}
    versioned.commit(store, PREFIX, nxt.version, doc, what)
    return nxt
