"""The in-process engine: DuckDB over Arrow tables and local Parquet files.

Every DuckDB connection here runs with external access off: it reads and writes files only under
the folders the engine was given or has been handed files in (a warehouse's folder or its local
cache of S3 objects, the scratch folder its files are written in), loads no extension, scans no
Python variable by name, and its configuration is locked, so no SQL turns any of that back on.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import threading

import duckdb
import pyarrow as pa

from ..errors import ProgrammingError
from . import udfs
from .base import Engine, ParquetScan

_counter = itertools.count()


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_list(paths) -> str:
    return "[" + ", ".join(_sql_string(p) for p in paths) + "]"


def locked_connection(folders=(), threads: int | None = None, temp_directory: str | None = None):
    """A DuckDB connection that reaches no file outside `folders` (and its own spill files), loads
    no extension and scans no Python variable by name, with its configuration locked."""
    con = duckdb.connect()
    try:
        if threads:
            con.execute(f"SET threads TO {int(threads)}")
        if temp_directory:
            con.execute(f"SET temp_directory = {_sql_string(temp_directory)}")
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET python_enable_replacements = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute(f"SET allowed_directories = {_sql_list(sorted(folders))}")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def spill_folder() -> str:
    """Where DuckDB spills what does not fit in memory (it may always write there)."""
    return os.path.join(tempfile.gettempdir(), "dagster_rw_spill")


def as_folder(path: str) -> str:
    """A folder as DuckDB's allowed_directories matches it: absolute, with a trailing separator (so
    that /wh does not also allow /wh2)."""
    return os.path.join(os.path.abspath(path), "")


class DuckEngine(Engine):
    name = "duckdb"

    def __init__(self, threads: int | None = None, folders=()):
        self.threads = threads
        self.folders: frozenset[str] = frozenset(as_folder(f) for f in folders)
        self.con = self.connect()
        self.lock = threading.RLock()
        self._with_functions = None  # the connection the engine's Python functions were given to

    def _functions(self, query: str) -> None:
        """Give the connection the Python functions (engine/udfs.py) when `query` calls one."""
        if self._with_functions is not self.con and any(p in query or p.upper() in query for p in udfs.PREFIXES):
            udfs.register_duckdb(self.con)
            self._with_functions = self.con

    def connect(self):
        """A new connection of this engine, reaching its folders only."""
        return locked_connection(self.folders, self.threads, spill_folder())

    def reach(self, folders) -> None:
        """Let the engine's queries read and write files under `folders` too. The configuration of
        a connection is locked, so the connection is made again (the engine keeps nothing in it
        between calls: relations are bound for one query at a time)."""
        wanted = {as_folder(f) for f in folders} - self.folders
        if not wanted:
            return
        with self.lock:
            self.folders = self.folders | wanted
            old, self.con = self.con, self.connect()
            old.close()

    @contextlib.contextmanager
    def _bound(self, relations: dict):
        """Make the relations visible to DuckDB under their names for the duration of one query."""
        with self.lock:
            self.reach(f for rel in relations.values() if isinstance(rel, ParquetScan) for f in rel.local_folders())
            views, arrows = [], []
            try:
                for name, rel in relations.items():
                    if isinstance(rel, pa.Table):
                        self.con.register(name, rel)
                        arrows.append(name)
                    elif isinstance(rel, ParquetScan):
                        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {quote(name)} AS {scan_sql(rel)}")
                        views.append(name)
                    else:
                        raise TypeError(f"not a relation: {type(rel)}")
                yield
            finally:
                for name in arrows:
                    self.con.unregister(name)
                for name in views:
                    self.con.execute(f"DROP VIEW IF EXISTS {quote(name)}")

    def sql(self, query: str, shared: bool = False, broadcast: tuple = (), **relations) -> pa.Table:
        with self._bound(relations):
            self._functions(query)
            try:
                return self.con.sql(query).to_arrow_table()
            except duckdb.Error as e:
                raise user_error(e) from e

    def execute(self, query: str, **relations):
        """Run a statement and return DuckDB's Python rows (used for batch SELECT)."""
        with self._bound(relations):
            self._functions(query)
            rel = self.con.sql(query)
            if rel is None:
                return None, []
            # type codes as plain strings ("INTEGER", "TIMESTAMP WITH TIME ZONE"), as the Spark path gives
            description = [(d[0], str(d[1])) + tuple(d[2:]) for d in rel.description]
            intervals = [i for i, d in enumerate(description) if d[1] == "INTERVAL"]
            if not intervals:
                return description, rel.fetchall()
            # DuckDB gives an interval to Python as a timedelta, which has no months ('1 mon' would
            # be 30 days): such values come as Arrow's (months, days, nanoseconds) instead
            table = _arrow_table(rel.arrow())
            ordered = table.append_column("_rw_ord", pa.array(range(table.num_rows), pa.int64()))
            rows = [list(r[:-1]) for r in self.con.from_arrow(ordered).order("_rw_ord").fetchall()]
            for i in intervals:
                for row, v in zip(rows, table.column(i).to_pylist()):
                    if v is not None and v.months:
                        row[i] = v
            return description, [tuple(r) for r in rows]

    def describe(self, query: str, **relations) -> list[tuple[str, str]]:
        """Column names and DuckDB types of a query's result, without running it over data."""
        with self._bound(relations):
            self._functions(query)
            try:
                rows = self.con.sql(f"DESCRIBE {query}").fetchall()
            except duckdb.Error as e:
                raise ProgrammingError(str(e).split("\n")[0]) from None
            return [(r[0], r[1]) for r in rows]

    def to_arrow(self, relation) -> pa.Table:
        if isinstance(relation, pa.Table):
            return relation
        return self.sql("SELECT * FROM r", r=relation)

    def from_arrow(self, table: pa.Table) -> pa.Table:
        return table

    def num_rows(self, relation) -> int:
        if isinstance(relation, pa.Table):
            return relation.num_rows
        return self.sql("SELECT count(*) AS n FROM r", r=relation).column(0)[0].as_py()

    def write_parquet(self, relation, path: str, order_by: list[str]) -> int:
        order = (" ORDER BY " + ", ".join(quote(c) + " NULLS FIRST" for c in order_by)) if order_by else ""
        name = f"w{next(_counter)}"
        self.reach([os.path.dirname(path)])
        with self._bound({name: relation}):
            return self.con.execute(
                f"COPY (SELECT * FROM {quote(name)}{order}) TO {_sql_string(path)} "
                "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
            ).fetchall()[0][0]


