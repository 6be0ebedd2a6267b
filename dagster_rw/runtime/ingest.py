"""Ingestion: the Kafka offsets each barrier records, and the steps that read exactly those records.

A barrier writes, with its epoch record, the end offset it took from every partition of every
source (`source_offsets`), never behind the previous barrier's and at most a bounded number of
records ahead of it. A source's step reads the records between the offsets its manifest committed
and the offsets recorded for its target epoch, and commits the new offsets in the same manifest
version as the rows: a crash before that commit repeats the same read, a crash after it never
reads those records again. Records that do not decode, and the values that do not fit their
column (NULL in a row that is kept), go with their offsets to the source's `errors` state table
(queryable as `rw_source_errors`) in that same commit.
"""
from __future__ import annotations

import dataclasses
import time
import uuid

import numpy as np
import pyarrow as pa

from .. import types as sqltypes
from ..errors import OperationalError
from ..operators.base import W
from ..sources.decode import RecordDecoder
from ..sources import kafka_records
from ..sources.kafka import KafkaTopic
from ..sources.spec import KafkaSourceSpec
from ..storage.catalog import MATERIALIZED_VIEW, SOURCE, TABLE, CatalogObject
from ..storage.manifest import PLANNED_UNDER, Manifest
from ..storage.state_table import DELETED, StateTable
from . import epochs, file_ingest, step
from .watermarks import advance_watermark
from .interfaces import StepWarehouse

SOURCE_OFFSETS = "source_offsets"  # key of the per-source end offsets in an epoch record
ERRORS = "errors"  # a connector object's state table of bad records
ERRORS_RELATION = "rw_source_errors"
ERROR_COLUMNS = [("source", "varchar"), ("topic", "varchar"), ("partition", "integer"), ("offset", "bigint"),
                 ("raw_value", "varchar"), ("error", "varchar"), ("epoch", "bigint")]
