"""Record decoding: every record is either a row or an error with its cause, never lost, whatever
mix of good and bad records a batch holds (hypothesis), for JSON and CSV. A record that is not a
document is rejected; a value that does not fit its column is NULL in a row that is kept, and an
error naming the column."""
from __future__ import annotations

import datetime
import json
import re

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_rw.sources.decode import RecordDecoder
from dagster_rw.storage.catalog import Column

COLUMNS = [Column("a", "integer"), Column("s", "varchar"), Column("ts", "timestamp"), Column("x", "double precision")]
BASE = datetime.datetime(2024, 1, 1)

# (json value, expected decoded value or BAD: NULL and an error); a record: BAD when rejected whole
BAD = object()
ints = st.one_of(st.integers(-2**31, 2**31 - 1).map(lambda i: (i, i)),
                 st.sampled_from([(2**31, BAD), (-2**31 - 1, BAD), ("7", BAD), (1.5, BAD), (True, BAD)]))
texts = st.one_of(st.text(max_size=8).map(lambda t: (t, t)), st.sampled_from([(5, BAD), ({"q": 1}, BAD)]))
times = st.one_of(st.integers(0, 10**6).map(lambda s: ((BASE + datetime.timedelta(seconds=s)).isoformat(sep=" "),
                                                        BASE + datetime.timedelta(seconds=s))),
                  st.sampled_from([("not a time", BAD), (12, BAD)]))
floats = st.one_of(st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: (f, f)), st.integers(-5, 5).map(lambda i: (i, float(i))))
field = {"a": ints, "s": texts, "ts": times, "x": floats}


@st.composite
def records(draw):
    if draw(st.integers(0, 9)) == 0:
        raw = draw(st.sampled_from([b"{broken", b"[1, 2]", b"", b"   ", None, b'{"a": 1}{"a": 2}', b"\xff"]))
        return raw, BAD, set()
    obj, expected, bad = {}, {}, set()
    for name, strategy in field.items():
        if draw(st.booleans()):
            value, want = draw(strategy)
            obj[name] = value
            expected[name] = None if want is BAD else want
            if want is BAD:
                bad.add(name)
        elif draw(st.booleans()):
            obj[name] = None
            expected[name] = None
        else:
            expected[name] = None
    text = json.dumps(obj, indent=draw(st.sampled_from([None, 2])))  # pretty-printed records span lines
    return text.encode(), expected, bad


def bad_columns(decoded, i: int) -> set[str]:
    """The columns the errors of a kept record name."""
    return {re.match(r'column "(\w+)": cannot read .+ as ', cause).group(1) for at, cause in decoded.errors if at == i}


@settings(max_examples=60, deadline=None)
@given(st.lists(records(), max_size=40))
def test_every_json_record_is_a_row_or_an_error(batch):
    decoded = RecordDecoder(COLUMNS, "json").decode([raw for raw, _, _ in batch])
    rejected = {i for i, _ in decoded.errors} - set(decoded.good)
    assert sorted(decoded.good + sorted(rejected)) == list(range(len(batch)))
    assert sorted(rejected) == [i for i, (_, want, _) in enumerate(batch) if want is BAD]
    assert len([i for i, _ in decoded.errors if i in rejected]) == len(rejected)  # one cause per rejected record
    rows = decoded.rows.to_pylist()
    for i, row in zip(decoded.good, rows):
        _, want, bad = batch[i]
        assert row == {k: want[k] for k in row}, (batch[i][0], row)
        assert bad_columns(decoded, i) == bad, (batch[i][0], decoded.errors)
    assert all(cause for _, cause in decoded.errors)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.integers(-2**31, 2**31 - 1).map(str), st.just("x"), st.just("")),
                          st.text(alphabet="ab;\" ", max_size=5), st.booleans()), max_size=30))
def test_every_csv_line_is_a_row_or_an_error(lines):
    raw, expected = [], []
    for a, s, short in lines:
        quoted = '"' + s.replace('"', '""') + '"'
        raw.append(f"{a};{quoted}".encode() if not short else f"{a}".encode())
        # an empty field is NULL; "x" is NULL and an error; a one-field line is short, so rejected
        expected.append((int(a) if a not in ("", "x") else None, s) if not short else BAD)
    cols = [Column("a", "integer"), Column("s", "varchar")]
    decoded = RecordDecoder(cols, "csv", delimiter=";").decode(raw)
    assert list(decoded.good) == [i for i, e in enumerate(expected) if e is not BAD]
    assert [i for i, _ in decoded.errors] == [i for i, (a, _, short) in enumerate(lines) if short or a == "x"]
    for i in decoded.good:
        assert bad_columns(decoded, i) == ({"a"} if lines[i][0] == "x" else set())
    assert [tuple(r.values()) for r in decoded.rows.to_pylist()] == [expected[i] for i in decoded.good]


