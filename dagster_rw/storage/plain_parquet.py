"""A Parquet writer for step files: one row group, one PLAIN page per column, uncompressed.

A step writes a handful of small files (a 50M-row benchmark epoch: ~350k rows in five files), and
pyarrow's Parquet writer spends ~2.2 ms on a 100k-row file of five integer columns, most of it on
the columns that carry little: a constant `_epoch` (dictionary-encoded, ~0.35 ms), a boolean `_del`
(~0.7 ms: Arrow converts the bitmap to bytes and back) and a delta-encoded sort key (~0.5 ms).
Here the values go to the file as Arrow holds them: fixed-width columns as their buffer, booleans
and validity as their bitmap (Parquet's bit-packed layout is Arrow's), a column of one value or of
a few small integers as a dictionary of a bit-width 0, 1 or 8 index. The footer is Thrift's compact
protocol, encoded below. The file is ordinary Parquet that pyarrow, DuckDB and Spark read as they
read pyarrow's; its Arrow schema is stored as pyarrow stores it (`ARROW:schema`), so a reader gets
the same Arrow types back.

Column types handled: integers, floats, booleans, dates and microsecond timestamps, with or without
NULLs. Anything else (strings, decimals, intervals, nested types) is left to pyarrow: `write`
returns False without writing.
"""
from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa

# Parquet's enums (parquet.thrift)
_BOOLEAN, _INT32, _INT64, _FLOAT, _DOUBLE = 0, 1, 2, 4, 5
_REQUIRED, _OPTIONAL = 0, 1
_PLAIN, _RLE, _RLE_DICTIONARY = 0, 3, 8
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
_DATE, _TIMESTAMP_MICROS, _INT_8, _INT_16 = 6, 10, 15, 16

CREATED_BY = "dagster-rw plain step-file writer"

# Thrift compact protocol: field and element type codes
_T_TRUE, _T_FALSE, _T_I8, _T_I16, _T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 1, 2, 3, 4, 5, 6, 8, 9, 12
_CTYPES = {"i8": _T_I8, "i16": _T_I16, "i32": _T_I32, "i64": _T_I64, "bin": _T_BINARY, "struct": _T_STRUCT, "list": _T_LIST}


def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int) -> int:
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def _struct(out: bytearray, fields: list) -> None:
    """A Thrift struct in the compact protocol: `fields` is a list of (field id, kind, value) in
    ascending id order, kind one of i8, i16, i32, i64, bool, bin, struct (a field list), list (element
    kind, items)."""
    last = 0
    for fid, kind, value in fields:
        ctype = (_T_TRUE if value else _T_FALSE) if kind == "bool" else _CTYPES[kind]
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ctype)
        else:
            out.append(ctype)
            _varint(out, _zigzag(fid))
        last = fid
        if kind != "bool":
            _value(out, kind, value)
    out.append(0)  # stop


def _value(out: bytearray, kind: str, value) -> None:
    if kind == "i8":
        out.append(value & 0xFF)
    elif kind in ("i16", "i32", "i64"):
        _varint(out, _zigzag(value))
    elif kind == "bin":
        _varint(out, len(value))
        out += value
    elif kind == "struct":
        _struct(out, value)
    else:  # list
        ekind, items = value
        etype = _CTYPES[ekind]
        if len(items) < 15:
            out.append((len(items) << 4) | etype)
        else:
            out.append(0xF0 | etype)
            _varint(out, len(items))
        for item in items:
            _value(out, ekind, item)


def _logical(t: pa.DataType):
    """(physical type, byte width of a value (0: bits), numpy dtype the values are written as,
    converted type or None, logical type field list or None); None when this writer leaves the
    type to pyarrow. As pyarrow writes them: plain INT32 / INT64 without annotations, INT_8 and
    INT_16 with both, timestamps with time zone also with the legacy TIMESTAMP_MICROS."""
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        bits = t.bit_width
        return _INT32, 4, np.int32, _INT_8 if bits == 8 else _INT_16, \
            [(10, "struct", [(1, "i8", bits), (2, "bool", True)])]  # the INTEGER union member
    if pa.types.is_int32(t):
        return _INT32, 4, np.int32, None, None
    if pa.types.is_int64(t):
        return _INT64, 8, np.int64, None, None
    if pa.types.is_float32(t):
        return _FLOAT, 4, np.float32, None, None
    if pa.types.is_float64(t):
        return _DOUBLE, 8, np.float64, None, None
    if pa.types.is_boolean(t):
        return _BOOLEAN, 0, np.bool_, None, None
    if pa.types.is_date32(t):
        return _INT32, 4, np.int32, _DATE, [(6, "struct", [])]
    if pa.types.is_timestamp(t) and t.unit == "us":
        utc = t.tz is not None
        return _INT64, 8, np.int64, _TIMESTAMP_MICROS if utc else None, \
            [(8, "struct", [(1, "bool", utc), (2, "struct", [(2, "struct", [])])])]  # MICROS
    return None


