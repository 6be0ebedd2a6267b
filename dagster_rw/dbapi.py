"""The DB-API (PEP 249) face of dagster-rw: connect(), Connection and Cursor."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from . import jsonb
from . import types as sqltypes
from .engine.duck import DuckEngine, quote
from .errors import DataError, InterfaceError, ProgrammingError
from .runtime import ingest, view_errors
from .runtime.options import Options
from .runtime.warehouse import ROW_ID, Warehouse
from .sinks.service import SINKS
from .sql import explain as explainer
from .sql import statements as st
from .sql.dialect import Statement
from .sql.secret_statements import CreateSecret
from .sql.sink_statements import CreateSink
from .sql.indexes import CreateIndex
from .sql.alter_columns import AlterColumns
from .sql.on_conflict import NOTHING, ON_CONFLICT
from .sql.renames import Rename
from .sql.function_catalog import check_statement
from .sql.functions import inline_statement
from .sql.semantics import typed_query
from .sql.syntax import check_stars, relation_tables, with_queries_apart
from .storage.catalog import MATERIALIZED_VIEW, SINK, SOURCE, TABLE
from .storage.object_store import open_store, wait_for_deletions
from .storage.local_files import reports_file_errors

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"


def connect(warehouse: str | None = None, spark=None, **options) -> Connection:
    """Open a warehouse: a local folder (default `./.dagster_rw`), `file://...` or `s3://bucket/prefix`.

    `spark` is None (an embedded local session, started when first needed), a SparkSession, or a
    Spark Connect URL `sc://host:port` (or a function returning a session, called when first needed).
    `options` are the fields of `Options` (runtime/options.py: the S3 endpoint and credentials, the
    engine, the cache's bound, the thresholds of compaction, Spark, sources and sinks, with their
    defaults); a name that is none of them raises ProgrammingError listing them.
    """
    options = Options.of(options)
    store = open_store(warehouse, options.s3_endpoint_url, spark_url=options.spark_warehouse_url,
                       aws_access_key_id=options.aws_access_key_id,
                       aws_secret_access_key=options.aws_secret_access_key, region_name=options.aws_region)
    if options.cache_bytes is not None:
        from .storage import sst_cache

        sst_cache.set_limit(options.cache_bytes)
    return Connection(store, spark, options)


class Connection:
    def __init__(self, store, spark, options: Options):
        self.engine = DuckEngine(folders=store.local_folders())  # DuckDB reaches the warehouse's files only
        self.wh = Warehouse(store, self.engine, spark_engine=self._make_spark_engine, sinks=SINKS, options=options)
        self.spark = spark
        self.options = options
        self.implicit_flush = False
        self.settings: dict[str, str] = {}  # session settings SET in this connection (SHOW answers them)
        self.closed = False

    def _make_spark_engine(self):
        from .engine.spark import SparkEngine, session_for

        self.spark = session_for(self.spark)
        return SparkEngine(self.spark, file_bytes=self.wh.options["spark_file_bytes"])

    # -- PEP 249 -------------------------------------------------------------------------------
    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, sql: str, parameters=None) -> Cursor:
        cur = self.cursor()
        cur.execute(sql, parameters)
        return cur

    def executescript(self, script: str) -> Cursor:
        cur = self.cursor()
        for statement in st.split(script):
            cur.execute(statement)
        return cur

    def commit(self) -> None:
        """DML is durable when execute() returns; commit() is there for DB-API callers."""

    def rollback(self) -> None:
        raise ProgrammingError("dagster-rw has no transactions to roll back: DML is accepted when executed")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.wh.close_sink_targets()
        self.wh.compactor.finish()  # commit the background merges of state files that finished
        wait_for_deletions()  # and delete the garbage that is being deleted in the background
        self.wh.store.write_copies()  # and the copies of packed files nothing has read from disk

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self):
        if self.closed:
            raise InterfaceError("the connection is closed")

    # -- streaming API -------------------------------------------------------------------------
    @reports_file_errors(lambda self, table, data: f"INSERT into {table!r}")
    def insert(self, table: str, data) -> int:
        """Bulk-load a pyarrow Table, a pandas DataFrame or a Spark DataFrame (same semantics as INSERT)."""
        self._check()
        if self.wh.catalog().get(table) is None:  # (else epochs.accept checks the table is unchanged)
            self.wh.sync()
        if not isinstance(data, pa.Table):
            if hasattr(data, "toArrow"):
                data = data.toArrow()
            else:
                data = pa.Table.from_pandas(data, preserve_index=False)
        rows = self._conform(table, data, list(data.column_names))
        n = self.wh.stage(table, rows)
        if self.implicit_flush:
            self.flush()
        return n

    @reports_file_errors("a barrier")
    def barrier(self) -> int:
        self._check()
        return self.wh.barrier()

    def pending_inputs(self) -> dict[str, int]:
        """Per input object, how much a barrier would seal now (empty when nothing is new)."""
        self._check()
        return self.wh.pending_inputs()

    @reports_file_errors(lambda self, name: f"the refresh of {name!r}")
    def refresh(self, name: str, retry_conflicts: bool = False) -> int:
        """Advance one object to the newest epoch its inputs committed; returns its epoch. Another
        writer committing the object first raises CommitConflict (nothing partial is left), or
        with `retry_conflicts` the step plans again from that commit, as a FLUSH does."""
        self._check()
        self.wh.sync()
        return self.wh.refresh(name, retry_conflicts=retry_conflicts)

    @reports_file_errors("FLUSH")
    def flush(self) -> int:
        self._check()
        return self.wh.flush()

    def run(self, interval: float = 1.0, stop=None, on_epoch=None, on_error=None, max_ticks: int | None = None,
            max_failures: int | None = None) -> int:
        """Continuous mode (runtime/continuous.py): every `interval` seconds, when an input has
        something new, FLUSH. Runs until `stop` (a threading.Event) is set or `max_ticks` ticks
        committed something; `on_epoch(tick)` hears of each. Returns how many ticks committed."""
        from .runtime import continuous

        self._check()
        return continuous.run(self.wh, interval, stop=stop, on_epoch=on_epoch, on_error=on_error,
                              max_ticks=max_ticks, max_failures=max_failures)

    @reports_file_errors("compaction")
    def compact(self, name: str | None = None) -> int:
        """Merge state files (of one object, or of all); returns how many files were removed."""
        self._check()
        self.wh.sync()
        names = [name] if name else list(self.wh.catalog().objects)
        return sum(self.wh.compact(n) for n in names)

    @reports_file_errors("the sweep")
    def sweep(self) -> int:
        """Delete the files a crash left, once older than `sweep_grace_seconds` (files no log
        entry, manifest, pack or garbage list explains); returns how many were deleted."""
        self._check()
        return len(self.wh.sweep())

    def status(self) -> list[dict]:
        self._check()
        self.wh.sync()
        return self.wh.status()

    # -- helpers -------------------------------------------------------------------------------
    def _conform(self, table: str, data: pa.Table, columns: list[str]) -> pa.Table:
        """Cast incoming rows to the table's column types; missing columns take their DEFAULT, or
        NULL."""
        obj = self.wh.get(table)
        if obj.kind != TABLE:
            raise ProgrammingError(f'cannot insert into {table!r}: it is a {obj.kind.replace("_", " ")}')
        visible = [c for c in obj.columns if not c.hidden]
        names = {c.name for c in visible}
        for c in columns:
            if c not in names:
                raise ProgrammingError(f'column "{c}" of relation "{table}" does not exist')
        same = _same_types(data, columns, visible) if not any(
            c.default is not None and c.name not in columns for c in visible) else None
        if same is not None:
            return _storable(same, table, visible)
        select = []
        for i, c in enumerate(visible):
            if c.name in columns:
                src = f"d.{quote(data.column_names[columns.index(c.name)])}"
                if sqltypes.is_struct(c.type):  # a row assigned to a struct column: its fields by position
                    i = columns.index(c.name)
                    data = data.set_column(i, data.field(i).name, sqltypes.with_field_names(data.column(i), c.type))
            else:
                src = c.default if c.default is not None else "NULL"
            # (jsonb as text: dagster_rw.jsonb parses it, and words an error as PostgreSQL does)
            to = "VARCHAR" if c.type == "jsonb" else sqltypes.duckdb_type(c.type)
            select.append(f"CAST({src} AS {to}) AS {quote(c.name)}")
        try:
            out = self.engine.sql(f"SELECT {', '.join(select)} FROM d", d=data)
        except Exception as e:  # a value that does not fit its column
            raise DataError(f"cannot insert into {table!r}: {str(e).splitlines()[0]}") from None
        return _storable(out, table, visible)

    def relation_columns(self, name: str) -> dict[str, str] | None:
        """A relation's visible columns and their types, by name (None for an unknown name)."""
        obj = self.wh.catalog().get(name)
        return {c.name: c.type for c in obj.visible_columns} if obj is not None else None

    def snapshot_relations(self, query: exp.Expression) -> dict:
        """The referenced objects' committed rows (visible columns), by name, for a batch query."""
        rels = {}
        for t in relation_tables(query):
            name = t.name
            if name in rels:
                continue
            obj = self.wh.catalog().get(name)
            if obj is None and name == ingest.ERRORS_RELATION:
                rels[name] = ingest.source_errors(self.wh)
                continue
            if obj is None and name == view_errors.RELATION:
                rels[name] = view_errors.view_errors(self.wh)
                continue
            if obj is None:
                raise ProgrammingError(f'relation "{name}" does not exist')
            if obj.kind == "sink":
                raise ProgrammingError(f'"{name}" is a sink, which holds no rows: query what it reads, {obj.inputs[0]!r}')
            cols = ", ".join(quote(c.name) for c in obj.visible_columns)
            rels[name] = self.engine.sql(f"SELECT {cols} FROM rw_snap", rw_snap=self.wh.snapshot(name))
        return rels

    def _query_engine(self, query: exp.Expression):
        """Spark for batch reads over large objects (or when forced), in-process otherwise."""
        names = {t.name for t in query.find_all(exp.Table) if self.wh.catalog().get(t.name) is not None}
        if any(t.name in (ingest.ERRORS_RELATION, view_errors.RELATION) for t in query.find_all(exp.Table)) or any(
                self.wh.catalog().get(n).kind == SOURCE for n in names):
            return None  # the error table and sources (read again from Kafka) are read in-process
        if any(True for _ in query.find_all(exp.ArrayAgg)):
            return None  # Spark's array aggregate (collect_list) drops NULLs and ignores ORDER BY
        rows = sum(self.wh.manifest(n).state_rows() for n in names)
        if self.wh.options["engine"] == "auto":
            return None if rows <= self.wh.options["spark_select_rows"] else self.wh.spark_engine()
        engine = self.wh.step_engine(rows)
        return None if engine is self.engine else engine

    def _run_on_spark(self, spark_engine, query: exp.Expression):
        views = {}
        schema = {}
        for t in query.find_all(exp.Table):
            obj = self.wh.catalog().get(t.name)
            if obj is None or t.name in views:
                continue
            from .runtime.step import output_table

            state = output_table(self.wh, obj, self.wh.manifest(t.name), spark_engine).read_all()
            cols = ", ".join(quote(c.name) for c in obj.visible_columns)
            views[t.name] = spark_engine.sql(f"SELECT {cols} FROM rw_snap", rw_snap=state)
            schema[t.name] = {c.name: c.type for c in obj.visible_columns}
        from .engine.spark import batch_series, spark_ready

        sql = batch_series(spark_ready(typed_query(self._lateral_calls_as_select_lists(query), schema))
                           ).sql(dialect="spark")
        try:
            return spark_engine.run_query(sql, views)
        except Exception as e:
            from .engine.spark import spark_error

            raise ProgrammingError(spark_error(e)) from None
        finally:
            self.wh.release_spark()

    def _lateral_calls_as_select_lists(self, query: exp.Expression) -> exp.Expression:
        """Set-returning functions in FROM beside a relation (`FROM t, unnest(t.a) AS x`) as the
        same functions in the relation's select list, as views plan them: Spark has no lateral
        call in FROM (sql.rewrites.lateral_set_returning)."""
        from .sql.planner import Planner
        from .sql.rewrites.lateral_set_returning import set_returning_in_from_as_select_list

        if next(query.find_all(exp.Join), None) is None:
            return query  # no FROM item beside another
        cat = self.wh.catalog()
        planner = Planner(cat.get, query.sql(dialect="postgres"), None, self.engine, cat.indexes_of)
        return query.transform(lambda node: set_returning_in_from_as_select_list(node, planner)
                               if isinstance(node, exp.Select) else node)

    def duckdb_sql(self, query: exp.Expression, rels: dict) -> str:
        """The query in DuckDB's dialect with PostgreSQL's semantics (integer division)."""
        schema = {}
        for name in rels:
            obj = self.wh.catalog().get(name)
            if obj is not None:
                schema[name] = {c.name: c.type for c in obj.visible_columns}
        return typed_query(query, schema).sql(dialect="duckdb")

    def batch_query(self, query: exp.Expression) -> exp.Expression:
        """A SELECT as the batch engines run it: TUMBLE / HOP expanded into plain subqueries, FETCH ... WITH
        TIES as a filter on rank(), jsonb constants in their stored form and jsonb's operators as the
        functions both engines have (sql.semantics), a WITH query named as a relation it reads renamed
        (sql.syntax.with_queries_apart); `* EXCEPT (...)` is the engines' own (DuckDB's EXCLUDE)."""
        from .sql.batch_windows import expand_time_windows
        from .sql.rewrites.jsonb_functions import jsonb_functions_as_calls
        from .sql.function_catalog import relation_column_types
        from .sql.semantics import (JSON_VALUE_TYPES, jsonb_constants, jsonb_operators, jsonb_typed_operators,
                                    values_as_json, with_ties_as_rank)

        def refuse(node, what):
            raise ProgrammingError(what)

        check_stars(query)
        query = with_queries_apart(query)

        def micros(e):
            if not isinstance(e, exp.Interval):
                raise ProgrammingError(f"a window size that is not an INTERVAL literal: {e.sql(dialect='postgres')}")
            return int(self.engine.sql(f"SELECT epoch_us(TIMESTAMP '1970-01-01' + {e.sql(dialect='duckdb')}) AS i")
                       .column(0)[0].as_py())

        def relation_columns(name):
            obj = self.wh.catalog().get(name)
            return None if obj is None else {c.name: c.type for c in obj.visible_columns}

        column_type = relation_column_types([query], relation_columns)

        def type_of(x):  # a column's type where the query's relations tell it (jsonb's operators need it)
            return column_type(x) if isinstance(x, exp.Column) else None

        query = with_ties_as_rank(expand_time_windows(query, self.wh.catalog().get, micros))
        query = jsonb_operators(jsonb_constants(jsonb_functions_as_calls(query)), refuse)

        def value_type(x):  # (a value of another type, or of a type not known, is DuckDB's to_json of it)
            t = type_of(x)
            return t if t in JSON_VALUE_TYPES or (t or "").startswith("numeric") else None

        query = jsonb_typed_operators(query, type_of, refuse)
        return values_as_json(query, value_type, refuse)

    def run_query(self, query: exp.Expression):
        query = self.batch_query(query)
        try:
            return self._run_query(query)
        except (FileNotFoundError, ProgrammingError) as e:
            # a file of the version this query loaded was collected by another process's commit
            # (after the grace period): read the newest committed version instead, once
            if isinstance(e, ProgrammingError) and "No such file" not in str(e) and "IO Error" not in str(e):
                raise
            self.wh.sync()
            return self._run_query(query)

    def _run_query(self, query: exp.Expression):
        spark_engine = self._query_engine(query)
        if spark_engine is not None:
            description, rows = self._run_on_spark(spark_engine, query)
            return self._pg_names(query, description), rows
        rels = self.snapshot_relations(query)
        sql = self.duckdb_sql(query, rels)
        try:
            description, rows = self.engine.execute(sql, **rels)
        except Exception as e:
            raise ProgrammingError(str(e).splitlines()[0]) from None
        return self._pg_names(query, description), rows

    @staticmethod
    def _pg_names(query: exp.Expression, description):
        """Output names as PostgreSQL gives them, where the engine made up its own."""
        if isinstance(query, exp.Select) and not any(isinstance(e, exp.Star) for e in query.expressions) \
                and len(query.expressions) == len(description):
            from .sql.planner import _output_name

            description = [(_output_name(e),) + tuple(d[1:])
                           if d[0].startswith("_col_") or not isinstance(e, (exp.Alias, exp.Column)) else d
                           for e, d in zip(query.expressions, description)]
        return description