odd_values = st.one_of(st.sampled_from([None, b"", b" ", b"\t\n", b"\x0b\x0c\r", b"\x1c", b"\xa0", b"\n{}\n",
                                        b'{"a":\n1}', b'{"a":\r2}', b'{"s": "x\ny"}', b"{", b"null", b"1"]),
                       st.binary(max_size=12))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(records().map(lambda r: r[0]), odd_values), max_size=40), st.integers(0, 3),
       st.sampled_from(["binary", "large_binary", "chunked"]))
def test_decoding_an_arrow_array_gives_what_decoding_the_values_one_by_one_gives(values, subset, kind):
    """decode_array (values in one Arrow array, as the Kafka read hands them over) against decode
    (a Python list of values): the same rows, positions and errors with their causes."""
    read = None if subset == 0 else {c.name for c in COLUMNS[:subset]}
    if kind == "chunked":
        half = len(values) // 2
        array = pa.chunked_array([pa.array(values[:half], pa.binary()), pa.array(values[half:], pa.binary())])
    else:
        array = pa.array(values, getattr(pa, kind)())
    want = RecordDecoder(COLUMNS, "json", read=read).decode(values)
    got = RecordDecoder(COLUMNS, "json", read=read).decode_array(array)
    assert got.good.tolist() == list(want.good)
    assert got.errors == want.errors
    assert got.rows.equals(want.rows)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([None, b"", b"  ", b"1;a", b'2;"b;c"', b"3", b'"open', b"4;x;y", b"\n"]),
                          st.binary(max_size=6)), max_size=30))
def test_csv_values_in_an_arrow_array_decode_as_one_by_one(values):
    cols = [Column("a", "integer"), Column("s", "varchar")]
    want = RecordDecoder(cols, "csv", delimiter=";").decode(values)
    got = RecordDecoder(cols, "csv", delimiter=";").decode_array(pa.array(values, pa.binary()))
    assert got.good.tolist() == list(want.good)
    assert got.errors == want.errors
    assert got.rows.equals(want.rows)


def test_json_null_records_read_as_rows_of_nulls_wherever_a_parse_block_starts():
    """A record that is JSON null, alone or at the start of one of the reader's blocks (8 MB of text
    and more here), is a row of NULLs, as anywhere else (pyarrow's reader alone crashes on them)."""
    values = [b"null", b' {"a": 1} ', b'{"a": 2, "s": null}', b"\tnull "] + [b"null"] * 3_000_000  # 15 MB: 2 blocks
    for decoded in (RecordDecoder(COLUMNS, "json").decode(values),
                    RecordDecoder(COLUMNS, "json").decode_array(pa.array(values, pa.binary()))):
        assert list(decoded.good) == list(range(len(values))) and decoded.errors == []
        assert decoded.rows.column("a").to_pylist()[:5] == [None, 1, 2, None, None]
    lone = RecordDecoder(COLUMNS, "json")
    assert [lone.decode(v).rows.num_rows for v in ([b"null"], [b"{broken", b"null"])] == [1, 1]
    assert lone.decode_array(pa.array([b" null"], pa.binary())).rows.num_rows == 1
    for first in (b"null", b' {"a": 0}', b'{"a": 0}'):  # a file's text, with and without null documents
        text = first + b'\n{"a": 1}\n{"a": 2, "s": null}\n\tnull \n\n{"a": 3}\nnull'
        lines, _ = lone.decode_lines(text)
        assert lines.errors == [] and lines.rows.column("a").to_pylist() == [
            None if first == b"null" else 0, 1, 2, None, 3, None]
        clean = first + b'\n{"a": 1}\n{"a": 2, "s": null}\n'
        assert lone.decode_lines(clean)[0].rows.equals(lone.decode(clean.splitlines()).rows)


@settings(max_examples=40, deadline=None)
@given(st.lists(records().map(lambda r: r[0]), max_size=30))
def test_decoding_a_file_gives_what_decoding_its_lines_one_by_one_gives(values):
    """decode_lines (a file's text, parsed whole when it can be) against decode of its lines: the
    same rows, positions (byte offsets of the lines) and errors, bad values and malformed lines mixed."""
    lines = [v.replace(b"\n", b" ") for v in values if v]  # an empty line is no record
    data = b"".join(line + b"\n" for line in lines)
    got, starts = RecordDecoder(COLUMNS, "json").decode_lines(data)
    want = RecordDecoder(COLUMNS, "json").decode(lines)
    assert list(got.good) == list(want.good) and got.errors == want.errors
    assert got.rows.equals(want.rows)
    assert [data[s:].split(b"\n", 1)[0] for s in starts.tolist()] == lines