# a record's errors are keyed by its position and the cause: a kept row may have several bad values
ERROR_KEY = ["partition", "offset", "error"]
ERROR_SCHEMA = pa.schema([("source", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("raw_value", pa.string()), ("error", pa.string()),
                          ("epoch", pa.int64())])
ROW_ID = "_row_id"  # the hidden row id of tables without a primary key (as in runtime.warehouse)
PARTITION_SHIFT = 40  # hidden row id = partition << 40 | offset: stable across retries and restarts


def is_connector(obj: CatalogObject) -> bool:
    """A source, or a table fed by a connector (a sink has a connector too, but it is an output)."""
    return obj.kind in (SOURCE, TABLE) and bool((obj.options or {}).get("connector"))


def spec_of(obj: CatalogObject) -> KafkaSourceSpec:
    return KafkaSourceSpec.from_options(obj.options)


def client_security(wh: StepWarehouse, spec: KafkaSourceSpec, name: str) -> dict:
    """kafka-python's settings for the source's security protocol and SASL login, the password
    read in clear here, where the consumer is made (it is stored sealed: storage.secrets)."""
    if spec.sasl_mechanism is None:
        return {} if spec.security_protocol == "PLAINTEXT" else {"security_protocol": spec.security_protocol}
    from .secrets import clear_value

    return {"security_protocol": spec.security_protocol, "sasl_mechanism": spec.sasl_mechanism,
            "sasl_plain_username": spec.sasl_username,
            "sasl_plain_password": clear_value(wh, spec.sasl_password, "properties.sasl.password", f"source {name!r}")}


def topic_of(wh: StepWarehouse, obj: CatalogObject, timeout: float = 10.0) -> KafkaTopic:
    spec = spec_of(obj)
    return KafkaTopic(spec.bootstrap, spec.topic, timeout, client_security(wh, spec, obj.name))


PROBE_TIMEOUT = 5.0  # for status and pending_inputs, which must answer even when Kafka does not


def _ints(d: dict) -> dict[int, int]:
    return {int(k): int(v) for k, v in (d or {}).items()}


def committed_offsets(m: Manifest) -> dict[int, int]:
    """The offsets up to which a source's committed epoch has read (exclusive), per partition."""
    return _ints(m.positions.get("offsets", {}))


def recorded_offsets(store, obj: CatalogObject, upto: int) -> dict[int, int] | None:
    """The end offsets the newest epoch record <= upto took for source `obj` (None: none did).
    Records from before its creation belong to an earlier object of the same name."""
    name = obj.name
    for n in sorted((n for n in epochs.epoch_numbers(store) if obj.created_epoch < n <= upto), reverse=True):
        try:
            record = epochs.load_epoch(store, n)
        except FileNotFoundError:
            continue
        offsets = record.get(SOURCE_OFFSETS, {}).get(name)
        if offsets is not None:
            return _ints(offsets)
    return None


def _previous(wh: StepWarehouse, obj: CatalogObject, newest: int) -> dict[int, int]:
    prev = dict(committed_offsets(wh.manifest(obj.name)))
    for p, o in (recorded_offsets(wh.store, obj, newest) or {}).items():
        prev[p] = max(prev.get(p, 0), o)
    return prev


def barrier_offsets(wh: StepWarehouse):
    """The `extra` for epochs.barrier: given the newest epoch, every Kafka source's end offsets
    and the files every file source takes."""
    connectors = [o for o in wh.catalog().objects.values() if is_connector(o)]
    sources = [o for o in connectors if not file_ingest.is_file_source(o)]
    file_sources = [o for o in connectors if file_ingest.is_file_source(o)]
    if not connectors:
        return None
    take_files = file_ingest.barrier_files(wh, file_sources) if file_sources else None
    high: dict[str, dict[int, int] | None] = {}  # asked once per barrier, not once per retry

    def extra(newest: int) -> dict:
        out = {}
        for obj in sources:
            prev = _previous(wh, obj, newest)
            if obj.name not in high:
                try:
                    high[obj.name] = topic_of(wh, obj).end_offsets()
                except OperationalError:
                    high[obj.name] = None  # Kafka unreachable: this epoch takes nothing from it
            hw = high[obj.name] or {}
            bound = spec_of(obj).max_records_per_partition
            ends = {}
            for p in sorted(set(hw) | set(prev)):
                start = prev.get(p, 0)
                end = max(start, hw.get(p, start))
                if bound:
                    end = min(end, start + bound)
                ends[str(p)] = end
            out[obj.name] = ends
        more = take_files(newest) if take_files is not None else {}
        return {SOURCE_OFFSETS: out, **more} if out else more

    return extra


def pending(wh: StepWarehouse) -> dict[str, int]:
    """Per source, how many records sit in Kafka beyond what the newest barrier took."""
    newest = epochs.newest_epoch(wh.store)
    out = {}
    for obj in wh.catalog().objects.values():
        if not is_connector(obj):
            continue
        if file_ingest.is_file_source(obj):
            n = file_ingest.pending(wh, obj)
            if n:
                out[obj.name] = n
            continue
        try:
            hw = topic_of(wh, obj, PROBE_TIMEOUT).end_offsets()
        except OperationalError:
            continue
        prev = _previous(wh, obj, newest)
        n = sum(max(0, end - prev.get(p, 0)) for p, end in hw.items())
        if n:
            out[obj.name] = n
    return out


def read_rows(wh: StepWarehouse, obj: CatalogObject, ranges: dict[int, tuple[int, int]], epoch: int, read: set[str] | None = None):
    """The decoded rows (declared columns, hidden row id) of the records in `ranges`, and the bad
    records as rows of the error table; `read`: the columns to decode (None: all), the others NULL."""
    spec = spec_of(obj)
    values, ids = _read_records(wh, spec, ranges, client_security(wh, spec, obj.name))
    declared = [c for c in obj.columns if not c.hidden]
    decoder = RecordDecoder(declared, spec.encode, spec.delimiter, wh.engine, read)
    decoded = decoder.decode_array(values)
    rows = decoded.rows
    if rows.num_columns != len(declared):
        n = rows.num_rows
        rows = pa.table([rows.column(c.name) if c.name in rows.column_names else
                         pa.nulls(n, sqltypes.arrow_type(c.type)) for c in declared], names=[c.name for c in declared])
    rows = rows.append_column(ROW_ID, pa.array(ids[np.asarray(decoded.good, np.int64)], pa.int64()))
    errors = None
    if decoded.errors:
        at = [i for i, _ in decoded.errors]
        err_ids = ids[at]
        raw = [v.decode("utf-8", "replace") if v is not None else None
               for v in values.take(pa.array(at, pa.int64())).to_pylist()]
        errors = pa.table({
            "source": pa.array([obj.name] * len(at), pa.string()),
            "topic": pa.array([spec.topic] * len(at), pa.string()),
            "partition": pa.array(err_ids >> PARTITION_SHIFT, pa.int64()).cast(pa.int32()),
            "offset": pa.array(err_ids & ((1 << PARTITION_SHIFT) - 1), pa.int64()),
            "raw_value": pa.array(raw, pa.string()),
            "error": pa.array([cause for _, cause in decoded.errors], pa.string()),
            "epoch": pa.array([epoch] * len(at), pa.int64()),
        }, schema=ERROR_SCHEMA)
    return rows, errors


def decoded_columns(wh: StepWarehouse, obj: CatalogObject) -> set[str] | None:
    """The columns a source's steps decode: those its views read (traced through each view's
    plan down to its scan of the source) and its watermark column; None (every column) when a
    consumer is not a view whose plan can be traced (a sink, say), or when that is all of them.
    A table fed by a connector stores its rows, so it decodes every column."""
    if obj.kind != SOURCE:
        return None
    from ..sql.plan import scan_reads

    declared = [c.name for c in obj.columns if not c.hidden]
    read: set[str] = set()
    for consumer in wh.catalog().consumers(obj.name):
        if consumer.kind not in (MATERIALIZED_VIEW, TABLE) or (consumer.kind == TABLE and
                                                               not (consumer.options or {}).get("as_query")):
            return None
        try:
            reads = scan_reads(wh.plan(consumer))
        except Exception:  # noqa: BLE001 - a plan that cannot be traced reads everything
            return None
        if obj.name not in reads:
            return None
        read |= reads[obj.name]
    spec = file_ingest.spec_of(obj) if file_ingest.is_file_source(obj) else spec_of(obj)
    if spec.watermark_column:
        read.add(spec.watermark_column)
    read &= set(declared)
    if not read:
        read = set(declared[:1])  # records are still counted by one column
    return None if len(read) == len(declared) else read


def uses_spark(wh: StepWarehouse, records: int) -> bool:
    choice = wh.options["engine"]
    return choice == "spark" or (choice == "auto" and records > wh.options["source_spark_threshold_records"])


def _read_records(wh: StepWarehouse, spec: KafkaSourceSpec, ranges: dict[int, tuple[int, int]], security: dict):
    """The raw values of the records in `ranges` (one Arrow binary array, or chunks of one) and
    their hidden row ids (partition, then offset order): in-process for small reads, split into
    offset ranges read by Spark tasks for large ones. No Python object per record either way."""
    ranges = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if ranges and uses_spark(wh, sum(e - s for s, e in ranges.values())):
        from ..sources.splits import cut, read_on_spark

        spark = wh.spark_engine().spark
        table = read_on_spark(spark, spec.bootstrap, spec.topic, cut(ranges, wh.options["source_split_records"]),
                              security)
        parts = table.column("partition").to_numpy().astype(np.int64)
        ids = (parts << PARTITION_SHIFT) + table.column("offset").to_numpy()
        return table.column("value"), ids
    records = KafkaTopic(spec.bootstrap, spec.topic, security=security).read_records(ranges)
    parts, row_ids = [], []
    for p in sorted(records):
        for r in records[p]:
            parts.append(r)
            row_ids.append((np.int64(p) << PARTITION_SHIFT) + r.offsets)
    return kafka_records.value_array(parts), (np.concatenate(row_ids) if row_ids else np.zeros(0, np.int64))


def errors_table(wh: StepWarehouse, obj: CatalogObject, m: Manifest, engine=None) -> StateTable:
    return StateTable(wh.store, engine or wh.engine, f"objects/{obj.key_folder}/state/{ERRORS}", ERROR_KEY,
                      ERROR_SCHEMA, m.state.get(ERRORS, []))


def refresh_connector(wh: StepWarehouse, obj: CatalogObject) -> int:
    """One step of a source or a table with a connector: read exactly the offsets of (committed, newest]."""
    m = wh.manifest(obj.name)
    committed = m.epoch
    target = epochs.newest_epoch(wh.store)
    if target <= committed:
        return committed
    t0 = time.perf_counter()
    catalog_version = wh.catalog().version
    read = decoded_columns(wh, obj)
    if file_ingest.is_file_source(obj):
        rows, bad, positions = file_ingest.read_epoch(wh, obj, m, target, read)
        errors = pa.table([pa.array(c, f.type) for c, f in zip(zip(*bad), ERROR_SCHEMA)], schema=ERROR_SCHEMA) \
            if bad else None
    else:
        start = committed_offsets(m)
        recorded = recorded_offsets(wh.store, obj, target) or {}
        ends = {p: max(recorded.get(p, 0), start.get(p, 0)) for p in set(recorded) | set(start)}
        ranges = {p: (start.get(p, 0), ends[p]) for p in ends if ends[p] > start.get(p, 0)}
        rows, errors = read_rows(wh, obj, ranges, target, read)
        positions = {**m.positions, "offsets": {str(p): o for p, o in sorted(ends.items())}}
    engine = wh.engine
    ctx = step.StepContext(wh, obj, m, target, False, engine)
    if errors is not None:
        table = errors_table(wh, obj, m, engine)
        table.stage(errors.append_column(DELETED, pa.array(np.zeros(errors.num_rows, bool))))
        ctx.tables[ERRORS] = table
    schema = step.object_schema(obj)
    delta = rows.select(schema.names).cast(schema).append_column(W, pa.array(np.ones(rows.num_rows, np.int64)))
    ctx.rows_in = rows.num_rows + (errors.num_rows if errors is not None else 0)
    if read is None:
        positions.pop(PLANNED_UNDER, None)
    else:  # a view created meanwhile may read more: then this commit conflicts and the step runs again
        positions[PLANNED_UNDER] = {"catalog": catalog_version, "step": uuid.uuid4().hex[:12]}
    spec = file_ingest.spec_of(obj) if file_ingest.is_file_source(obj) else spec_of(obj)
    positions.update(advance_watermark(spec.watermark_column, spec.watermark_delay_us, m.positions, rows, target))
    nxt = dataclasses.replace(m, positions=positions)
    return step._commit_output(wh, obj, nxt, ctx, delta, committed, target, t0, defer=wh.pipelining)


def source_snapshot(wh: StepWarehouse, obj: CatalogObject, m: Manifest) -> pa.Table:
    """A source's rows as of its committed epoch: it stores none, so read them again from Kafka
    (from its start offsets to its committed offsets; bad records are already in the error table)."""
    schema = step.object_schema(obj)
    if file_ingest.is_file_source(obj):
        return file_ingest.snapshot_rows(wh, obj, m).select(schema.names).cast(schema)
    start = _ints(obj.options.get("start_offsets", {}))
    ends = committed_offsets(m)
    ranges = {p: (start.get(p, 0), e) for p, e in ends.items() if e > start.get(p, 0)}
    if not ranges:
        return schema.empty_table()
    rows, _ = read_rows(wh, obj, ranges, m.epoch)
    return rows.select(schema.names).cast(schema)


def source_errors(wh: StepWarehouse) -> pa.Table:
    """Every connector object's bad records: the `rw_source_errors` relation."""
    parts = []
    for obj in wh.catalog().objects.values():
        if is_connector(obj):
            m = wh.manifest(obj.name)
            if m.state.get(ERRORS):
                parts.append(wh.engine.to_arrow(errors_table(wh, obj, m).read_all()).cast(ERROR_SCHEMA))
    return pa.concat_tables(parts) if parts else ERROR_SCHEMA.empty_table()


def status_fields(wh: StepWarehouse, obj: CatalogObject, m: Manifest) -> dict:
    """Status (and Dagster metadata) of a source: offsets reached, lag behind Kafka (files read,
    files not taken yet), bad records."""
    if file_ingest.is_file_source(obj):
        return {**file_ingest.status_fields(wh, obj, m), "source_errors": sum(f.rows for f in m.state.get(ERRORS, []))}
    reached = committed_offsets(m)
    out = {
        "source_topic": spec_of(obj).topic,
        "source_end_offsets": {str(p): o for p, o in sorted(reached.items())},
        "source_errors": sum(f.rows for f in m.state.get(ERRORS, [])),
    }
    try:
        hw = topic_of(wh, obj, PROBE_TIMEOUT).end_offsets()
        out["source_high_watermarks"] = {str(p): o for p, o in sorted(hw.items())}
        out["consumer_lag"] = sum(max(0, o - reached.get(p, 0)) for p, o in hw.items())
    except OperationalError:
        out["source_high_watermarks"] = None
        out["consumer_lag"] = None
    return out


def connector_definition(wh: StepWarehouse, statement) -> tuple[dict, dict]:
    """A connector object's catalog options and its first manifest's positions (Kafka: the start
    offsets; files: none read)."""
    from ..sources.spec import source_spec

    spec = source_spec(statement)
    if isinstance(spec, file_ingest.FileSourceSpec):
        return spec.to_options(), {"files": {}, "next_file": 0}
    if spec.startup_mode == "earliest":
        # Kafka need not be up to define a source that starts at the beginning (a project read
        # offline, say): unknown partitions are then read from their first offset
        try:
            start = KafkaTopic(spec.bootstrap, spec.topic, PROBE_TIMEOUT,
                               client_security(wh, spec, statement.name)).start_offsets()
        except OperationalError:
            start = {}
    else:  # 'latest' means the end at CREATE, which only Kafka can tell
        start = KafkaTopic(spec.bootstrap, spec.topic, PROBE_TIMEOUT,
                           client_security(wh, spec, statement.name)).end_offsets()
    offsets = {str(p): o for p, o in sorted(start.items())}
    return {**spec.to_options(), "start_offsets": offsets}, {"offsets": offsets}


def sealed_unapplied(wh: StepWarehouse, obj: CatalogObject, m: Manifest, upto: int) -> int:
    """What a connector object has not read of the epochs up to `upto`: Kafka records, or files."""
    if file_ingest.is_file_source(obj):
        return file_ingest.sealed_unapplied(wh, obj, m, upto)
    recorded = recorded_offsets(wh.store, obj, upto) or {}
    committed = committed_offsets(m)
    return sum(max(0, end - committed.get(p, 0)) for p, end in recorded.items())


__all__ = ["SOURCE", "barrier_offsets", "pending", "refresh_connector", "source_errors", "source_snapshot"]
