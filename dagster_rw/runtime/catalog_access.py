"""The warehouse's catalog as a process sees it: the objects and SQL functions of the newest
catalog version it read, their plans (kept per object and creation), and committing a new version.

Part of runtime.warehouse.Warehouse (a mixin): the state it reads and keeps is the warehouse's
`store`, `engine`, `_catalog`, `_plans` and `_manifests` (cleared when the catalog is read again).
"""
from __future__ import annotations

from ..errors import ProgrammingError
from ..sql.planner import Planner
from ..storage import catalog as catalogs
from ..storage.catalog import Catalog, CatalogObject


class CatalogAccess:
    def catalog(self, reload: bool = False) -> Catalog:
        if self._catalog is None or reload:
            self._catalog = catalogs.load(self.store, refresh=reload)
        return self._catalog

    def sync(self) -> None:
        """See what other processes committed since the last statement."""
        self.catalog(reload=True)
        self._manifests.clear()

    def get(self, name: str) -> CatalogObject:
        obj = self.catalog().get(name)
        if obj is None:
            raise ProgrammingError(f'relation "{name}" does not exist')
        return obj

    def commit_catalog(self, objects: dict[str, CatalogObject], what: str, functions: dict | None = None,
                       dropped: list[str] = (), renamed: dict[str, str] | None = None) -> None:
        """Commit the next catalog version; `dropped`: objects whose manifests it removes;
        `renamed`: old name -> new name of objects whose manifests and records it moves."""
        current = self.catalog(reload=True)
        self._catalog = catalogs.commit(self.store, Catalog(
            version=current.version, objects=objects,
            functions=current.functions if functions is None else functions), what, dropped, renamed)

    def functions(self) -> dict:
        """The catalog's SQL functions, by name (sql.functions.SqlFunction)."""
        from ..sql.functions import SqlFunction

        return {name: SqlFunction.from_json(f) for name, f in self.catalog().functions.items()}

    def inline_functions(self, tree):
        """A parsed query with the catalog's SQL functions inlined where it calls them."""
        from ..sql.functions import inline
        from ..sql.statements import DIALECT

        return inline(tree, self.functions(), DIALECT)

    def create_function(self, function, replace: bool) -> None:
        cat = self.catalog(reload=True)
        if function.name in cat.functions:
            if not replace:
                raise ProgrammingError(f"function {function.name} already exists")
            from ..sql.functions import check_droppable

            check_droppable(function.name, cat.objects.values(), "replace")  # callers planned with the old body
        self.commit_catalog(dict(cat.objects), f"CREATE FUNCTION {function.name}",
                            functions={**cat.functions, function.name: function.to_json()})

    def drop_function(self, name: str, if_exists: bool) -> bool:
        from ..sql.functions import check_droppable

        cat = self.catalog(reload=True)
        if name not in cat.functions:
            if if_exists:
                return False
            raise ProgrammingError(f"function {name} does not exist")
        check_droppable(name, cat.objects.values())
        self.commit_catalog(dict(cat.objects), f"DROP FUNCTION {name}",
                            functions={k: v for k, v in cat.functions.items() if k != name})
        return True

    def plan_key(self, obj: CatalogObject) -> tuple:
        """What an object's plan depends on: its definition (a rename rewrites the SQL of its
        consumers) and its inputs' columns (ALTER TABLE ... ADD / DROP COLUMN)."""
        cat = self.catalog()
        inputs = tuple((i, tuple((c.name, c.type) for c in cat.get(i).columns)) for i in obj.inputs if cat.get(i))
        return obj.name, obj.created_epoch, obj.sql, inputs

    def plan(self, obj: CatalogObject):
        key = self.plan_key(obj)
        if key not in self._plans:
            from ..sql.statements import view_emits_on_window_close, view_query

            planner = Planner(self.catalog().get, obj.sql, obj.name, self.engine, self.catalog().indexes_of)
            query = self.inline_functions(view_query(obj.sql))
            self._plans[key] = planner.plan(query, view_emits_on_window_close(obj.sql))
        return self._plans[key]

    def ancestors(self, names: list[str]) -> list[CatalogObject]:
        """The objects `names` depend on (themselves included), in topological order."""
        cat = self.catalog()
        needed: set[str] = set()
        stack = list(names)
        while stack:
            n = stack.pop()
            if n in needed:
                continue
            needed.add(n)
            stack.extend(cat.get(n).inputs)
        return [o for o in cat.topological() if o.name in needed]
