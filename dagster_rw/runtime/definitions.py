"""CREATE and DROP of tables, sources, materialized views and sinks: each commits its manifest
first and the catalog last, so a statement that fails leaves nothing the catalog lists (a view
whose backfill fails is taken back), and a new object starts from a folder with no leftovers.

Part of runtime.warehouse.Warehouse (a mixin): sinks are created and dropped by the SinkService
the connection handed to the warehouse.
"""
from __future__ import annotations

import logging

from ..errors import IntegrityError, OperationalError, ProgrammingError
from ..sql.planner import Planner
from ..storage import catalog as catalogs
from ..storage import manifest as manifests
from ..storage.catalog import MATERIALIZED_VIEW, SOURCE, TABLE, CatalogObject, Column
from ..storage.manifest import Manifest
from . import epochs, ingest
from .interfaces import SinkService
from .staging import ROW_ID


class Definitions:
    def create_table(self, name: str, columns: list[Column], pk: list[str], sql: str, append_only: bool,
                     if_not_exists: bool = False, options: dict | None = None) -> bool:
        cat = self.catalog(reload=True)
        if name in cat.objects:
            if if_not_exists:
                return False
            raise ProgrammingError(f'relation "{name}" already exists')
        cols = list(columns)
        for c in cols:
            if c.name in pk and c.type.endswith("[]"):
                raise ProgrammingError(f"{name!r}: column {c.name!r} of type {c.type} cannot be part of a primary key")
        stream_key = list(pk)
        if not pk:
            cols.append(Column(ROW_ID, "bigint", hidden=True))
            stream_key = [ROW_ID]
        created = epochs.newest_epoch(self.store)
        obj = CatalogObject(name=name, kind=TABLE, sql=sql, columns=cols, pk=list(pk), stream_key=stream_key,
                            created_epoch=created, append_only=append_only, options=dict(options or {}))
        objects = dict(cat.objects)
        objects[name] = obj
        self.clear_leftovers(name)
        # the manifest first: the catalog commit is the statement's last step, so a CREATE that
        # fails leaves nothing in the catalog (and files the next CREATE of the name clears)
        m = manifests.commit(self.store, Manifest(object=name, epoch=created), [], 0)
        self.commit_catalog(objects, f"CREATE TABLE {name}")
        self.remember_manifest(m)
        return True

    def create_source(self, statement) -> bool:
        """CREATE SOURCE, or CREATE TABLE with a connector (which also stores the rows)."""
        s = statement
        cat = self.catalog(reload=True)
        if s.name in cat.objects:
            if s.if_not_exists:
                return False
            raise ProgrammingError(f'relation "{s.name}" already exists')
        options, positions = ingest.connector_definition(self, s)
        created = epochs.newest_epoch(self.store)
        obj = CatalogObject(name=s.name, kind=TABLE if s.is_table else SOURCE, sql=s.sql,
                            columns=list(s.columns) + [Column(ROW_ID, "bigint", hidden=True)], pk=[],
                            stream_key=[ROW_ID], created_epoch=created, append_only=True,
                            options=options)
        objects = dict(cat.objects)
        objects[s.name] = obj
        self.clear_leftovers(s.name)
        m = Manifest(object=s.name, epoch=created, positions=positions)
        m = manifests.commit(self.store, m, [], 0)  # before the catalog, as for create_table
        self.commit_catalog(objects, f"CREATE {'TABLE' if s.is_table else 'SOURCE'} {s.name}")
        self.remember_manifest(m)
        return True

    def create_view(self, name: str, sql: str, query, if_not_exists: bool = False,
                    emit_on_window_close: bool = False, kind: str = MATERIALIZED_VIEW) -> bool:
        """A materialized view; with kind TABLE, a table created AS SELECT: it keeps receiving the
        query's rows, so the query must only ever insert (a stream, filtered, projected, joined
        with FOR SYSTEM_TIME AS OF PROCTIME(), or aggregated per window EMIT ON WINDOW CLOSE)."""
        cat = self.catalog(reload=True)
        if name in cat.objects:
            if if_not_exists:
                return False
            raise ProgrammingError(f'relation "{name}" already exists')
        planner = Planner(cat.get, sql, name, self.engine)
        plan = planner.plan(query, emit_on_window_close)
        if kind == TABLE and not planner.append_only(plan):
            raise ProgrammingError(
                f"CREATE TABLE {name} AS SELECT: the query can update or delete its rows, and a table created AS "
                "SELECT only ever receives inserts (use CREATE MATERIALIZED VIEW, or aggregate per window with "
                "EMIT ON WINDOW CLOSE)")
        visible = [c for c in plan.columns if not c.hidden]
        seen = set()
        for c in visible:
            if c.name in seen:
                raise ProgrammingError(f'column "{c.name}" specified more than once in {name!r}')
            seen.add(c.name)
        columns = [Column(c.name if not c.hidden else f"_rw_h{i}", c.type, c.hidden)
                   for i, c in enumerate(plan.columns)]
        stream_key = [columns[k].name for k in plan.stream_key]
        # DML accepted before the view is in its snapshot, as in RisingWave (whose CREATE waits for a
        # barrier of its own): when an upstream table has staged DML, cut a barrier first
        ancestors = self.ancestors(planner.inputs)
        staged = epochs.unsealed_counts(self.store)
        if any(upstream.name in staged for upstream in ancestors):
            self.barrier()
        # bring the inputs to one epoch, so the view starts from a consistent snapshot
        for upstream in ancestors:
            self.refresh(upstream.name)
        created = min((self.manifest(i).epoch for i in planner.inputs), default=epochs.newest_epoch(self.store))
        obj = CatalogObject(name=name, kind=kind, sql=sql, columns=columns, pk=[],
                            stream_key=stream_key, inputs=list(planner.inputs), created_epoch=created,
                            append_only=kind == TABLE, options={"as_query": True} if kind == TABLE else {})
        objects = dict(cat.objects)
        objects[name] = obj
        self.clear_leftovers(name)
        self.commit_catalog(objects, f"CREATE {'TABLE' if kind == TABLE else 'MATERIALIZED VIEW'} {name}")
        self._plans[(name, created)] = plan
        try:
            self.refresh(name)  # back-fill from the snapshot
        except BaseException:
            self._undo_create(name)
            raise
        return True

    def _undo_create(self, name: str) -> None:
        """Take back a CREATE whose object the catalog already lists but whose back-fill failed:
        the object leaves the catalog and its files go, so the failed statement leaves no trace
        (unless another process created a consumer of it meanwhile: then it stays, as created)."""
        try:
            self.settle([name], report=False)
            cat = self.catalog(reload=True)
            if name in cat.objects and not cat.consumers(name):
                self.commit_catalog({k: v for k, v in cat.objects.items() if k != name},
                                    f"DROP {name} (its CREATE failed)", dropped=[name])
                self._manifests.pop(name, None)
                self._plans = {k: v for k, v in self._plans.items() if k[0] != name}
                self.compactor.forget(name)
                self.clear_leftovers(name)
        except Exception:  # noqa: BLE001 - the CREATE's own error is the one to report
            logging.getLogger("dagster_rw").warning("could not take back the failed CREATE of %s", name,
                                                    exc_info=True)

    @property
    def sinks(self) -> SinkService:
        if self._sinks is None:
            raise OperationalError("this connection was opened without sink support (no SinkService)")
        return self._sinks

    def create_sink(self, statement) -> bool:
        return self.sinks.create(self, statement)

    def close_sink_targets(self) -> None:
        """Close the connections sinks keep open to their targets between refreshes."""
        for name in list(self.sink_targets):
            self.sinks.forget_target(self, name)

    def drop_sink(self, name: str, if_exists: bool) -> bool:
        return self.sinks.drop(self, name, if_exists)

    def drop(self, name: str, kind: str, if_exists: bool) -> bool:
        cat = self.catalog(reload=True)
        obj = cat.get(name)
        if obj is None:
            if if_exists:
                return False
            what = {TABLE: "table", SOURCE: "source", catalogs.SINK: "sink"}.get(kind, "materialized view")
            raise ProgrammingError(f'{what} "{name}" does not exist')
        if obj.kind != kind:
            what, verb = {TABLE: ("a table", "TABLE"), SOURCE: ("a source", "SOURCE"),
                          catalogs.SINK: ("a sink", "SINK")}.get(
                obj.kind, ("a materialized view", "MATERIALIZED VIEW"))
            raise ProgrammingError(f'"{name}" is {what}; use DROP {verb}')
        users = [c.name for c in cat.consumers(name)]
        users += [o.name for o in cat.objects.values() if o.kind == catalogs.SINK and o.options.get("into") == name]
        if users:
            raise IntegrityError(f'cannot drop {name!r}: other objects depend on it ({", ".join(users)})')
        objects = {k: v for k, v in cat.objects.items() if k != name}
        self.commit_catalog(objects, f"DROP {name}", dropped=[name])
        self._manifests.pop(name, None)
        self.compactor.forget(name)
        self.clear_leftovers(name)
        return True

    def clear_leftovers(self, name: str) -> None:
        folder = catalogs.key_name(name)  # (raises for a name no key can hold)
        for key in self.store.list(f"objects/{folder}/") + self.store.list(f"{epochs.STAGING}/{folder}/") \
                + self.store.list(f"sinks/{folder}/"):
            self.store.delete(key)