class Cursor:
    arraysize = 1

    def __init__(self, conn: Connection):
        self.conn = conn
        self.description = None
        self.rowcount = -1
        self._rows: list[tuple] = []
        self._pos = 0

    def close(self):
        self._rows = []

    def __iter__(self):
        while True:
            row = self.fetchone()
            if row is None:
                return
            yield row

    def fetchone(self):
        if self._pos >= len(self._rows):
            return None
        row = self._rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size=None):
        size = size or self.arraysize
        out = self._rows[self._pos:self._pos + size]
        self._pos += len(out)
        return out

    def fetchall(self):
        out = self._rows[self._pos:]
        self._pos = len(self._rows)
        return out

    def _result(self, description, rows):
        self.description = description
        self._rows = [tuple(r) for r in rows]
        self._pos = 0
        self.rowcount = len(self._rows)

    def _columns(self, names: list[str], rows):
        self._result([(n, "VARCHAR", None, None, None, None, None) for n in names], rows)

    @reports_file_errors(lambda self, sql, parameters=None: " ".join(sql.split()[:2]).upper() or "the statement")
    def execute(self, sql: str, parameters=None):
        self.conn._check()
        if parameters:
            sql = _bind_parameters(sql, parameters)
        statement = st.parse(sql)
        conn = self.conn
        wh = conn.wh
        if not (isinstance(statement, st.Insert) and isinstance(statement.source, exp.Values)
                and wh.catalog().get(statement.table) is not None):
            # (an INSERT of values into a table this process knows needs no look at the log: its
            # entry is refused if the table changed meanwhile, epochs.accept)
            wh.sync()
        functions = wh.functions()
        inline_statement(statement, functions, st.DIALECT)  # SQL functions: their bodies in place of calls
        # before anything runs: every call is a supported function (DuckDB's file, settings and
        # extension functions are not) or a SQL function of the warehouse
        check_statement(statement, functions, conn.relation_columns)
        self.description, self._rows, self._pos, self.rowcount = None, [], 0, -1
        HANDLERS[type(statement)](self, statement)
        return self

    def executemany(self, sql: str, seq):
        for params in seq:
            self.execute(sql, params)

    # -- statements ----------------------------------------------------------------------------
    def _do_createtable(self, s: st.CreateTable):
        if s.as_query is not None:
            self.conn.wh.create_view(s.name, s.sql, s.as_query, s.if_not_exists, s.emit_on_window_close, kind=TABLE)
            return
        options = {}
        if s.watermark is not None:  # event time: EMIT ON WINDOW CLOSE views close windows by it
            from .sources.spec import watermark_delay

            column, expression = s.watermark
            options = {"watermark_column": column,
                       "watermark_delay_us": watermark_delay(s.name, s.sql, column, expression, s.columns)}
        options.update(s.on_conflict)
        for c in s.columns:
            self._check_default(s.name, c)
        self.conn.wh.create_table(s.name, s.columns, s.pk, s.sql, s.append_only, s.if_not_exists, options)

    def _check_default(self, table: str, column) -> None:
        """A DEFAULT computes a value of its column's type (PostgreSQL checks a constant one when the
        table is created): 'zz' for an integer is refused here, not at the first INSERT."""
        if column.default is None:
            return
        try:
            self.conn.engine.sql(f"SELECT {column.default} AS v")
        except Exception as e:
            raise DataError(f"DEFAULT of {table}.{column.name}: {str(e).splitlines()[0]}") from None

    def _do_createsource(self, s: st.CreateSource):
        from .storage.secrets import seal_options

        wh = self.conn.wh
        # a secret's clear value never reaches the catalog (s3.credentials.*: see storage.secrets)
        s.options = seal_options(s.options, set(s.secret_options), wh.catalog(reload=True).secrets or {},
                                 f"source {s.name!r}")
        wh.create_source(s)

    def _do_createsecret(self, s: CreateSecret):
        from .runtime.secrets import create_secret

        create_secret(self.conn.wh, s)

    def _do_createview(self, s: st.CreateView):
        self.conn.wh.create_view(s.name, s.sql, s.query, s.if_not_exists, s.emit_on_window_close)

    def _do_createindex(self, s: CreateIndex):
        self.conn.wh.create_index(s)

    def _do_createsink(self, s: CreateSink):
        self.conn.wh.create_sink(s)

    def _do_createfunction(self, s: st.CreateFunction):
        self.conn.wh.create_function(s.function, s.replace)

    def _do_drop(self, s: st.Drop):
        if s.kind == "function":
            self.conn.wh.drop_function(s.name, s.if_exists)
            return
        if s.kind == "sink":
            self.conn.wh.drop_sink(s.name, s.if_exists)
            return
        if s.kind == "secret":
            from .runtime.secrets import drop_secret

            drop_secret(self.conn.wh, s.name, s.if_exists)
            return
        kind = {"table": TABLE, "source": SOURCE, "index": "index"}.get(s.kind, MATERIALIZED_VIEW)
        self.conn.wh.drop(s.name, kind, s.if_exists)

    def _do_rename(self, s: Rename):
        kind = {"table": TABLE, "source": SOURCE, "sink": SINK}.get(s.kind, MATERIALIZED_VIEW)
        self.conn.wh.rename(kind, s.name, s.new_name)

    def _do_altercolumns(self, s: AlterColumns):
        if s.add is not None:
            self._check_default(s.table, s.add)
        self.conn.wh.alter_columns(s)

    def _do_flush(self, s: st.Flush):
        self.conn._check()
        self.conn.wh.flush(synced=True)  # (execute read the log a moment ago)

    def _do_setvar(self, s: st.SetVar):
        self.conn.settings[s.name] = s.value  # SHOW answers it; only the implicit flush is acted on
        if s.name in st.IMPLICIT_FLUSH_SETTINGS:
            self.conn.implicit_flush = s.value in ("true", "on", "1", "t")

    def _do_show(self, s: st.Show):
        from .storage.catalog import SINK

        wh = self.conn.wh
        kinds = {"TABLES": TABLE, "MATERIALIZED VIEWS": MATERIALIZED_VIEW, "SINKS": SINK, "SOURCES": SOURCE}
        created = {"CREATE SINK ": SINK, "CREATE SOURCE ": SOURCE}
        kind = next((k for prefix, k in created.items() if s.what.startswith(prefix)), None)
        if kind is not None:  # the definition, with secrets redacted
            name = s.sql.split()[-1].strip('"') if s.sql.split()[-1].startswith('"') else s.sql.split()[-1].lower()
            obj = wh.get(name)
            if obj.kind != kind:
                raise ProgrammingError(f'"{name}" is not a {kind}')
            self._columns(["Name", "Create Sql"], [(name, obj.sql)])
            return
        if s.what.startswith("INDEXES FROM ") and len(s.sql.split()) == 4:
            from .sql.indexes import INDEX_OF, shown_row

            last = s.sql.split()[-1]
            name = last.strip('"') if last.startswith('"') else last.lower()
            wh.get(name)  # (raises for an object that does not exist)
            self._columns(["Name", "On", "Key", "Include", "Distributed By"],
                          sorted(shown_row(o) for o in wh.catalog().objects.values()
                                 if (o.options or {}).get(INDEX_OF) == name))
            return
        if s.what == "SECRETS":  # names only: a value is never shown
            from .runtime.secrets import secret_names

            self._columns(["Name"], [(n,) for n in secret_names(wh)])
            return
        if s.what == "FUNCTIONS":
            self._columns(["Name", "Arguments", "Return Type", "Language"],
                          [f.shown() for _, f in sorted(wh.functions().items())])
            return
        setting = s.what.lower()
        if setting in st.SETTING_DEFAULTS:
            self._columns([setting], [(self.conn.settings.get(setting, st.SETTING_DEFAULTS[setting]),)])
            return
        if s.what not in kinds:
            raise ProgrammingError(f"SHOW {s.what} is not supported (SHOW TABLES, SHOW MATERIALIZED VIEWS, SHOW INDEXES FROM t, "
                                   "SHOW SOURCES, SHOW SINKS, SHOW FUNCTIONS, SHOW SECRETS)")
        names = sorted(o.name for o in wh.catalog().objects.values()
                       if o.kind == kinds[s.what] and "internal_of" not in (o.options or {})
                       and "index_of" not in (o.options or {}))
        self._columns(["Name"], [(n,) for n in names])

    def _do_describe(self, s: st.Describe):
        obj = self.conn.wh.get(s.name)
        rows = [(c.name, sqltypes.display_name(c.type), c.hidden) for c in obj.columns]
        key = obj.pk or [k for k in obj.stream_key if k != ROW_ID]
        if key:
            rows.append(("primary key", ", ".join(key), None))
        self._columns(["Name", "Type", "Is Hidden"], rows)

    def _do_explain(self, s: st.Explain):
        inner = s.inner
        if not isinstance(inner, st.CreateView):
            raise ProgrammingError("EXPLAIN supports CREATE MATERIALIZED VIEW")
        from .sql.planner import Planner

        cat = self.conn.wh.catalog()
        planner = Planner(cat.get, inner.sql, inner.name, self.conn.engine, cat.indexes_of)
        plan = planner.plan(inner.query, inner.emit_on_window_close)
        lines = explainer.explain(plan, self.conn.wh.options["spark_broadcast_rows"])
        self._columns(["QUERY PLAN"], [(line,) for line in lines])

    def _do_query(self, s: st.Query):
        description, rows = self.conn.run_query(s.query)
        self._result([(d[0], d[1], None, None, None, None, None) for d in description], rows)

    def _do_insert(self, s: st.Insert):
        conn = self.conn
        obj = conn.wh.get(s.table)
        if obj.kind != TABLE:
            raise ProgrammingError(f'cannot insert into {s.table!r}: it is a {obj.kind.replace("_", " ")}')
        visible = [c.name for c in obj.visible_columns]
        columns = s.columns or visible
        source = s.source
        if isinstance(source, exp.Values):
            source = exp.select("*").from_(source.copy().as_("v"))
        check_stars(source)
        source = with_queries_apart(source)
        rels = conn.snapshot_relations(source)
        try:
            data = conn.engine.sql(conn.duckdb_sql(source, rels), **rels)
        except Exception as e:
            raise DataError(f"INSERT INTO {s.table}: {str(e).splitlines()[0]}") from None
        if s.columns is None and data.num_columns < len(columns):
            columns = columns[:data.num_columns]  # without a column list: the first ones (PostgreSQL's rule)
        if data.num_columns != len(columns):
            raise ProgrammingError(
                f"INSERT has {'more' if data.num_columns > len(columns) else 'fewer'} expressions than target columns")
        data = data.rename_columns([f"_in{i}" for i in range(data.num_columns)])
        rows = conn._conform(s.table, data.rename_columns(columns), columns)
        self.rowcount = conn.wh.stage(s.table, rows)
        self._after_dml()

    def _do_update(self, s: st.Update):
        conn = self.conn
        obj = self._modifiable(s.table, "UPDATE")
        visible = [c.name for c in obj.visible_columns]
        assigned = {}
        for name, value in s.assignments:
            if name not in visible:
                raise ProgrammingError(f'column "{name}" of relation "{s.table}" does not exist')
            assigned[name] = value
        engine = conn.wh.dml_engine(s.table)
        try:
            changed = self._updated_rows(s, obj, assigned, engine)
        finally:
            conn.wh.release_spark()
        self.rowcount = changed.num_rows
        if not changed.num_rows:
            self._after_dml()
            return
        cols = ", ".join(quote(c.name) for c in obj.columns)
        moved = " OR ".join(f"{quote(k)} IS DISTINCT FROM {quote('_old_' + k)}" for k in obj.stream_key)
        old_as = ", ".join(
            (f"{quote('_old_' + c.name)} AS {quote(c.name)}" if c.name in obj.stream_key else quote(c.name))
            for c in obj.columns)
        # a row whose key changed is deleted under its old key, then inserted under the new one; in
        # a table ON CONFLICT DO NOTHING every updated row is (else its insert would be ignored)
        if obj.options.get(ON_CONFLICT) == NOTHING:
            moved = "true"
        deletes = conn.engine.sql(f"SELECT {old_as} FROM c WHERE {moved}", c=changed)
        upserts = _storable(conn.engine.sql(f"SELECT {cols} FROM c", c=changed), s.table,
                                   [c for c in obj.columns if c.name in assigned])
        rows = pa.concat_tables([deletes, upserts])
        if obj.pk:
            nulls = [k for k in obj.pk if upserts.column(k).null_count]
            if nulls:
                from .errors import IntegrityError

                raise IntegrityError(f'null value in column "{nulls[0]}" of {s.table!r} violates its primary key')
        conn.wh.stage(s.table, rows, [-1] * deletes.num_rows + [1] * upserts.num_rows)
        self._after_dml()

    def _updated_rows(self, s: st.Update, obj, assigned: dict, engine) -> pa.Table:
        """Each row an UPDATE touches, as it becomes, with its old stream key (`_old_<key>`): found
        by `engine` (on Spark for a large table, only these rows reaching this process)."""
        current = self.conn.wh.pending_rows(s.table, engine)
        cond = f" WHERE {s.where.sql(dialect='duckdb')}" if s.where is not None else ""
        new_cols = []
        for c in obj.columns:
            if c.name in assigned:
                value = sqltypes.with_field_names_sql(assigned[c.name], c.type)
                new_cols.append(f"CAST({value.sql(dialect='duckdb')} AS {sqltypes.duckdb_type(c.type)}) "
                                f"AS {quote(c.name)}")
            else:
                new_cols.append(quote(c.name))
        old_keys = [f"{quote(k)} AS {quote('_old_' + k)}" for k in obj.stream_key]
        try:
            return engine.to_arrow(engine.sql(
                f"SELECT {', '.join(new_cols + old_keys)} FROM {quote(s.table)}{cond}", **{s.table: current}))
        except Exception as e:
            raise ProgrammingError(f"UPDATE {s.table}: {str(e).splitlines()[0]}") from None

    def _do_delete(self, s: st.Delete):
        conn = self.conn
        obj = self._modifiable(s.table, "DELETE")
        engine = conn.wh.dml_engine(s.table)
        cond = f" WHERE {s.where.sql(dialect='duckdb')}" if s.where is not None else ""
        try:
            current = conn.wh.pending_rows(s.table, engine)
            try:
                gone = engine.to_arrow(engine.sql(f"SELECT * FROM {quote(s.table)}{cond}", **{s.table: current}))
            except Exception as e:
                raise ProgrammingError(f"DELETE FROM {s.table}: {str(e).splitlines()[0]}") from None
        finally:
            conn.wh.release_spark()
        self.rowcount = gone.num_rows
        if gone.num_rows:
            conn.wh.stage(s.table, gone.select([c.name for c in obj.columns]), [-1] * gone.num_rows)
        self._after_dml()

    def _modifiable(self, table: str, verb: str):
        obj = self.conn.wh.get(table)
        if obj.kind != TABLE:
            raise ProgrammingError(f'cannot {verb} {table!r}: it is a {obj.kind.replace("_", " ")}')
        if obj.append_only:
            raise ProgrammingError(f"cannot {verb} {table!r}: it is an APPEND ONLY table, which accepts only INSERT")
        return obj

    def _after_dml(self):
        if self.conn.implicit_flush:
            self.conn.flush()


