"""The step-file Parquet writer (storage/plain_parquet.py): what it writes must read back, in
pyarrow, DuckDB and Spark, exactly as pyarrow's own writer's file of the same table does."""
from __future__ import annotations

import datetime
import os
import uuid

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_rw.storage import parquet_io, plain_parquet

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.bool_(), pa.date32(),
         pa.timestamp("us"), pa.timestamp("us", tz="UTC")]


def _column(rng, t: pa.DataType, n: int, nulls: bool, shape: str) -> pa.Array:
    """Random values of type t: spread over the type's range, one value repeated, two values, or
    a few small ones (the shapes the writer encodes differently)."""
    mask = rng.random(n) < 0.3 if nulls else None
    if pa.types.is_boolean(t):
        return pa.array(rng.random(n) < 0.5, mask=mask)
    if pa.types.is_floating(t):
        return pa.array(rng.normal(size=n) * 1e6, mask=mask).cast(t)
    if pa.types.is_date32(t):
        return pa.array(rng.integers(-100_000, 100_000, n).astype(np.int32), mask=mask).cast(t)
    if pa.types.is_timestamp(t):
        return pa.array(rng.integers(-10**16, 10**16, n), mask=mask).cast(t)
    info = np.iinfo(t.to_pandas_dtype())
    if shape == "one":
        values = np.full(n, rng.integers(info.min, info.max, endpoint=True), t.to_pandas_dtype())
    elif shape == "two":
        values = np.where(rng.random(n) < 0.5, -1, 1).astype(t.to_pandas_dtype())
    elif shape == "few":
        values = rng.integers(-5, 100, n).astype(t.to_pandas_dtype())
    else:
        values = rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True)
    return pa.array(values, mask=mask)


@st.composite
def tables(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 3000))
    columns, fields = [], []
    for i in range(draw(st.integers(1, 6))):
        t = draw(st.sampled_from(TYPES))
        nulls = draw(st.booleans())
        shape = draw(st.sampled_from(["spread", "one", "two", "few"]))
        columns.append(_column(rng, t, n, nulls, shape))
        fields.append(pa.field(f"c{i}", t, nullable=nulls))
    table = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    start = draw(st.integers(0, n - 1))  # a slice: arrays that start inside a bitmap byte
    table = table.slice(start, draw(st.integers(1, n - start)))
    if draw(st.booleans()):  # several chunks per column
        cut = table.num_rows // 2
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table


def _duck(path: str) -> pa.Table:
    return duckdb.connect().sql(f"SELECT * FROM read_parquet('{path}')").to_arrow_table()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=tables())
def test_files_read_back_as_pyarrows_own_in_pyarrow_and_duckdb(tmp_path, table):
    mine, theirs = str(tmp_path / f"{uuid.uuid4().hex}.parquet"), str(tmp_path / f"{uuid.uuid4().hex}.parquet")
    stats = [f.name for f in table.schema]
    assert plain_parquet.write(table, mine, stats)
    pq.write_table(table, theirs)
    back = pq.ParquetFile(mine).read()
    assert back.schema == table.schema
    assert back.equals(table.combine_chunks())
    assert _duck(mine).equals(_duck(theirs))
    meta = pq.ParquetFile(mine).metadata.row_group(0)
    for i, field in enumerate(table.schema):
        values = [v for v in table.column(i).to_pylist() if v is not None]
        got = meta.column(i).statistics
        if pa.types.is_floating(field.type) or pa.types.is_boolean(field.type):
            continue  # no statistics written for these
        assert got is not None and got.null_count == table.column(i).null_count
        if values:
            assert (got.min, got.max) == (min(values), max(values))
        else:
            assert not got.has_min_max


def test_duckdb_filters_by_the_written_statistics_correctly(tmp_path):
    """Statistics are what readers skip row groups by: wrong ones would drop rows silently."""
    path = str(tmp_path / "k.parquet")
    keys = np.arange(1000, 2000, dtype=np.int64)
    table = pa.table({"k": keys, "v": pa.array(keys.astype(np.int32) % 7)})
    assert plain_parquet.write(table, path, ["k"])
    con = duckdb.connect()
    for lo, hi in [(0, 999), (999, 1000), (1500, 1510), (1999, 5000), (2000, 9000)]:
        got = con.sql(f"SELECT count(*) FROM read_parquet('{path}') WHERE k BETWEEN {lo} AND {hi}").fetchall()[0][0]
        assert got == int(((keys >= lo) & (keys <= hi)).sum())


@pytest.mark.parametrize("field", [pa.field("s", pa.string()), pa.field("d", pa.decimal128(10, 2)),
                                   pa.field("t", pa.timestamp("ns")), pa.field("i", pa.month_day_nano_interval())])