def supported(schema: pa.Schema) -> bool:
    return all(_logical(f.type) is not None for f in schema)


def _bits(arr: pa.Array, buffer: int) -> memoryview | bytes:
    """A bitmap of `arr` (buffer 0: validity, 1: boolean values) starting at the array's first
    row, as Parquet's bit-packed runs hold bits: least significant bit first."""
    n = len(arr)
    buf = arr.buffers()[buffer]
    if arr.offset % 8 == 0 and buf is not None:
        start = arr.offset // 8
        return memoryview(buf)[start:start + (n + 7) // 8]
    flags = np.asarray(arr.is_valid()) if buffer == 0 else arr.to_numpy(zero_copy_only=False)
    return np.packbits(flags, bitorder="little").tobytes()


def _fixed(arr: pa.Array, dtype) -> np.ndarray:
    """The values of a fixed-width array without NULLs, as `dtype` (the physical type's)."""
    own = np.dtype(f"i{arr.type.bit_width // 8}") if not pa.types.is_floating(arr.type) else np.dtype(dtype)
    values = np.frombuffer(arr.buffers()[1], own, count=len(arr), offset=arr.offset * own.itemsize)
    return values if own == np.dtype(dtype) else values.astype(dtype)


def _run_header(groups: int) -> bytes:
    """A bit-packed run of `groups` groups of eight values (RLE / bit-packing hybrid)."""
    out = bytearray()
    _varint(out, (groups << 1) | 1)
    return bytes(out)


def _dictionary(values: np.ndarray):
    """For integer values without NULLs spanning fewer than 256: (dictionary values, bit width,
    index bytes after the width byte); else None. One value: width 0 (one RLE run, no index
    bytes); two: width 1; more: width 8 (an index a byte)."""
    n = len(values)
    if n < 2 or values.dtype.kind not in "iu":
        return None
    lo, hi = values.min(), values.max()
    if int(hi) - int(lo) >= 256:
        return None
    if lo == hi:
        run = bytearray()
        _varint(run, n << 1)  # an RLE run of n zeros, its value in zero bytes
        return np.array([lo], values.dtype), 0, bytes(run)
    high = values == hi
    if int(np.count_nonzero(high)) + int(np.count_nonzero(values == lo)) == n:
        return np.array([lo, hi], values.dtype), 1, \
            _run_header((n + 7) // 8) + np.packbits(high, bitorder="little").tobytes()
    groups = (n + 7) // 8
    index = np.zeros(groups * 8, np.uint8)
    index[:n] = values - lo
    return np.arange(lo, hi + 1, dtype=values.dtype), 8, _run_header(groups) + index.tobytes()


def _statistics(values: np.ndarray, nulls: int) -> list:
    """Min and max of the non-NULL values (PLAIN bytes of the physical type; in the old and the
    new fields, as parquet-cpp writes them for a signed order) and the NULL count."""
    if not len(values):
        return [(3, "i64", nulls)]
    low, high = values.min().tobytes(), values.max().tobytes()
    return [(1, "bin", high), (2, "bin", low), (3, "i64", nulls), (5, "bin", high), (6, "bin", low)]


def _page_header(kind: int, size: int, count: int, encoding: int) -> bytes:
    out = bytearray()
    if kind == _DICTIONARY_PAGE:
        sub = (7, "struct", [(1, "i32", count), (2, "i32", encoding)])
    else:
        sub = (5, "struct", [(1, "i32", count), (2, "i32", encoding), (3, "i32", _RLE), (4, "i32", _RLE)])
    _struct(out, [(1, "i32", kind), (2, "i32", size), (3, "i32", size), sub])
    return bytes(out)


def write(table: pa.Table, path: str, stats=()) -> bool:
    """Write `table` to `path` (one row group, one page per column; statistics for the columns
    named in `stats`), or return False, writing nothing, when a column's type is not handled."""
    chunks = encode(table, stats)
    if chunks is None:
        return False
    with open(path, "wb") as f:
        f.writelines(chunks)
    return True


def encode(table: pa.Table, stats=()) -> list | None:
    """`table` as a Parquet file's bytes, in pieces (see write), or None when a column's type is
    not handled."""
    if table.num_rows == 0 or not supported(table.schema):
        return None
    n = table.num_rows
    chunks: list = [b"PAR1"]
    offset = 4
    schema_elems = [[(4, "bin", b"schema"), (5, "i32", table.num_columns)]]
    columns, orders = [], []
    for field, col in zip(table.schema, table.columns):
        physical, width, dtype, converted, logical = _logical(field.type)
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        nulls = arr.null_count
        optional = nulls > 0 or field.nullable
        elem = [(1, "i32", physical), (3, "i32", _OPTIONAL if optional else _REQUIRED), (4, "bin", field.name.encode())]
        if converted is not None:
            elem.append((6, "i32", converted))
        if logical is not None:
            elem.append((10, "struct", logical))
        schema_elems.append(elem)
        body: list = []
        if optional:  # definition levels, bit width 1: the validity bitmap as one bit-packed run
            if nulls:
                levels = _run_header((n + 7) // 8) + bytes(_bits(arr, 0))
            else:
                levels = bytearray()
                _varint(levels, n << 1)  # one RLE run of n ones
                levels = bytes(levels) + b"\x01"
            body += [len(levels).to_bytes(4, "little"), levels]
            values = arr.drop_null() if nulls else arr
        else:
            values = arr
        dict_page = None
        if width == 0:
            body.append(_bits(values, 1))
            encoding = _PLAIN
        else:
            plain = _fixed(values, dtype)
            coded = _dictionary(plain) if physical in (_INT32, _INT64) and not nulls else None
            if coded is not None:
                entries, bit_width, index = coded
                dict_page = memoryview(np.ascontiguousarray(entries)).cast("B")
                body += [bytes([bit_width]), index]
                encoding = _RLE_DICTIONARY
            else:
                body.append(memoryview(plain).cast("B"))
                encoding = _PLAIN
        start = offset
        dict_offset = None
        if dict_page is not None:
            header = _page_header(_DICTIONARY_PAGE, dict_page.nbytes, len(dict_page) // np.dtype(dtype).itemsize, _PLAIN)
            chunks += [header, dict_page]
            dict_offset = offset
            offset += len(header) + dict_page.nbytes
        size = sum(len(b) if isinstance(b, bytes) else b.nbytes for b in body)
        header = _page_header(_DATA_PAGE, size, n, encoding)
        data_offset = offset
        chunks.append(header)
        chunks += body
        offset += len(header) + size
        total = offset - start
        encodings = [_PLAIN, _RLE] + ([_RLE_DICTIONARY] if dict_page is not None else [])
        meta = [(1, "i32", physical), (2, "list", ("i32", encodings)), (3, "list", ("bin", [field.name.encode()])),
                (4, "i32", 0), (5, "i64", n), (6, "i64", total), (7, "i64", total), (9, "i64", data_offset)]
        if dict_offset is not None:
            meta.append((11, "i64", dict_offset))
        if field.name in stats and physical != _BOOLEAN and physical not in (_FLOAT, _DOUBLE):
            meta.append((12, "struct", _statistics(plain, nulls)))
        columns.append([(2, "i64", 0), (3, "struct", meta)])
        orders.append([(1, "struct", [])])  # TYPE_ORDER
    body_bytes = offset - 4
    row_group = [(1, "list", ("struct", columns)), (2, "i64", body_bytes), (3, "i64", n), (5, "i64", 4),
                 (6, "i64", body_bytes), (7, "i16", 0)]
    footer = bytearray()
    schema_meta = base64.b64encode(_schema_bytes(table.schema))
    _struct(footer, [(1, "i32", 2), (2, "list", ("struct", schema_elems)), (3, "i64", n),
                     (4, "list", ("struct", [row_group])),
                     (5, "list", ("struct", [[(1, "bin", b"ARROW:schema"), (2, "bin", schema_meta)]])),
                     (6, "bin", CREATED_BY.encode()), (7, "list", ("struct", orders))])
    chunks += [bytes(footer), len(footer).to_bytes(4, "little"), b"PAR1"]
    return chunks


_schemas: dict[pa.Schema, bytes] = {}


def _schema_bytes(schema: pa.Schema) -> bytes:
    """The schema as an Arrow IPC message (what pyarrow stores as `ARROW:schema`), remembered."""
    got = _schemas.get(schema)
    if got is None:
        if len(_schemas) > 256:
            _schemas.clear()
        got = _schemas[schema] = schema.serialize().to_pybytes()
    return got
