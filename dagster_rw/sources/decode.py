"""Vectorized decoding of record values (JSON objects or CSV lines) into a source's typed columns.

The whole batch is parsed at once by pyarrow (JSON with a "wire" schema that pyarrow can read
directly, CSV as text), then cast to the declared types: by Arrow's kernels where every value has
a form they read exactly as DuckDB does (timestamps, dates and integers written plainly), else by
DuckDB in one query that also flags values of the wrong type. Only when the batch parse itself fails are records parsed one by one,
and only to learn which of them are malformed.

As in RisingWave, a record that is not a document (malformed JSON, a CSV line of the wrong shape,
an empty value) is rejected whole, while a value that does not fit its column (a JSON value of
the wrong type, text that does not read as the column's type) is NULL in a row that is kept. Every
rejected record and every bad value is reported with its cause (the column and the value, for a
bad value); nothing is dropped silently. A connector object has no key column of its own (its rows
are keyed by their position in the input), so no bad value can reject a row.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from .. import jsonb
from .. import types as sqltypes
from ..engine.duck import DuckEngine, quote
from ..errors import DataError
from ..storage.catalog import Column

ENCODINGS = ("json", "csv")
_PARSE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)
_JSON_BLOCK = 8 << 20  # bytes of JSON text per block of pyarrow's reader (one thread each)
FILE_ENCODINGS = ("json", "csv", "parquet")
# declared type -> the Arrow type pyarrow's JSON reader produces for it; the rest is read as text
_JSON_WIRE = {
    "smallint": pa.int64(), "integer": pa.int64(), "bigint": pa.int64(),
    "real": pa.float64(), "double precision": pa.float64(), "boolean": pa.bool_(), "varchar": pa.string(),
}


@dataclass
class Decoded:
    """Rows of the records kept (declared columns), their positions in the input, and the errors:
    (position, cause) of each rejected record and of each bad value (NULL in its kept row), sorted."""

    rows: pa.Table
    good: list[int] | np.ndarray  # decode_array: a numpy array
    errors: list[tuple[int, str]] = field(default_factory=list)  # (position in the input, cause)


def json_wire_type(type_name: str) -> pa.DataType:
    """The Arrow type pyarrow's JSON reader reads a field of the declared type as: a JSON array
    for an array, a JSON object for a struct (its fields by name, the others ignored)."""
    if type_name.endswith("[]"):
        return pa.list_(json_wire_type(type_name[:-2]))
    if sqltypes.is_struct(type_name):
        return pa.struct([pa.field(n, json_wire_type(t)) for n, t in sqltypes.struct_fields(type_name)])
    if type_name.startswith("numeric"):
        return pa.float64()
    return _JSON_WIRE.get(type_name, pa.string())


def _parts(type_name: str):
    """The type and every type nested in it (array elements, struct fields), outermost first."""
    yield type_name
    if type_name.endswith("[]"):
        yield from _parts(type_name[:-2])
    elif sqltypes.is_struct(type_name):
        for _, t in sqltypes.struct_fields(type_name):
            yield from _parts(t)


def check_supported(columns: list[Column], encode: str) -> str | None:
    """The first column whose type the encoding cannot carry, as a message; None when all can."""
    for c in columns:
        parts = list(_parts(c.type))
        for t in parts:
            if t in ("interval", "time") and encode == "json":
                return f"column {c.name!r} of type {c.type} in ENCODE JSON"
        if "jsonb" in parts[1:]:
            return f"column {c.name!r} of type {c.type} (a source's jsonb values are whole fields, not array elements or struct fields)"
        if encode == "csv" and sqltypes.is_struct(c.type):
            return f"column {c.name!r} of type {c.type} in ENCODE CSV (structs are read from JSON objects or Parquet)"
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
        # a jsonb field of a JSON record is any JSON value: it is taken from the record's text by
        # Python's parser (see _jsonb_members), not by pyarrow's, which reads values of one shape
        self.jsonb = [c.name for c in columns if c.type == "jsonb"] if encode == "json" else []
        read_by_arrow = [c for c in columns if c.name not in self.jsonb]
        if encode == "json":
            self.wire = pa.schema([pa.field(c.name, json_wire_type(c.type)) for c in read_by_arrow] or _NO_FIELDS)
        else:
            self.wire = pa.schema([pa.field(c.name, pa.string()) for c in columns])
        self.wire_columns = read_by_arrow
        self.target = pa.schema([pa.field(c.name, sqltypes.arrow_type(c.type)) for c in columns])

    # -- parsing -------------------------------------------------------------------------------
    def _parse(self, values: list[bytes], wire: pa.Schema | None = None) -> pa.Table:
        if self.encode == "json":
            joined = b"\n".join(values)
            if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
                # a newline is whitespace between JSON tokens (never inside a string), so it can go
                joined = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
            return self._parse_block(joined, wire)
        return self._parse_block(b"\n".join(values) + b"\n")

    def _parse_block(self, joined: bytes | pa.Buffer, wire: pa.Schema | None = None) -> pa.Table:
        """Records one per line, parsed in one go (JSON: into the fields of `wire`, None: all read)."""
        if self.encode == "json":
            if not isinstance(joined, pa.Buffer):  # decode_array's text has none (see there)
                joined = _without_null_documents(joined)
            opts = pajson.ParseOptions(explicit_schema=self.wire if wire is None else wire,
                                       unexpected_field_behavior="ignore")
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
        except _PARSE_ERRORS as e:
            return str(e).splitlines()[0]
        if t.num_rows != 1:
            return f"the record holds {t.num_rows} rows, not one"
        return None

    def _parse_fields(self, value: bytes) -> tuple[pa.Table, list[str]] | None:
        """A JSON document the batch parse refused because of its values (a field of the wrong
        JSON type, an integer out of range): its row with NULL in each field that does not read,
        and a cause per such field; None when the record is not a JSON document (or is CSV, whose
        fields are all read as text, so that only a line of the wrong shape fails to parse)."""
        if self.encode != "json":
            return None
        try:  # the document alone, none of its fields read: a syntax error, or not an object
            if self._parse([value], _NO_FIELDS).num_rows != 1:
                return None
        except _PARSE_ERRORS:
            return None
        columns, causes = [], []
        for c, w in zip(self.wire_columns, self.wire):
            try:
                columns.append(self._parse([value], pa.schema([w])).column(0))
            except _PARSE_ERRORS:
                columns.append(pa.chunked_array([pa.nulls(1, w.type)]))
                causes.append(f'column "{c.name}": cannot read {_json_field(value, c.name)} as {c.type}')
        return pa.table(columns, schema=self.wire), causes

    def _bisect(self, values, idx: list[int]):
        """Parse the records at `idx` as one batch; if that fails, each half, and so on down to the
        single bad records: a few bad records among many cost a few extra passes, not one parse per
        record. Returns the parsed (positions, table) chunks in order, (position, cause) of the
        records rejected, and (position, cause) of the values read as NULL (see _parse_fields)."""
        try:
            table = self._parse(values if len(idx) == len(values) else [values[i] for i in idx])
            if table.num_rows == len(idx):
                return [(idx, table)], [], []
        except _PARSE_ERRORS:
            pass
        if len(idx) == 1:
            fields = self._parse_fields(values[idx[0]])
            if fields is not None:
                return [(idx, fields[0])], [], [(idx[0], cause) for cause in fields[1]]
            return [], [(idx[0], self._parse_one(values[idx[0]]) or "the record could not be read")], []
        mid = len(idx) // 2
        left, lbad, lnull = self._bisect(values, idx[:mid])
        right, rbad, rnull = self._bisect(values, idx[mid:])
        return left + right, lbad + rbad, lnull + rnull

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
            parsed, bad, nulled = self._bisect(values, idx)
            errors.extend(bad)
            errors.extend(nulled)
            idx = parsed[0][0] if len(parsed) == 1 else [i for chunk, _ in parsed for i in chunk]
            wire = pa.concat_tables([t for _, t in parsed]) if parsed else None
        if wire is None or wire.num_rows == 0:
            errors.sort()
            return Decoded(self.target.empty_table(), [], errors)
        rows, bad = self._cast(wire, lambda: [values[i] for i in idx])
        errors.extend((idx[pos], cause) for pos, cause in bad)
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
        kept = None  # positions in `values` of the records parsed (None: all)
        if len(idx):
            parsed, bad, nulled = self._bisect_array(values, 0, len(idx))
            errors.extend((int(idx[i]), cause) for i, cause in bad + nulled)
            if parsed:
                wire = pa.concat_tables([t for _, _, t in parsed]) if len(parsed) > 1 else parsed[0][2]
                if len(parsed) > 1 or parsed[0][1] - parsed[0][0] != len(idx):
                    kept = np.concatenate([np.arange(lo, hi) for lo, hi, _ in parsed])
                    idx = idx[kept]
        if wire is None or wire.num_rows == 0:
            errors.sort()
            return Decoded(self.target.empty_table(), np.zeros(0, np.int64), errors)
        rows, bad = self._cast(wire, lambda: (values if kept is None else values.take(kept)).to_pylist())
        errors.extend((int(idx[pos]), cause) for pos, cause in bad)
        errors.sort()
        return Decoded(rows, idx, errors)

    def _bisect_array(self, values: pa.Array, lo: int, hi: int):
        """_bisect over the values lo..hi of an Arrow array (no null, empty or blank one among
        them): the parsed (lo, hi, table) chunks in order, (position, cause) of the records
        rejected and of the values read as NULL."""
        try:
            table = self._parse_block(self._joined(values.slice(lo, hi - lo)))
            if table.num_rows == hi - lo:
                return [(lo, hi, table)], [], []
        except _PARSE_ERRORS:
            pass
        if hi - lo == 1:
            value = values[lo].as_py()
            fields = self._parse_fields(value)
            if fields is not None:
                return [(lo, hi, fields[0])], [], [(lo, cause) for cause in fields[1]]
            return [], [(lo, self._parse_one(value) or "the record could not be read")], []
        mid = lo + (hi - lo) // 2
        left, lbad, lnull = self._bisect_array(values, lo, mid)
        right, rbad, rnull = self._bisect_array(values, mid, hi)
        return left + right, lbad + rbad, lnull + rnull

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
    def _cast(self, wire: pa.Table, documents=None) -> tuple[pa.Table, list[tuple[int, str]]]:
        """The declared types, with NULL for every value that does not fit its column, and (row,
        cause) for each such value.
        Columns whose values Arrow's kernels cast exactly as DuckDB would are cast there; only
        the others (and any column holding a value Arrow refuses) go through DuckDB's pass.
        `documents()`: the records' texts, one per row of `wire`, read for their jsonb fields."""
        done: dict[str, pa.ChunkedArray] = {}
        bad: list[tuple[int, str]] = []
        if self.jsonb:
            members, bad = _jsonb_members(documents(), self.jsonb)
            done.update(members)
        rest = []
        for c in self.columns:
            if c.name in done:
                continue
            target = self.target.field(c.name).type
            col = wire.column(c.name)
            if c.type == "jsonb":  # text: a CSV field, a Parquet column
                done[c.name], problems = _jsonb_texts(col, c.name)
                bad.extend(problems)
                continue
            cast = col if col.type == target else _arrow_cast(col, c.type, target)
            if cast is None:
                rest.append((c, col.type))
            else:
                done[c.name] = cast
        if not rest:
            return pa.table([done[c.name] for c in self.columns], schema=self.target), sorted(bad)
        select = []
        for i, (c, w) in enumerate(rest):
            src = f"w.{quote(c.name)}"
            if pa.types.is_string(w) and c.type != "varchar":
                src = f"NULLIF({src}, '')"  # an empty CSV field is NULL, not a bad value
            cast = f"TRY_CAST({src} AS {sqltypes.duckdb_type(c.type)})"
            select.append(f"{cast} AS {quote(c.name)}")
            name = c.name.replace("'", "''")
            select.append(f"CASE WHEN {src} IS NOT NULL AND {cast} IS NULL THEN 'column \"{name}\": cannot read ' "
                          f"|| CAST({src} AS VARCHAR) || ' as {c.type}' END AS rw_problem_{i}")
        narrow = wire.select([c.name for c, _ in rest]).append_column("rw_pos", pa.array(np.arange(wire.num_rows,
                                                                                                  dtype=np.int64)))
        out = self.engine.sql(f"SELECT {', '.join(select)}, rw_pos FROM w ORDER BY rw_pos", w=narrow)
        for i, (c, _) in enumerate(rest):
            problems = out.column(f"rw_problem_{i}")
            if problems.null_count != out.num_rows:
                flagged = pc.is_valid(problems)
                bad.extend(zip(out.column("rw_pos").filter(flagged).to_pylist(), problems.filter(flagged).to_pylist()))
            if _nested(c.type):
                done[c.name], lost = _whole_or_null(wire.column(c.name), out.column(c.name), c)
                bad.extend(lost)
        cols = [done[c.name] if c.name in done else out.column(c.name) for c in self.columns]
        return pa.table(cols, names=[c.name for c in self.columns]).cast(self.target), sorted(bad)

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
        text = data if data.endswith(b"\n") else data + b"\n"
        if self.encode == "json" and not np.isin(buf[starts], _NULL_FIRST_BYTES).any():
            text = pa.py_buffer(text)  # no line can be a `null` document (see _without_null_documents)
        try:
            wire = self._parse_block(text)
        except _PARSE_ERRORS:
            wire = None
        if wire is not None and wire.num_rows == len(starts):
            rows, bad = self._cast(wire, lambda: [data[s:e] for s, e in zip(starts.tolist(), ends.tolist())])
            return Decoded(rows, list(range(len(starts))), sorted(bad)), starts
        return self.decode([data[s:e] for s, e in zip(starts.tolist(), ends.tolist())]), starts

    def decode_table(self, table: pa.Table) -> Decoded:
        """Rows already typed (a Parquet file's): the declared columns it has (the others NULL),
        cast to the declared types; a value that does not fit its column is NULL (and an error)."""
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
        return Decoded(rows, list(range(wire.num_rows)), sorted(bad))