# what carries out each kind of statement
HANDLERS: dict[type[Statement], Callable[[Cursor, Statement], None]] = {
    st.CreateTable: Cursor._do_createtable,
    st.CreateSource: Cursor._do_createsource,
    CreateSecret: Cursor._do_createsecret,
    st.CreateView: Cursor._do_createview,
    CreateSink: Cursor._do_createsink,
    CreateIndex: Cursor._do_createindex,
    st.CreateFunction: Cursor._do_createfunction,
    st.Drop: Cursor._do_drop,
    Rename: Cursor._do_rename,
    AlterColumns: Cursor._do_altercolumns,
    st.Flush: Cursor._do_flush,
    st.SetVar: Cursor._do_setvar,
    st.Show: Cursor._do_show,
    st.Describe: Cursor._do_describe,
    st.Explain: Cursor._do_explain,
    st.Query: Cursor._do_query,
    st.Insert: Cursor._do_insert,
    st.Update: Cursor._do_update,
    st.Delete: Cursor._do_delete,
}


def _bind_parameters(sql: str, parameters) -> str:
    """Substitute qmark parameters as SQL literals (sqlglot builds the literals, never string pasting)."""
    tree_sql = []
    params = list(parameters)
    tokens = st._DIALECT.tokenize(sql)
    last = 0
    for t in tokens:
        if t.text == "?":
            if not params:
                raise ProgrammingError("not enough parameters for the statement")
            tree_sql.append(sql[last:t.start])
            tree_sql.append(exp.convert(params.pop(0)).sql(dialect=st.DIALECT))
            last = t.end + 1
    tree_sql.append(sql[last:])
    if params:
        raise ProgrammingError("too many parameters for the statement")
    return "".join(tree_sql)


