"""CREATE, DROP and ALTER (RENAME TO; a table's ADD / DROP COLUMN) of tables, sources, materialized
views and sinks: each CREATE commits its manifest first and the catalog last, so a statement that fails leaves nothing the catalog lists (a view
whose backfill fails is taken back), and a new object starts from a folder with no leftovers.

Part of runtime.warehouse.Warehouse (a mixin): sinks are created and dropped by the SinkService
the connection handed to the warehouse.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pyarrow as pa

from .. import types as sqltypes
from ..errors import IntegrityError, OperationalError, ProgrammingError, unsupported
from ..sql.planner import Planner
from ..sql.alter_columns import with_column_added, with_column_dropped
from ..sql.renames import renamed_definition, renamed_references
from ..sql.star_expansion import StarNotExpanded, with_stars_expanded
from ..sql.statements import view_emits_on_window_close, view_query
from ..storage import catalog as catalogs
from ..storage import manifest as manifests
from ..storage.catalog import MATERIALIZED_VIEW, SOURCE, TABLE, CatalogObject, Column
from ..storage.manifest import Manifest
from ..storage.parquet_io import EPOCH
from ..storage.state_table import DELETED, write_sst
from . import epochs, ingest, step
from .interfaces import SinkService
from .staging import ROW_ID

INDEX = "index"  # the kind DROP INDEX names: a materialized view with the option sql.indexes.INDEX_OF


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
                            created_epoch=created, append_only=append_only, options=dict(options or {}),
                            folder=self.new_folder(cat, name))
        objects = dict(cat.objects)
        objects[name] = obj
        self.clear_leftovers(obj.key_folder)
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
                            options=options, folder=self.new_folder(cat, s.name))
        objects = dict(cat.objects)
        objects[s.name] = obj
        self.clear_leftovers(obj.key_folder)
        m = Manifest(object=s.name, epoch=created, positions=positions)
        m = manifests.commit(self.store, m, [], 0)  # before the catalog, as for create_table
        self.commit_catalog(objects, f"CREATE {'TABLE' if s.is_table else 'SOURCE'} {s.name}")
        self.remember_manifest(m)
        return True

    def create_index(self, index) -> bool:
        """CREATE INDEX (sql.indexes): a materialized view of its base stored under the index key
        followed by the base's key."""
        from ..sql.indexes import check_index

        cat = self.catalog(reload=True)
        if index.name in cat.objects:
            if index.if_not_exists:
                return False
            raise ProgrammingError(f'relation "{index.name}" already exists')
        check_index(index, cat.get(index.on))
        return self.create_view(index.name, index.sql, index.query, index=index)

    def create_view(self, name: str, sql: str, query, if_not_exists: bool = False,
                    emit_on_window_close: bool = False, kind: str = MATERIALIZED_VIEW, index=None) -> bool:
        """A materialized view; with kind TABLE, a table created AS SELECT: it keeps receiving the
        query's rows, so the query must only ever insert (a stream, filtered, projected, joined
        with FOR SYSTEM_TIME AS OF PROCTIME(), or aggregated per window EMIT ON WINDOW CLOSE).
        `index`: the CREATE INDEX this view maintains (its key leads the stream key)."""
        cat = self.catalog(reload=True)
        if name in cat.objects:
            if if_not_exists:
                return False
            raise ProgrammingError(f'relation "{name}" already exists')
        planner = Planner(cat.get, sql, name, self.engine, cat.indexes_of)
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
        options = {"as_query": True} if kind == TABLE else {}
        if index is not None:
            lead = [k for k, _ in index.key]
            stream_key = lead + [k for k in stream_key if k not in lead]
            options = index.options()
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
                            append_only=kind == TABLE, options=options, folder=self.new_folder(cat, name))
        objects = dict(cat.objects)
        objects[name] = obj
        self.clear_leftovers(obj.key_folder)
        what = "INDEX" if index is not None else "TABLE" if kind == TABLE else "MATERIALIZED VIEW"
        self.commit_catalog(objects, f"CREATE {what} {name}")
        self._plans[self.plan_key(obj)] = plan
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
                folder = cat.objects[name].key_folder
                self.commit_catalog({k: v for k, v in cat.objects.items() if k != name},
                                    f"DROP {name} (its CREATE failed)", dropped=[name])
                self._manifests.pop(name, None)
                self._plans = {k: v for k, v in self._plans.items() if k[0] != name}
                self.compactor.forget(name)
                self.clear_leftovers(folder)
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
        """DROP of a table, source, materialized view or (kind INDEX) index. The indexes of a table or
        view go with it, as in RisingWave."""
        from ..sql.indexes import INDEX_OF

        cat = self.catalog(reload=True)
        obj = cat.get(name)
        if obj is None:
            if if_exists:
                return False
            what = {TABLE: "table", SOURCE: "source", catalogs.SINK: "sink", INDEX: "index"}.get(
                kind, "materialized view")
            raise ProgrammingError(f'{what} "{name}" does not exist')
        actual = INDEX if obj.options.get(INDEX_OF) else obj.kind
        if actual != kind:
            what, verb = {TABLE: ("a table", "TABLE"), SOURCE: ("a source", "SOURCE"),
                          catalogs.SINK: ("a sink", "SINK"), INDEX: ("an index", "INDEX")}.get(
                actual, ("a materialized view", "MATERIALIZED VIEW"))
            raise ProgrammingError(f'"{name}" is {what}; use DROP {verb}')
        indexes = [o.name for o in cat.consumers(name) if o.options.get(INDEX_OF) == name]
        gone = [name] + indexes
        users = [c.name for n in gone for c in cat.consumers(n) if c.name not in gone]
        users += [o.name for o in cat.objects.values() if o.kind == catalogs.SINK and o.options.get("into") == name]
        if users:
            raise IntegrityError(f'cannot drop {name!r}: other objects depend on it ({", ".join(users)})')
        objects = {k: v for k, v in cat.objects.items() if k not in gone}
        self.commit_catalog(objects, f"DROP {name}", dropped=gone)
        for n in gone:
            self._manifests.pop(n, None)
            self.compactor.forget(n)
            self.clear_leftovers(cat.objects[n].key_folder)
        return True

    def rename(self, kind: str, name: str, new_name: str) -> None:
        """ALTER ... RENAME TO, as RisingWave does it: the object keeps its rows, files and epoch
        (the log moves its manifest and its part of every epoch record to the new name, its files
        stay in their folder), and every object reading it has its stored definition rewritten to
        the new name (checked: planned again, it must give the same columns and key)."""
        cat = self.catalog(reload=True)
        obj = cat.get(name)
        what = {TABLE: "table", SOURCE: "source", catalogs.SINK: "sink"}.get(kind, "materialized view")
        if obj is None:
            raise ProgrammingError(f'{what} "{name}" does not exist')
        if obj.kind != kind:
            verb = {TABLE: "TABLE", SOURCE: "SOURCE", catalogs.SINK: "SINK"}.get(obj.kind, "MATERIALIZED VIEW")
            raise ProgrammingError(f'"{name}" is not a {what}; use ALTER {verb}')
        if obj.options.get("index_of") or any(o.options.get("index_of") == name for o in cat.consumers(name)):
            raise unsupported(f'renaming "{name}": it is an index or has indexes (drop the indexes, rename, '
                              'and create them again)')
        if obj.options.get("internal_of"):  # the view of a CREATE SINK ... AS query (sinks.definition)
            raise ProgrammingError(f'cannot rename "{name}": it belongs to sink "{obj.options["internal_of"]}"')
        if new_name in cat.objects:
            raise ProgrammingError(f'relation "{new_name}" already exists')
        catalogs.key_name(new_name)  # (raises for a name no key can hold)
        touched = [name] + [o.name for o in cat.objects.values() if name in o.inputs
                            or o.options.get("into") == name or o.options.get("internal_of") == name]
        self.settle(touched)  # this process's commits in flight land under the old name
        self.compactor.finish(touched)
        cat = self.catalog(reload=True)
        renamed = dataclasses.replace(obj, name=new_name, sql=renamed_definition(obj.sql, new_name),
                                      folder=obj.key_folder, options=dict(obj.options))
        # sinks AS query: their internal view reads `name`, and their own text says so too
        querying = {o.options["internal_of"] for o in cat.objects.values()
                    if o.options.get("internal_of") and name in o.inputs}
        objects: dict[str, CatalogObject] = {}
        for key, o in cat.objects.items():
            if key == name:
                objects[new_name] = renamed
                continue
            reads = name in o.inputs or o.options.get("into") == name or key in querying
            if reads:
                try:
                    sql = renamed_references(o.sql, name, new_name)
                except ProgrammingError as e:
                    raise ProgrammingError(f'cannot rename "{name}" to "{new_name}": the definition of '
                                           f'"{o.name}" reads it, and {e}') from None
                o = dataclasses.replace(o, sql=sql, inputs=[new_name if i == name else i for i in o.inputs],
                                        options={**o.options, **({"into": new_name} if o.options.get("into") == name
                                                                 else {})})
            if o.options.get("internal_of") == name:
                o = dataclasses.replace(o, options={**o.options, "internal_of": new_name})
            objects[key] = o
        self._check_rewritten(name, new_name, cat, objects)
        self.commit_catalog(objects, f"ALTER {what.upper()} {name} RENAME TO {new_name}", renamed={name: new_name})
        self._manifests.pop(name, None)
        self._plans = {k: v for k, v in self._plans.items() if k[0] not in (name, new_name)}
        self.compactor.forget(name)
        if kind == catalogs.SINK:
            self.sinks.forget_target(self, name)

    def _check_rewritten(self, name: str, new_name: str, before: catalogs.Catalog,
                         objects: dict[str, CatalogObject]) -> None:
        """Refuse a rename after which a rewritten view would not plan to what it is."""
        for key, o in objects.items():
            old = before.objects.get(key)
            if o.kind == catalogs.SINK or old is None or o.sql == old.sql or not o.inputs:
                continue
            try:
                planner = Planner(objects.get, o.sql, o.name, self.engine,
                                  lambda n: catalogs.indexes_among(objects.values(), n))
                plan = planner.plan(self.inline_functions(view_query(o.sql)), view_emits_on_window_close(o.sql))
                columns = [(None if c.hidden else c.name, c.type, c.hidden) for c in plan.columns]
                same = columns == [(None if c.hidden else c.name, c.type, c.hidden) for c in o.columns] and \
                    [o.columns[k].name for k in plan.stream_key] == o.stream_key
            except ProgrammingError as e:
                raise ProgrammingError(f'cannot rename "{name}" to "{new_name}": the definition of "{o.name}" '
                                       f"does not plan with the new name ({e})") from None
            if not same:
                raise ProgrammingError(f'cannot rename "{name}" to "{new_name}": the definition of "{o.name}" '
                                       "plans differently with the new name")

    def alter_columns(self, statement) -> None:
        """ALTER TABLE ... ADD COLUMN (its DEFAULT, or NULL, in every row) / DROP COLUMN. The views
        and indexes reading the table keep their columns, as in RisingWave (a `*` over the table is
        written out as the columns it stood for): one that reads a dropped column is refused by
        name (as is a sink reading or writing the table). The table and its readers are brought to
        the newest epoch (its staged rows applied), then its rows are written again with the new
        columns, and the new definition and that state commit in one log entry (its change files,
        in the old columns and read by every reader by then, go with it); the readers read its next
        change files, in the new columns, by name."""
        s = statement
        cat = self.catalog(reload=True)
        obj = cat.get(s.table)
        if obj is None:
            raise ProgrammingError(f'table "{s.table}" does not exist')
        what = f"ALTER TABLE {s.table} {'ADD' if s.add else 'DROP'} COLUMN"
        if obj.kind != TABLE:
            raise ProgrammingError(f'"{s.table}" is not a table; {what} changes tables only')
        if ingest.is_connector(obj) or obj.options.get("as_query"):
            raise unsupported(f"{what} on a table fed by a connector or created AS SELECT")
        writers = [o.name for o in cat.objects.values() if o.options.get("into") == s.table]
        if writers:
            raise unsupported(f"{what} on {s.table!r}, which sinks write into ({', '.join(writers)}): "
                              "drop them first, or create a new table")
        readers = cat.consumers(s.table)
        names = [c.name for c in obj.columns]
        if s.add is not None:
            if s.add.name in names:
                raise ProgrammingError(f'column "{s.add.name}" of relation "{s.table}" already exists')
            columns = list(obj.columns) + [s.add]
            sql = with_column_added(obj.sql, s.add_sql)
        else:
            if s.drop not in names or obj.columns[names.index(s.drop)].hidden:
                if s.if_exists:
                    return
                raise ProgrammingError(f'column "{s.drop}" of relation "{s.table}" does not exist')
            keeps = {"primary key": obj.pk, "version column": [obj.options.get("version_column")],
                     "watermark": [obj.options.get("watermark_column")]}
            for role, used in keeps.items():
                if s.drop in used:
                    raise ProgrammingError(f'{what}: "{s.drop}" is the {role} of {s.table!r}')
            if len(obj.visible_columns) == 1:
                raise ProgrammingError(f"{what}: {s.table!r} would have no column left")
            columns = [c for c in obj.columns if c.name != s.drop]
            sql = with_column_dropped(obj.sql, s.drop)
        rewritten = self._readers_kept(cat, dataclasses.replace(obj, columns=columns, sql=sql), readers, what) \
            if readers else {}
        if s.table in epochs.unsealed_counts(self.store):
            self.barrier()
        # the table and its readers are brought to its newest epoch: its change files in the old
        # columns are then read by everyone, and go with the new definition
        for o in (self.ancestors([r.name for r in readers]) if readers else [obj]):
            self.refresh(o.name)
        self.settle([o.name for o in [obj, *readers]])
        cat = self.catalog(reload=True)
        altered = dataclasses.replace(cat.get(s.table), columns=columns, sql=sql)
        m = self.manifest(s.table)
        rows = self.engine.to_arrow(self.snapshot(s.table))
        rows = rows.select([c.name for c in columns if c.name in names])
        if s.add is not None:
            added = pa.nulls(rows.num_rows, sqltypes.arrow_type(s.add.type))
            if s.add.default is not None and rows.num_rows:  # computed once, for every row already there
                value = self.engine.sql(f"SELECT {s.add.default} AS v").column("v")
                added = value.take(pa.array(np.zeros(rows.num_rows, np.int64)))
            rows = rows.append_column(s.add.name, added)
        rows = rows.cast(step.object_schema(altered))
        files = []
        if rows.num_rows:
            rows = rows.append_column(EPOCH, pa.array(np.full(rows.num_rows, m.epoch, np.int64))) \
                .append_column(DELETED, pa.array(np.zeros(rows.num_rows, bool)))
            files = [write_sst(self.store, self.engine, rows, f"objects/{altered.key_folder}/state/{step.OUTPUT}",
                               list(altered.stream_key), 0, m.epoch)]
        old_files = [f.key for fs in m.state.values() for f in fs] + [f.key for f in m.changelog]
        grace = self.options["gc_grace_seconds"]
        nxt, expired = manifests.successor(dataclasses.replace(m, state={step.OUTPUT: files}, changelog=[]),
                                           old_files, grace)
        self._catalog = catalogs.commit(self.store, catalogs.Catalog(
            version=cat.version, objects={k: (altered if k == s.table else dataclasses.replace(v, sql=rewritten[k])
                                              if k in rewritten else v) for k, v in cat.objects.items()},
            functions=cat.functions), what, versions=[nxt])
        self.remember_manifest(nxt)
        replanned = {s.table, *(r.name for r in readers)}
        self._plans = {k: v for k, v in self._plans.items() if k[0] not in replanned}
        self.compactor.forget(s.table)
        manifests.settle_garbage(self.store, expired, grace)

    def _readers_kept(self, cat: catalogs.Catalog, altered: CatalogObject, readers: list[CatalogObject],
                      what: str) -> dict[str, str]:
        """The readers of a table whose columns change, each planned against the new columns to
        what it is: the new definitions of those that need one for that (a `*` over the table,
        written out as the columns it stood for), by name. Refuses a reader of a dropped column,
        one whose columns would change otherwise, and sinks."""
        objects = {k: (altered if k == altered.name else v) for k, v in cat.objects.items()}

        def same_plan(o: CatalogObject, sql: str) -> bool:
            try:
                planner = Planner(objects.get, sql, o.name, self.engine,
                                  lambda n: catalogs.indexes_among(objects.values(), n))
                plan = planner.plan(self.inline_functions(view_query(sql)), view_emits_on_window_close(sql))
            except ProgrammingError as e:
                raise ProgrammingError(f'{what}: "{o.name}" reads {altered.name!r}, and its definition does not '
                                       f"plan without the column ({e})") from None
            columns = [(None if c.hidden else c.name, c.type, c.hidden) for c in plan.columns]
            return columns == [(None if c.hidden else c.name, c.type, c.hidden) for c in o.columns] and \
                [o.columns[k].name for k in plan.stream_key] == o.stream_key

        rewritten = {}
        for o in readers:
            if o.kind == catalogs.SINK:
                raise unsupported(f"{what} on {altered.name!r}, which sink {o.name!r} reads: drop it first")
            try:
                if same_plan(o, o.sql):
                    continue
                failure = None
            except ProgrammingError as e:  # (a star over the table in a set operation: its branches differ)
                failure = e
            # a `*` over the table, wherever it is in the query: the view keeps the columns it had
            # (RisingWave's behaviour), its stars written out as the columns they stood for
            changed = f'{what} on {altered.name!r}: the columns of "{o.name}", which reads it, would change'
            try:
                expanded = with_stars_expanded(o.sql, altered.name,
                                               lambda r: [c.name for c in cat.get(r).visible_columns])
            except StarNotExpanded as e:
                raise unsupported(f"{changed}: {e}") from None
            if expanded is not None and same_plan(o, expanded):
                rewritten[o.name] = expanded
                continue
            if failure is not None:
                raise failure
            raise unsupported(f"{changed}: name the columns in its definition")
        return rewritten

    def new_folder(self, catalog: catalogs.Catalog, name: str) -> str:
        """The folder of a new object `name` (CatalogObject.folder): its own name's (""), unless
        an object renamed since its creation keeps its files there; then that name with a suffix
        no name's folder has (key_name writes no '.'). Raises for a name no key can hold."""
        plain = catalogs.key_name(name)
        taken = {o.key_folder for o in catalog.objects.values()}
        if plain not in taken:
            return ""
        n = catalog.version + 1
        while f"{plain}.{n}" in taken:
            n += 1
        return f"{plain}.{n}"

    def clear_leftovers(self, folder: str) -> None:
        """Delete what an earlier object left in `folder` (an object's CatalogObject.key_folder)."""
        for key in self.store.list(f"objects/{folder}/") + self.store.list(f"{epochs.STAGING}/{folder}/") \
                + self.store.list(f"sinks/{folder}/"):
            self.store.delete(key)