def _jsonb_members(documents: list, names: list[str]) -> tuple[dict[str, pa.ChunkedArray], list[tuple[int, str]]]:
    """The jsonb fields `names` of JSON records (one parse of each record by Python's parser), in
    jsonb's canonical text; a field that is absent or JSON null is NULL, as in RisingWave. A value
    jsonb cannot hold (a string with U+0000) is NULL and an error (row, cause)."""
    out: dict[str, list] = {n: [] for n in names}
    bad: list[tuple[int, str]] = []
    for row, doc in enumerate(documents):
        try:
            value = jsonb.parse(doc)
        except (ValueError, TypeError, RecursionError) as e:
            value = None
            bad.extend((row, f'column "{n}": cannot read its value as jsonb ({e})') for n in names)
        for n in names:
            member = value.get(n) if isinstance(value, dict) else None
            if member is None:
                out[n].append(None)
                continue
            try:
                out[n].append(jsonb.text_of(member))
            except DataError as e:
                out[n].append(None)
                bad.append((row, f'column "{n}": cannot read {_shown(member)} as jsonb: {str(e).split(": ", 1)[-1]}'))
    return {n: pa.chunked_array([pa.array(v, pa.string())]) for n, v in out.items()}, bad


def _jsonb_texts(col: pa.ChunkedArray, name: str) -> tuple[pa.ChunkedArray, list[tuple[int, str]]]:
    """A jsonb column read as text (a CSV field) or typed (a Parquet column), in canonical text:
    text is parsed as JSON, a typed value written as JSON; what does not read is NULL and an error."""
    out, bad = [], []
    text = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    for row, v in enumerate(col.to_pylist()):
        if v is None or (text and v == ""):  # an empty CSV field is NULL
            out.append(None)
            continue
        try:
            out.append(jsonb.normalize(v) if text else jsonb.text_of(jsonb.from_python(v)))
        except DataError:
            out.append(None)
            bad.append((row, f'column "{name}": cannot read {v if text else _shown(v)} as jsonb'))
    return pa.chunked_array([pa.array(out, pa.string())]), bad