# DuckDB's errors about the values a query met (a string that is no number, an overflow, a division
# by zero) and about the query itself: what PostgreSQL would also refuse, for the user to see as
# such. Other errors (I/O: a missing or corrupt file) go on as they are.
_DATA_ERRORS = (duckdb.ConversionException, duckdb.OutOfRangeException, duckdb.InvalidInputException)
_QUERY_ERRORS = (duckdb.BinderException, duckdb.ParserException, duckdb.CatalogException,
                 duckdb.NotImplementedException)


def user_error(e: duckdb.Error) -> Exception:
    """A dagster_rw error for a DuckDB error a query's values or text caused; else `e` itself."""
    from ..errors import DataError, OperationalError

    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, duckdb.OutOfMemoryException):
        return OperationalError(f"the in-process engine ran out of memory: {first}")
    if isinstance(e, _DATA_ERRORS) and not any(w in first.lower() for w in ("parquet", "file", "magic bytes")):
        return DataError(first)
    if isinstance(e, _QUERY_ERRORS):
        return ProgrammingError(first)
    return e


def write_query(query: str, path: str, order_by: list[str], **relations) -> int:
    """Write a query's rows, sorted by `order_by`, as Parquet, on a DuckDB connection of its own
    that streams from the relations (Parquet scans) and spills to disk what does not fit in
    memory: for inputs too large to decode (a merge of large state files). Returns the row count."""
    folders = {as_folder(os.path.dirname(path))}
    folders.update(as_folder(f) for rel in relations.values() for f in rel.local_folders())
    con = locked_connection(folders, temp_directory=spill_folder())
    try:
        for name, rel in relations.items():
            con.execute(f"CREATE TEMP VIEW {quote(name)} AS {scan_sql(rel)}")
        order = ", ".join(quote(c) + " NULLS FIRST" for c in order_by)
        return con.execute(f"COPY (SELECT * FROM ({query}) rw_q{' ORDER BY ' + order if order else ''}) TO "
                           f"{_sql_string(path)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
                           ).fetchall()[0][0]
    finally:
        con.close()


def scan_sql(scan: ParquetScan) -> str:
    """SQL reading a ParquetScan; an empty scan yields an empty relation of the right schema."""
    if not scan.keys:
        from ..types import duckdb_type_of_arrow

        parts = [f"CAST(NULL AS {duckdb_type_of_arrow(f.type)}) AS {quote(f.name)}" for f in scan.schema]
        return f"SELECT {', '.join(parts)} WHERE false"
    if scan.tag:
        raise TypeError("in-process, staged batches are read as Arrow, not as a tagged scan")
    select = ", ".join(quote(f.name) for f in scan.schema)
    return f"SELECT {select} FROM read_parquet({_sql_list(scan.local_paths())})"


def _arrow_table(result) -> pa.Table:
    """A query's Arrow result as a table (DuckDB hands over a table or a record batch reader)."""
    return result.read_all() if isinstance(result, pa.RecordBatchReader) else result
