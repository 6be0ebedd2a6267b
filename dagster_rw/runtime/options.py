"""The options of a connection (`dagster_rw.connect(warehouse, **options)`): where the warehouse is
and how to reach it, which engine runs steps, and the figures that bound compaction, garbage,
Spark steps, source splits, sink retries and commit races. Read once, never changed: a connection
that wants others is opened with them. A name that is not an option is refused, naming those that are."""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..errors import ProgrammingError


@dataclasses.dataclass(frozen=True)
class Options:
    # -- where the warehouse is --------------------------------------------------------------------
    s3_endpoint_url: str | None = None  # an S3-compatible endpoint (MinIO, a test server) for s3:// warehouses
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = dataclasses.field(default=None, repr=False)
    aws_region: str | None = None
    # the warehouse as the Spark cluster's file system reads it (such as s3a://bucket/prefix);
    # without it Spark tasks read an S3 warehouse with pyarrow, and a local one at its own path,
    # which on a cluster must be a shared folder
    spark_warehouse_url: str | None = None
    # the bound of this process's cache of decoded state files (4 GB by default, or
    # DAGSTER_RW_SST_CACHE_BYTES); shared by its connections; larger files are mapped, not decoded
    cache_bytes: int | None = None

    # -- storage -----------------------------------------------------------------------------------
    compact_max_files: int = 16  # merge a state table's newest small files beyond this many
    background_compaction: bool = True  # in-process, merge them on a background thread (runtime/compaction.py)
    gc_grace_seconds: float = 30.0  # how long files dropped from a manifest stay readable by other readers
    # how old a file nothing in the log explains must be before the sweep deletes it (storage/sweep.py):
    # longer than any step takes from writing its first file to its commit
    sweep_grace_seconds: float = 24 * 3600.0

    # -- engines -----------------------------------------------------------------------------------
    engine: str = "auto"  # 'duckdb' (in-process), 'spark', or 'auto': by the size of the step's input
    spark_threshold_rows: int = 2_000_000  # with 'auto', steps reading more change rows than this go to Spark
    # with 'auto', batch SELECTs reading more committed rows than this go to Spark (in-process DuckDB
    # answers the queries of benchmarks/batch_select.py faster up to tens of millions of rows)
    spark_select_rows: int = 20_000_000
    source_spark_threshold_records: int = 500_000  # with 'auto', source steps reading more records use Spark tasks
    spark_file_bytes: int = 128 << 20  # what a Spark step aims at per output file (rows as Arrow holds them)
    spark_broadcast_rows: int = 1_000_000  # a Spark step reading at most this many change rows broadcasts them
    # a back-fill on Spark leaves the state of a join's larger side (a table or view read through
    # filters and projections) unbuilt until the other side first changes (operators/join.py)
    deferred_join_state: bool = True
    # a back-fill on Spark leaves the value counts of a grouped MIN/MAX unbuilt (where its input is
    # tables and views through maps and inner joins) until a step first takes rows away from it
    # (operators/aggregate/extremes.py)
    deferred_value_counts: bool = True
    source_split_records: int = 100_000  # records per Spark task (split) of a source step
    source_split_bytes: int = 32 << 20  # bytes of a file per piece (Spark task) of a file source step
    source_spark_threshold_bytes: int = 256 << 20  # with 'auto', file source steps reading more use Spark tasks

    # -- time ------------------------------------------------------------------------------------
    # the time a barrier records (seconds since 1970), which is now() in the views that step to its
    # epoch (temporal filters): time.time by default; a function returning the time instead (a
    # replay of recorded data at its own times, a test that moves time by hand)
    clock: Callable[[], float] | None = dataclasses.field(default=None, repr=False)

    # -- sinks -------------------------------------------------------------------------------------
    sink_retry_attempts: int = 5  # attempts per batch in one refresh of a sink (WITH retry.* overrides)
    sink_retry_initial_seconds: float = 0.2  # first backoff; doubles per failure, with jitter
    sink_retry_max_seconds: float = 10.0  # cap on one backoff
    flush_delivers_sinks: bool = True  # FLUSH tries each sink once after the views (failures only recorded)

    # -- commit races ------------------------------------------------------------------------------
    # a FLUSH, or the refresh of one object (a Dagster asset step), whose step lost a commit race to
    # another writer reads the warehouse again and goes on from what that writer committed, up to
    # this many times, backing off (doubling from the first figure, with jitter, up to the cap)
    flush_conflict_retries: int = 10
    flush_retry_initial_seconds: float = 0.02
    flush_retry_max_seconds: float = 1.0

    @classmethod
    def of(cls, given: dict) -> Options:
        """The options named in `given` (the rest at their defaults); a name that is no option is
        refused with the list of those that are."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ProgrammingError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                                   f"for connect(); the options are: {', '.join(known)}")
        return cls(**given)

    def __getitem__(self, name: str):
        """An option by its name (options["engine"] is options.engine)."""
        return getattr(self, name)