def _shown(value) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return "its value"


def _nested(type_name: str) -> bool:
    return type_name.endswith("[]") or sqltypes.is_struct(type_name)


def _whole_or_null(wire: pa.ChunkedArray, cast: pa.ChunkedArray, c: Column):
    """A nested value (array, struct) that DuckDB's TRY_CAST read only in part (an element or a
    field did not fit its type and came out NULL) is NULL whole, and an error, as RisingWave
    rejects a nested value with a bad part. Returns the column and (row, cause) of each such value."""
    wire, cast = _one(wire), _one(cast)
    lost = cast.is_valid().to_numpy(zero_copy_only=False) & (_valid_leaves(cast) < _valid_leaves(wire))
    if not lost.any():
        return pa.chunked_array([cast]), []
    rows = np.flatnonzero(lost).tolist()
    causes = [(r, f'column "{c.name}": cannot read {_shown(wire[r].as_py())} as {c.type}') for r in rows]
    return pa.chunked_array([pc.if_else(pa.array(lost), pa.scalar(None, cast.type), cast)]), causes


def _one(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _valid_leaves(arr: pa.Array) -> np.ndarray:
    """Per value, how many scalars inside it (array elements, struct fields, at any depth) are not NULL."""
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_struct(arr.type):
        total = np.zeros(len(arr), np.int64)
        for child in arr.flatten():
            total += _valid_leaves(child)
        return total * valid
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=_valid_leaves(arr.flatten()), minlength=len(arr)).astype(np.int64)
    return valid.astype(np.int64)


_NO_FIELDS = pa.schema([pa.field("\x00", pa.null())])  # a name no field has: a document parsed, nothing read


def _json_field(value: bytes, name: str) -> str:
    """A field's value as JSON text, for a message ("its value" when it cannot be shown)."""
    try:
        return json.dumps(json.loads(value)[name], ensure_ascii=False)
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        return "its value"


_NULL_DOCUMENT = re.compile(rb"(?:^|\n)[ \t\r\x0b\x0c]*null[ \t\r\x0b\x0c]*(?=\n|$)")
_NULL_FIRST_BYTES = np.frombuffer(b" \t\r\x0b\x0cn", np.uint8)  # how a line that is a null document starts


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
