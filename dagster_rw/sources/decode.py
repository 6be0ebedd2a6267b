"""Vectorized decoding of record values (JSON objects or CSV lines) into a source's typed columns.

The whole batch is parsed at once by pyarrow (JSON with a "wire" schema that pyarrow can read
directly, CSV as text), then cast to the declared types: by Arrow's kernels where every value has
a form they read exactly as DuckDB does (timestamps, dates and integers written plainly), else by
DuckDB in one query that also flags values of the wrong type. Only when the batch parse itself fails are records parsed one by one,
and only to learn which of them are malformed; every bad record is reported with its cause, none
is dropped silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from .. import types as sqltypes
from ..engine.duck import DuckEngine, quote
from ..storage.catalog import Column

ENCODINGS = ("json", "csv")
_JSON_BLOCK = 8 << 20  # bytes of JSON text per block of pyarrow's reader (one thread each)
FILE_ENCODINGS = ("json", "csv", "parquet")
# declared type -> the Arrow type pyarrow's JSON reader produces for it; the rest is read as text
_JSON_WIRE = {
    "smallint": pa.int64(), "integer": pa.int64(), "bigint": pa.int64(),
    "real": pa.float64(), "double precision": pa.float64(), "boolean": pa.bool_(), "varchar": pa.string(),
}


@dataclass
class Decoded:
    """Rows of the good records (declared columns), their positions in the input, and the bad ones."""

    rows: pa.Table
    good: list[int] | np.ndarray  # decode_array: a numpy array
    errors: list[tuple[int, str]] = field(default_factory=list)  # (position in the input, cause)


def json_wire_type(type_name: str) -> pa.DataType:
    if type_name.startswith("numeric"):
        return pa.float64()
    return _JSON_WIRE.get(type_name, pa.string())


def check_supported(columns: list[Column], encode: str) -> str | None:
    """The first column whose type the encoding cannot carry, as a message; None when all can."""
    for c in columns:
        if c.type in ("interval", "time") and encode == "json":
            return f"column {c.name!r} of type {c.type} in ENCODE JSON"
    return None


class RecordDecoder:
    """Decodes lists of raw record values for one set of declared columns and one encoding.

    `read`: the names of the columns to decode (None: all). The others are not parsed at all
    (JSON fields skipped, CSV fields not converted), so neither are their values checked; the
    decoded rows hold only the columns read, in declared order (at least one, so that records
    are counted)."""

    def __init__(self, columns: list[Column], encode: str, delimiter: str = ",", engine: DuckEngine | None = None,
                 read: set[str] | None = None):
        self.fields = [c.name for c in columns]  # every field of a record (a CSV line's, in order)
        if read is not None:
            chosen = [c for c in columns if c.name in read]
            columns = chosen or columns[:1]
        self.columns = columns
        self.encode = encode
        self.delimiter = delimiter
        self.engine = engine or DuckEngine(threads=1)
        if encode == "json":
            self.wire = pa.schema([pa.field(c.name, json_wire_type(c.type)) for c in columns])
        else:
            self.wire = pa.schema([pa.field(c.name, pa.string()) for c in columns])
        self.target = pa.schema([pa.field(c.name, sqltypes.arrow_type(c.type)) for c in columns])

    # -- parsing -------------------------------------------------------------------------------
    def _parse(self, values: list[bytes]) -> pa.Table:
        if self.encode == "json":
            joined = b"\n".join(values)
            if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
                # a newline is whitespace between JSON tokens (never inside a string), so it can go
                joined = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
            return self._parse_block(joined)
        return self._parse_block(b"\n".join(values) + b"\n")

    def _parse_block(self, joined: bytes | pa.Buffer) -> pa.Table:
        """Records one per line, parsed in one go."""
        if self.encode == "json":
            if not isinstance(joined, pa.Buffer):  # decode_array's text has none (see there)
                joined = _without_null_documents(joined)
            opts = pajson.ParseOptions(explicit_schema=self.wire, unexpected_field_behavior="ignore")
            # blocks of a few MB are parsed by several threads at once; a record longer than a
            # block fails the batch, and is then parsed alone (see _bisect) in a block of its size
            read = pajson.ReadOptions(block_size=max(1 << 20, min(len(joined) + 1, _JSON_BLOCK)))
            return pajson.read_json(_reader(joined), read_options=read, parse_options=opts)
        return pacsv.read_csv(
            _reader(joined),
            read_options=pacsv.ReadOptions(column_names=self.fields,
                                           block_size=max(1 << 20, min(len(joined) + 1, 64 << 20))),
            parse_options=pacsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=self.wire, include_columns=[c.name for c in self.columns],
                                                 strings_can_be_null=False,
                                                 quoted_strings_can_be_null=False))

    def _parse_one(self, value: bytes) -> str | None:
        """Why one record cannot be parsed, or None when it can."""
        if not value.strip():
            return "empty record"
        try:
            t = self._parse([value])
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            return str(e).splitlines()[0]
        if t.num_rows != 1:
            return f"the record holds {t.num_rows} rows, not one"
        return None

    def _bisect(self, values, idx: list[int]):
        """Parse the records at `idx` as one batch; if that fails, each half, and so on down to the
        single bad records: a few bad records among many cost a few extra passes, not one parse per
        record. Returns the parsed (positions, table) chunks in order, and (position, cause) of the bad."""
        try:
            table = self._parse(values if len(idx) == len(values) else [values[i] for i in idx])
            if table.num_rows == len(idx):
                return [(idx, table)], []
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        if len(idx) == 1:
            return [], [(idx[0], self._parse_one(values[idx[0]]) or "the record could not be read")]
        mid = len(idx) // 2
        left, lbad = self._bisect(values, idx[:mid])
        right, rbad = self._bisect(values, idx[mid:])
        return left + right, lbad + rbad

    def decode(self, values: list[bytes | None]) -> Decoded:
        errors: list[tuple[int, str]] = []
        if _all_present(values):
            idx = list(range(len(values)))  # no null, empty or blank record: nothing to set aside
        else:
            idx = []
            for i, v in enumerate(values):
                if v is None:
                    errors.append((i, "null record value"))
                elif not v.strip():
                    errors.append((i, "empty record"))
                else:
                    idx.append(i)
        wire = None
        if idx:
            parsed, bad = self._bisect(values, idx)
            errors.extend(bad)
            idx = parsed[0][0] if len(parsed) == 1 else [i for chunk, _ in parsed for i in chunk]
            wire = pa.concat_tables([t for _, t in parsed]) if parsed else None
        if wire is None or wire.num_rows == 0:
            errors.sort()
            return Decoded(self.target.empty_table(), [], errors)
        rows, bad = self._cast(wire)
        if bad:
            bad_set = {pos for pos, _ in bad}
            errors.extend((idx[pos], cause) for pos, cause in bad)
            keep = [pos for pos in range(len(idx)) if pos not in bad_set]
            rows = rows.take(pa.array(keep, pa.int64()))
            idx = [idx[pos] for pos in keep]
        errors.sort()
        return Decoded(rows, idx, errors)

    def decode_array(self, values: pa.Array | pa.ChunkedArray) -> Decoded:
        """As decode, for values in one Arrow binary array (nulls where a value is null), with no
        Python object per record: the null, empty and blank values are found by Arrow's kernels,
        the others joined into one text by Arrow and parsed in one go; only a batch that does not
        parse whole is cut in halves (as in decode). `good` is a numpy array of positions."""
        values = _one_array(values)
        n = len(values)
        errors: list[tuple[int, str]] = []
        text = pa.large_string() if pa.types.is_large_binary(values.type) else pa.string()
        absent = pc.fill_null(pc.or_(pc.equal(pc.binary_length(values), 0), pc.ascii_is_space(values.view(text))),
                              True)  # null, empty or blank
        if n and pc.any(absent).as_py():
            off = absent.to_numpy(zero_copy_only=False)
            null = values.is_null().to_numpy(zero_copy_only=False)
            errors = [(i, "null record value" if null[i] else "empty record") for i in np.flatnonzero(off).tolist()]
            idx = np.flatnonzero(~off)
            values = values.filter(pc.invert(absent))
        else:
            idx = np.arange(n, dtype=np.int64)
        if self.encode == "json" and len(values) and pc.any(pc.match_substring(values.view(text), "null")).as_py():
            null_document = pc.equal(pc.ascii_trim_whitespace(values.view(text)), "null")
            if pc.any(null_document).as_py():  # see _without_null_documents
                values = pc.if_else(null_document, pa.scalar(b"{}", values.type), values)
        wire = None
        if len(idx):
            parsed, bad = self._bisect_array(values, 0, len(idx))
            errors.extend((int(idx[i]), cause) for i, cause in bad)
            if parsed:
                wire = pa.concat_tables([t for _, _, t in parsed]) if len(parsed) > 1 else parsed[0][2]
                if len(parsed) > 1 or parsed[0][1] - parsed[0][0] != len(idx):
                    idx = idx[np.concatenate([np.arange(lo, hi) for lo, hi, _ in parsed])]
        if wire is None or wire.num_rows == 0:
            errors.sort()
            return Decoded(self.target.empty_table(), np.zeros(0, np.int64), errors)
        rows, bad = self._cast(wire)
        if bad:
            keep = np.ones(len(idx), bool)
            keep[[pos for pos, _ in bad]] = False
            errors.extend((int(idx[pos]), cause) for pos, cause in bad)
            rows = rows.filter(pa.array(keep))
            idx = idx[keep]
        errors.sort()
        return Decoded(rows, idx, errors)

    def _bisect_array(self, values: pa.Array, lo: int, hi: int):
        """_bisect over the values lo..hi of an Arrow array (no null, empty or blank one among
        them): the parsed (lo, hi, table) chunks in order, and (position, cause) of the bad."""
        try:
            table = self._parse_block(self._joined(values.slice(lo, hi - lo)))
            if table.num_rows == hi - lo:
                return [(lo, hi, table)], []
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        if hi - lo == 1:
            return [], [(lo, self._parse_one(values[lo].as_py()) or "the record could not be read")]
        mid = lo + (hi - lo) // 2
        left, lbad = self._bisect_array(values, lo, mid)
        right, rbad = self._bisect_array(values, mid, hi)
        return left + right, lbad + rbad

    def _joined(self, values: pa.Array) -> pa.Buffer:
        """The values one per line (each followed by a newline), joined by Arrow; for JSON, a
        newline or carriage return inside a value is made a space first (as in _parse)."""
        joined = _lines(values)
        if self.encode == "json":
            u = np.frombuffer(joined, np.uint8)
            if np.count_nonzero(u == 10) != len(values) or (u == 13).any():
                values = pc.replace_substring(pc.replace_substring(values, b"\n", b" "), b"\r", b" ")
                joined = _lines(values)
        return joined

    # -- typing --------------------------------------------------------------------------------
    def _cast(self, wire: pa.Table) -> tuple[pa.Table, list[tuple[int, str]]]:
        """The declared types, and (row, cause) for every value that does not fit its column.
        Columns whose values Arrow's kernels cast exactly as DuckDB would are cast there; only
        the others (and any column holding a value Arrow refuses) go through DuckDB's pass."""
        done: dict[str, pa.ChunkedArray] = {}
        rest = []
        for c, w in zip(self.columns, wire.schema):
            target = self.target.field(c.name).type
            col = wire.column(c.name)
            cast = col if w.type == target else _arrow_cast(col, c.type, target)
            if cast is None:
                rest.append((c, w))
            else:
                done[c.name] = cast
        if not rest:
            return pa.table([done[c.name] for c in self.columns], schema=self.target), []
        select, checks = [], []
        for c, w in rest:
            src = f"w.{quote(c.name)}"
            if pa.types.is_string(w.type) and c.type != "varchar":
                src = f"NULLIF({src}, '')"  # an empty CSV field is NULL, not a bad value
            cast = f"TRY_CAST({src} AS {sqltypes.duckdb_type(c.type)})"
            select.append(f"{cast} AS {quote(c.name)}")
            name = c.name.replace("'", "''")
            checks.append(f"WHEN {src} IS NOT NULL AND {cast} IS NULL THEN "
                          f"'column \"{name}\": cannot read ' || CAST({src} AS VARCHAR) || ' as {c.type}'")
        problem = f"CASE {' '.join(checks)} END"
        narrow = wire.select([c.name for c, _ in rest]).append_column("rw_pos", pa.array(np.arange(wire.num_rows,
                                                                                                  dtype=np.int64)))
        out = self.engine.sql(f"SELECT {', '.join(select)}, {problem} AS rw_problem, rw_pos FROM w "
                              "ORDER BY rw_pos", w=narrow)
        problems = out.column("rw_problem")
        bad = []
        if problems.null_count != out.num_rows:
            flagged = out.filter(pc.is_valid(problems))
            bad = list(zip(flagged.column("rw_pos").to_pylist(), flagged.column("rw_problem").to_pylist()))
        cols = [done[c.name] if c.name in done else out.column(c.name) for c in self.columns]
        return pa.table(cols, names=[c.name for c in self.columns]).cast(self.target), bad

    # -- whole files ---------------------------------------------------------------------------
    def decode_lines(self, data: bytes) -> tuple[Decoded, np.ndarray]:
        """Records one per line of a file's text (empty lines are no records): the decoded ones,
        with `good` and error positions indexing the returned byte offsets of the records in `data`.
        A block that parses whole is parsed in one go; only otherwise is it cut into records."""
        buf = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(buf == 10)
        starts = np.concatenate(([0], nl + 1)).astype(np.int64)
        ends = np.concatenate((nl, [len(data)])).astype(np.int64)
        lengths = ends - starts
        cr = np.zeros(len(starts), bool)
        one = np.flatnonzero(lengths == 1)
        cr[one] = buf[starts[one]] == 13
        keep = (lengths > 0) & ~cr
        starts, ends = starts[keep], ends[keep]
        if not len(starts):
            return Decoded(self.target.empty_table(), []), starts
        try:
            wire = self._parse_block(data if data.endswith(b"\n") else data + b"\n")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            wire = None
        if wire is not None and wire.num_rows == len(starts):
            rows, bad = self._cast(wire)
            errors = sorted(bad)
            if not errors:
                return Decoded(rows, list(range(len(starts)))), starts
            bad_set = {pos for pos, _ in errors}
            keep_rows = [pos for pos in range(len(starts)) if pos not in bad_set]
            return Decoded(rows.take(pa.array(keep_rows, pa.int64())), keep_rows, errors), starts
        return self.decode([data[s:e] for s, e in zip(starts.tolist(), ends.tolist())]), starts

    def decode_table(self, table: pa.Table) -> Decoded:
        """Rows already typed (a Parquet file's): the declared columns it has (the others NULL),
        cast to the declared types; a value that does not fit its column makes its row bad."""
        cols = []
        for c, target in zip(self.columns, self.target):
            if c.name in table.column_names:
                col = table.column(c.name)
                if pa.types.is_dictionary(col.type):
                    col = col.cast(col.type.value_type)
                cols.append(col)
            else:
                cols.append(pa.nulls(table.num_rows, target.type))
        wire = pa.table(cols, names=[c.name for c in self.columns])
        if wire.num_rows == 0:
            return Decoded(self.target.empty_table(), [])
        rows, bad = self._cast(wire)
        if not bad:
            return Decoded(rows, list(range(wire.num_rows)))
        bad_set = {pos for pos, _ in bad}
        keep = [pos for pos in range(wire.num_rows) if pos not in bad_set]
        return Decoded(rows.take(pa.array(keep, pa.int64())), keep, sorted(bad))