def test_types_it_does_not_handle_are_left_to_pyarrow_and_nothing_is_written(tmp_path, field):
    values = {"s": ["a"], "d": [1], "t": [1], "i": [pa.MonthDayNano([1, 2, 3])]}[field.name]
    table = pa.table({"k": pa.array([1]), field.name: pa.array(values, field.type)})
    path = str(tmp_path / "x.parquet")
    assert not plain_parquet.write(table, path)
    assert not os.path.exists(path)
    if field.name == "i":
        return  # intervals: DuckDB writes those files (see sort_for_sst)
    parquet_io.write_parquet(table, path, ["k"])  # the step writer falls back to pyarrow
    assert pq.read_table(path).column(field.name).to_pylist() == table.column(field.name).to_pylist()


def test_a_step_file_uses_the_plain_writer_and_a_large_merge_does_not(tmp_path):
    small, large = str(tmp_path / "small.parquet"), str(tmp_path / "large.parquet")
    table = pa.table({"k": np.arange(10, dtype=np.int64), "_epoch": np.full(10, 3, np.int64),
                      "_del": np.zeros(10, bool)})
    parquet_io.write_parquet(table, small, ["k"])
    assert pq.ParquetFile(small).metadata.created_by == plain_parquet.CREATED_BY
    n = parquet_io._COMPACT_MIN_ROWS
    big = pa.table({"k": np.arange(n, dtype=np.int64), "_epoch": np.full(n, 3, np.int64), "_del": np.zeros(n, bool)})
    parquet_io.write_parquet(big, large, ["k"])
    assert pq.ParquetFile(large).metadata.created_by != plain_parquet.CREATED_BY
    assert pq.read_table(large).cast(big.schema).equals(big)


def test_spark_reads_the_files_as_it_reads_pyarrows(tmp_path, spark):
    rng = np.random.default_rng(7)
    n = 500
    columns, fields = [], []
    for t in TYPES:
        for nulls in (False, True):
            columns.append(_column(rng, t, n, nulls, "spread"))
            fields.append(pa.field(f"c{len(fields)}", t, nullable=nulls))
    columns += [_column(rng, pa.int64(), n, False, "one"), _column(rng, pa.int64(), n, False, "two"),
                _column(rng, pa.int32(), n, False, "few")]
    fields += [pa.field(f"c{len(fields) + i}", t, nullable=False) for i, t in enumerate([pa.int64(), pa.int64(), pa.int32()])]
    table = pa.Table.from_arrays(columns, schema=pa.schema(fields)).slice(3)
    mine, theirs = str(tmp_path / "mine.parquet"), str(tmp_path / "theirs.parquet")
    assert plain_parquet.write(table, mine, [f.name for f in fields])
    pq.write_table(table, theirs)
    a, b = spark.read.parquet(mine), spark.read.parquet(theirs)
    assert a.schema == b.schema
    assert a.collect() == b.collect()
    assert a.filter("c6 > 0").count() == b.filter("c6 > 0").count() > 0  # c6: int64 with statistics
    assert a.filter(f"c{len(fields) - 2} = 1").count() == int((table.column(len(fields) - 2).to_numpy() == 1).sum())


def test_thrift_integers_take_the_compact_protocols_zigzag_varints():
    out = bytearray()
    plain_parquet._struct(out, [(1, "i32", -1), (2, "i64", 300), (20, "i32", 0), (21, "bool", True)])
    # field 1 (delta 1, i32): zigzag(-1) = 1; field 2 (delta 1, i64): zigzag(300) = 600 = 0xd8 0x04;
    # field 20 (delta 18 > 15: long form, type then zigzag id 40); field 21 (delta 1, true); stop
    assert bytes(out) == bytes([0x15, 0x01, 0x16, 0xD8, 0x04, 0x05, 0x28, 0x00, 0x11, 0x00])


def test_dates_and_timestamps_keep_their_values(tmp_path):
    path = str(tmp_path / "d.parquet")
    table = pa.table({"d": pa.array([datetime.date(1, 1, 1), datetime.date(9999, 12, 31), None]),
                      "t": pa.array([datetime.datetime(1969, 12, 31, 23, 59, 59, 999999), None,
                                     datetime.datetime(2026, 11, 25, 6, 7, 8)], pa.timestamp("us"))})
    assert plain_parquet.write(table, path, ["d", "t"])
    assert pq.read_table(path).equals(table)
    assert _duck(path).column("t").to_pylist() == table.column("t").to_pylist()


@pytest.mark.parametrize("t", TYPES)
def test_a_column_of_nulls_only_reads_back(tmp_path, t):
    path = str(tmp_path / "n.parquet")
    table = pa.table({"k": pa.array([1, 2, 3]), "x": pa.array([None, None, None], t)})
    assert plain_parquet.write(table, path, ["k", "x"])
    assert pq.read_table(path).equals(table)
    assert _duck(path).column("x").to_pylist() == [None, None, None]
