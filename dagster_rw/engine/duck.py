"""The in-process engine: DuckDB over Arrow tables and local Parquet files."""
from __future__ import annotations

import contextlib
import itertools
import threading

import duckdb
import pyarrow as pa

from ..errors import ProgrammingError
from .base import Engine, ParquetScan

_counter = itertools.count()


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_list(paths) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


class DuckEngine(Engine):
    name = "duckdb"

    def __init__(self, threads: int | None = None):
        self.con = duckdb.connect()
        if threads:
            self.con.execute(f"SET threads TO {int(threads)}")
        self.con.execute("SET preserve_insertion_order = false")
        self.lock = threading.RLock()

    @contextlib.contextmanager
    def _bound(self, relations: dict):
        """Make the relations visible to DuckDB under their names for the duration of one query."""
        with self.lock:
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
            return self.con.sql(query).to_arrow_table()

    def execute(self, query: str, **relations):
        """Run a statement and return DuckDB's Python rows (used for batch SELECT)."""
        with self._bound(relations):
            rel = self.con.sql(query)
            if rel is None:
                return None, []
            # type codes as plain strings ("INTEGER", "TIMESTAMP WITH TIME ZONE"), as the Spark path gives
            description = [(d[0], str(d[1])) + tuple(d[2:]) for d in rel.description]
            return description, rel.fetchall()

    def describe(self, query: str, **relations) -> list[tuple[str, str]]:
        """Column names and DuckDB types of a query's result, without running it over data."""
        with self._bound(relations):
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
        with self._bound({name: relation}):
            return self.con.execute(
                f"COPY (SELECT * FROM {quote(name)}{order}) TO '{path}' "
                "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
            ).fetchall()[0][0]


def write_query(query: str, path: str, order_by: list[str], **relations) -> int:
    """Write a query's rows, sorted by `order_by`, as Parquet, on a DuckDB connection of its own
    that streams from the relations (Parquet scans) and spills to disk what does not fit in
    memory: for inputs too large to decode (a merge of large state files). Returns the row count."""
    import os
    import tempfile

    con = duckdb.connect()
    try:
        spill = os.path.join(tempfile.gettempdir(), "dagster_rw_spill")
        con.execute(f"SET temp_directory = '{spill}'")
        con.execute("SET preserve_insertion_order = false")
        for name, rel in relations.items():
            con.execute(f"CREATE TEMP VIEW {quote(name)} AS {scan_sql(rel)}")
        order = ", ".join(quote(c) + " NULLS FIRST" for c in order_by)
        return con.execute(f"COPY (SELECT * FROM ({query}) rw_q{' ORDER BY ' + order if order else ''}) TO "
                           f"'{path}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)").fetchall()[0][0]
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