__all__ = ["Connection", "Cursor", "connect", "sqlglot"]


_INTERVAL_FIELDS = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanoseconds", "<i8")])


def _storable(data: pa.Table, table: str, visible: list) -> pa.Table:
    """Rows with their jsonb values in PostgreSQL's one form (dagster_rw.jsonb), and their
    intervals checked to be storable (a Parquet interval has no negative field)."""
    for c in visible:
        if c.type == "interval" and c.name in data.column_names:
            for chunk in data.column(c.name).chunks:
                fields = np.frombuffer(chunk.buffers()[1], dtype=_INTERVAL_FIELDS)[chunk.offset:chunk.offset + len(chunk)]
                valid = chunk.is_valid().to_numpy(zero_copy_only=False)
                negative = valid & ((fields["months"] < 0) | (fields["days"] < 0) | (fields["nanoseconds"] < 0))
                if negative.any():
                    shown = chunk[int(np.argmax(negative))].as_py()
                    raise DataError(f"cannot store into {table!r}: column {c.name!r}: the interval (months "
                                    f"{shown.months}, days {shown.days}, nanoseconds {shown.nanoseconds}) has a "
                                    "negative field, which a stored interval (Parquet's) cannot hold")
    for c in visible:
        if c.type == "jsonb" and c.name in data.column_names:
            i = data.column_names.index(c.name)
            data = data.set_column(i, c.name, jsonb.normalize_array(
                data.column(i), f" in column {c.name!r} of {table!r}"))
    return data


def _same_types(data: pa.Table, columns: list[str], visible: list) -> pa.Table | None:
    """Rows whose columns already have the table's types, in the table's column order (missing
    columns NULL), without a cast; None when a column needs one."""
    out = []
    for c in visible:
        want = sqltypes.arrow_type(c.type)
        if c.name in columns:
            col = data.column(columns.index(c.name))
            if col.type != want:
                return None
            out.append(col)
        else:
            out.append(pa.nulls(data.num_rows, want))
    return pa.table(out, names=[c.name for c in visible])