_NULL_DOCUMENT = re.compile(rb"(?:^|\n)[ \t\r\x0b\x0c]*null[ \t\r\x0b\x0c]*(?=\n|$)")


def _without_null_documents(text: bytes) -> bytes:
    """JSON text, one record per line, with each record that is only `null` made `{}`: pyarrow's
    reader crashes on a block of the text that starts with a null document, and reads one elsewhere
    as a row of NULLs, which `{}` is too."""
    if b"null" not in text:
        return text
    return _NULL_DOCUMENT.sub(lambda m: b"\n{}" if m.group().startswith(b"\n") else b"{}", text)


def _reader(joined: bytes | pa.Buffer) -> pa.BufferReader:
    return pa.BufferReader(joined if isinstance(joined, pa.Buffer) else pa.py_buffer(joined))


def _one_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Binary values as one array (large_binary when they hold 2 GB or more)."""
    if isinstance(values, pa.ChunkedArray):
        chunks = values.chunks
        if not chunks:
            return pa.array([], pa.binary())
        if len(chunks) == 1:
            values = chunks[0]
        elif sum(c.nbytes for c in chunks) >= (1 << 31) - 1:
            values = pa.concat_arrays([c.cast(pa.large_binary()) for c in chunks])
        else:
            values = pa.concat_arrays([c.cast(pa.binary()) for c in chunks])
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type) or pa.types.is_binary_view(values.type):
        values = values.cast(pa.large_binary() if pa.types.is_large_string(values.type) else pa.binary())
    return values


def _lines(values: pa.Array) -> pa.Buffer:
    """The values each followed by a newline, as one buffer (Arrow joins them)."""
    newline = pa.scalar(b"\n", values.type)
    joined = pc.binary_join_element_wise(values, pa.scalar(b"", values.type), newline)
    width = np.int64 if pa.types.is_large_binary(joined.type) else np.int32
    offsets = np.frombuffer(joined.buffers()[1], width)
    first, last = int(offsets[joined.offset]), int(offsets[joined.offset + len(joined)])
    return joined.buffers()[2].slice(first, last - first) if last > first else pa.py_buffer(b"")


def _all_present(values) -> bool:
    """Whether no value is null, empty or blank (checked without a Python loop per value)."""
    try:
        return None not in values and all(values) and not any(map(bytes.isspace, values))
    except TypeError:  # a value that is not bytes: the loop per value decides
        return False


# Text Arrow's kernels read exactly as DuckDB's casts do (where both read it at all): a date with an
# optional time (seconds, at most six decimals), a plain integer.
_TIMESTAMP_TEXT = r"^\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d:\d\d(?:\.\d{1,6})?)?$"
_DATE_TEXT = r"^\d{4}-\d\d-\d\d$"
_INTEGER_TEXT = r"^-?\d+$"


def _arrow_cast(col: pa.ChunkedArray, type_name: str, target: pa.DataType) -> pa.ChunkedArray | None:
    """`col` cast to `target` by Arrow, when every value is of a form Arrow reads as DuckDB's
    TRY_CAST does and none fails; None otherwise (DuckDB's pass then decides, value by value)."""
    source = col.type
    try:
        if pa.types.is_integer(source) and pa.types.is_integer(target):
            return col.cast(target)  # a safe cast: a value out of range raises
        if not pa.types.is_string(source):
            return None
        if pa.types.is_timestamp(target) and target.tz is None:
            form = _TIMESTAMP_TEXT
        elif pa.types.is_date32(target):
            form = _DATE_TEXT
        elif pa.types.is_integer(target):
            form = _INTEGER_TEXT
        else:
            return None
        if type_name != "varchar" and pc.any(pc.equal(col, "")).as_py():
            col = pc.if_else(pc.equal(col, ""), pa.scalar(None, source), col)  # an empty CSV field is NULL
        valid = pc.match_substring_regex(col, form)
        if (pc.sum(valid).as_py() or 0) != col.length() - col.null_count:
            return None
        return col.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
