"""A sqllogictest (.slt) runner for dagster-rw, with values printed the way PostgreSQL/RisingWave print them."""
from __future__ import annotations

import datetime as dt
import glob
import hashlib
import math
import os
import re
import signal
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

ENGINE_NAME = "dagster-rw"
DEFAULT_RECORD_TIMEOUT = 120.0  # seconds one record may take before the rest of its file is abandoned
_IGNORED_DIRECTIVES = {"sleep", "control", "hash-threshold", "connection", "subtest", "mode"}
_SORT_MODES = {"nosort", "rowsort", "valuesort"}


# ------------------------------------------------------------------------------------------------
# Printing values as PostgreSQL does (timestamps' fractions as RisingWave does)
# ------------------------------------------------------------------------------------------------

def format_value(v, type_code=None) -> str:
    """One value as PostgreSQL prints it (sqllogictest spelling: NULL, (empty)).

    `type_code` is the column's type from cursor.description, when known: a REAL column's floats
    are printed with single-precision digits.
    """
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_real(v) if _is_real_type(type_code) else format_double(v)
    if isinstance(v, Decimal):
        return format_decimal(v)
    if isinstance(v, str):
        return v if v != "" else "(empty)"
    if isinstance(v, dt.datetime):
        return format_timestamp(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.time):
        return _clock_fraction(v.replace(tzinfo=None).isoformat())
    if isinstance(v, dt.timedelta):
        return format_timedelta(v)
    if _is_month_day_nano(v):
        return format_interval(v.months, v.days, v.nanoseconds // 1000)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return "{" + ",".join(_format_nested(x) for x in v) + "}"
    if isinstance(v, dict):
        return "(" + ",".join(_format_nested(x) for x in v.values()) + ")"
    return str(v)


def _format_nested(v) -> str:
    """An element of an array or struct: NULL as is, the empty string as ""."""
    if isinstance(v, str) and v == "":
        return '""'
    return format_value(v)


def _is_real_type(type_code) -> bool:
    return type_code is not None and str(type_code).upper() in ("FLOAT", "REAL", "FLOAT4")


def _is_month_day_nano(v) -> bool:
    return all(hasattr(v, a) for a in ("months", "days", "nanoseconds"))


def format_double(f: float) -> str:
    """A float8 as PostgreSQL 12+ prints it: shortest round-trip digits, exponent outside 1e-4..1e15."""
    return _layout_float(f, repr(f), fixed_below=15)


def format_real(f: float) -> str:
    """A float4 as PostgreSQL prints it: shortest single-precision digits, exponent outside 1e-4..1e6."""
    return _layout_float(f, _shortest_float32_digits(f), fixed_below=6)


def _shortest_float32_digits(f: float) -> str:
    try:
        target = struct.pack("<f", f)
    except OverflowError:
        return repr(f)
    for precision in range(1, 10):
        text = f"{f:.{precision}g}"
        if struct.pack("<f", float(text)) == target:
            return text
    return repr(f)


def _layout_float(f: float, digits_text: str, fixed_below: int) -> str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign, digits, exponent = Decimal(digits_text).as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exponent += 1
    text = "".join(map(str, digits))
    point = len(text) + exponent  # digits before the decimal point
    e10 = point - 1
    if -4 <= e10 < fixed_below:
        if exponent >= 0:
            body = text + "0" * exponent
        elif point > 0:
            body = text[:point] + "." + text[point:]
        else:
            body = "0." + "0" * (-point) + text
    else:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        body = f"{mantissa}e{'+' if e10 >= 0 else '-'}{abs(e10):02d}"
    return ("-" if sign else "") + body


def format_decimal(d: Decimal) -> str:
    """A numeric with the scale it has (5727.60), never in exponent notation."""
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "Infinity" if d > 0 else "-Infinity"
    return format(d, "f")


def format_timestamp(t: dt.datetime) -> str:
    """timestamp: '2015-07-15 00:00:22.005', '2015-07-15 00:00:20.210'; timestamptz (aware) in UTC
    with '+00:00'."""
    if t.tzinfo is not None and t.utcoffset() is not None:
        utc = t.astimezone(dt.UTC).replace(tzinfo=None)
        return _clock_fraction(utc.isoformat(sep=" ")) + "+00:00"
    return _clock_fraction(t.replace(tzinfo=None).isoformat(sep=" "))


def _clock_fraction(text: str) -> str:
    """A time of day's fractional second as RisingWave prints timestamps and times: none when it
    is zero, else milliseconds (3 digits) when they are exact, else microseconds (6 digits):
    '00:00:20.210' where PostgreSQL prints '00:00:20.21'."""
    if "." not in text:
        return text
    whole, frac = text.split(".")
    frac = frac.ljust(6, "0")
    if frac == "000000":
        return whole
    return f"{whole}.{frac[:3]}" if frac.endswith("000") else f"{whole}.{frac}"


def format_timedelta(td: dt.timedelta) -> str:
    """A Python timedelta as a PostgreSQL interval: days and time carry the same sign."""
    micros = (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds
    sign = -1 if micros < 0 else 1
    days, rest = divmod(abs(micros), 86_400_000_000)
    return format_interval(0, sign * days, sign * rest)


def format_interval(months: int, days: int, micros: int) -> str:
    """PostgreSQL's 'postgres' interval style: '1 year 2 mons', '21 days 23:59:59', '-00:00:01'."""
    parts = []
    negative_before = False
    years, mons = int(months / 12), months - int(months / 12) * 12  # both truncated toward zero
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            plus = "+" if negative_before and value > 0 else ""
            parts.append(f"{plus}{value} {unit}{'' if value == 1 else 's'}")
            negative_before = value < 0
    if micros or not parts:
        sign = "-" if micros < 0 else ("+" if negative_before else "")
        secs, frac = divmod(abs(micros), 1_000_000)
        hours, secs = divmod(secs, 3600)
        minutes, secs = divmod(secs, 60)
        clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
        if frac:
            clock += f".{frac:06d}".rstrip("0")
        parts.append(sign + clock)
    return " ".join(parts)


# ------------------------------------------------------------------------------------------------
# Parsing .slt files
# ------------------------------------------------------------------------------------------------

@dataclass
class Record:
    """One record of a .slt file, with where it starts."""
    kind: str  # statement | query | skip | halt | invalid
    path: str
    line: int
    sql: str = ""
    expect_error: bool = False
    error_pattern: str | None = None  # `statement error <regex>`
    error_message: str | None = None  # `statement error` ... `----` ... (exact message)
    expected: list[str] = field(default_factory=list)
    sort_mode: str = "nosort"
    expected_count: int | None = None  # `statement count N`
    conditions: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""  # for `skip` and `invalid` records


class _Lines:
    """The lines of a file with a cursor; line numbers are 1-based."""

    def __init__(self, text: str):
        self.lines = text.replace("\r\n", "\n").split("\n")
        self.pos = 0

    def done(self) -> bool:
        return self.pos >= len(self.lines)

    def peek(self) -> str:
        return self.lines[self.pos]

    def next(self) -> str:
        line = self.lines[self.pos]
        self.pos += 1
        return line

    @property
    def number(self) -> int:
        return self.pos  # the line just returned by next()


def _is_blank(line: str) -> bool:
    return not line.strip()


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def parse_file(path: str | os.PathLike, _depth: int = 0) -> list[Record]:
    """All records of a .slt file, `include`s expanded in place."""
    path = str(path)
    with open(path, encoding="utf-8") as f:
        return parse_text(f.read(), path, _depth)


def parse_text(text: str, path: str = "<text>", _depth: int = 0) -> list[Record]:
    """All records of .slt text; `include` globs are relative to `path`'s folder."""
    lines = _Lines(text)
    records: list[Record] = []
    conditions: list[tuple[str, str]] = []
    while not lines.done():
        line = lines.next()
        if _is_blank(line) or _is_comment(line):
            continue
        start = lines.number
        words = _directive_words(line)
        head = words[0]
        if head in ("skipif", "onlyif"):
            conditions.append((head, words[1] if len(words) > 1 else ""))
            continue
        if head in _IGNORED_DIRECTIVES:
            continue
        if head == "include":
            records.extend(_included_records(path, start, line.split(None, 1)[1:], _depth))
        elif head == "halt":
            records.append(Record("halt", path, start, conditions=conditions))
        elif head == "statement":
            records.append(_parse_statement(line, lines, path, start, conditions))
        elif head == "query":
            records.append(_parse_query(line, lines, path, start, conditions))
        elif head == "system":
            _read_block(lines)
            records.append(Record("skip", path, start, reason="system commands are not run", conditions=conditions))
        else:
            sql = _read_block(lines)
            records.append(Record("invalid", path, start, sql=sql, conditions=conditions,
                                  reason=f"unknown record type {head!r}"))
        conditions = []
    return records


def _directive_words(line: str) -> list[str]:
    """The words of a directive line, without a trailing `# comment`."""
    words = line.split("#", 1)[0].split() if not line.startswith(("statement error", "query error")) else line.split()
    return words or [line.strip()]


def _included_records(path: str, line: int, args: list[str], depth: int) -> list[Record]:
    if not args:
        return [Record("invalid", path, line, reason="include without a file")]
    if depth > 20:
        return [Record("invalid", path, line, reason="include nested too deeply")]
    pattern = os.path.join(os.path.dirname(path), args[0].strip())
    matches = sorted(glob.glob(pattern))
    if not matches:
        return [Record("invalid", path, line, reason=f"include {args[0].strip()!r} matched no file")]
    out: list[Record] = []
    for m in matches:
        out.extend(parse_file(m, depth + 1))
    return out


def _read_sql(lines: _Lines) -> tuple[str, bool]:
    """SQL lines up to a blank line or `----`; whether `----` was seen."""
    sql = []
    while not lines.done():
        line = lines.next()
        if _is_blank(line):
            return "\n".join(sql), False
        if line.strip() == "----":
            return "\n".join(sql), True
        if not _is_comment(line):
            sql.append(line)
    return "\n".join(sql), False


def _read_block(lines: _Lines) -> str:
    """Lines up to the next blank line."""
    out = []
    while not lines.done():
        line = lines.next()
        if _is_blank(line):
            break
        out.append(line)
    return "\n".join(out)


def _read_error_message(lines: _Lines) -> str:
    """An expected error message after `----`: it ends at two blank lines in a row (or the file's end)."""
    out = []
    while not lines.done():
        line = lines.next()
        if _is_blank(line) and (lines.done() or _is_blank(lines.peek())):
            if not lines.done():
                lines.next()
            break
        out.append(line)
    return "\n".join(out).strip()


def _parse_statement(line: str, lines: _Lines, path: str, start: int, conditions) -> Record:
    words = line.split()
    rec = Record("statement", path, start, conditions=conditions)
    mode = words[1] if len(words) > 1 else "ok"
    if mode == "error":
        rec.expect_error = True
        rec.error_pattern = line.split(None, 2)[2].strip() if len(words) > 2 else None
    elif mode == "count":
        try:
            rec.expected_count = int(words[2])
        except (IndexError, ValueError):
            rec.kind, rec.reason = "invalid", f"bad statement count: {line!r}"
    elif mode != "ok":
        rec.kind, rec.reason = "invalid", f"unknown statement mode {mode!r}"
    rec.sql, dashes = _read_sql(lines)
    if dashes:
        if rec.expect_error:
            rec.error_message = _read_error_message(lines)
        else:
            _read_block(lines)
    return rec


def _parse_query(line: str, lines: _Lines, path: str, start: int, conditions) -> Record:
    words = line.split()
    rec = Record("query", path, start, conditions=conditions)
    if len(words) > 1 and words[1] == "error":
        rec.expect_error = True
        rec.error_pattern = line.split(None, 2)[2].strip() if len(words) > 2 else None
    elif len(words) > 2 and words[2] in _SORT_MODES:
        rec.sort_mode = words[2]
    rec.sql, dashes = _read_sql(lines)
    if dashes:
        if rec.expect_error:
            rec.error_message = _read_error_message(lines)
        else:
            rec.expected = [r for r in _read_block(lines).split("\n") if r.strip()]
    return rec


# ------------------------------------------------------------------------------------------------
# Running records
# ------------------------------------------------------------------------------------------------

@dataclass
class Failure:
    path: str
    line: int
    reason: str
    sql: str = ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class FileResult:
    path: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        """Records run (passed + failed); skipped records are counted apart."""
        return self.passed + self.failed

    @property
    def ok(self) -> bool:
        return self.failed == 0


class RecordTimeout(BaseException):
    """A record ran longer than its time limit (BaseException, so engine code cannot swallow it)."""


def applies_to_us(record: Record) -> bool:
    """skipif/onlyif: we are engine `dagster-rw` (and not risingwave, postgres, ...)."""
    for kind, engine in record.conditions:
        if kind == "skipif" and engine == ENGINE_NAME:
            return False
        if kind == "onlyif" and engine != ENGINE_NAME:
            return False
    return True


def run_file(path, warehouse: str | None = None, timeout: float | None = DEFAULT_RECORD_TIMEOUT) -> FileResult:
    """Run one .slt file, on a fresh warehouse in a temporary folder unless `warehouse` is given."""
    path = str(path)
    result = FileResult(path)
    started = time.monotonic()
    try:
        records = parse_file(path)
    except Exception as e:  # unreadable file
        result.failed += 1
        result.failures.append(Failure(path, 0, f"cannot read the file: {_describe(e)}"))
        return result
    if warehouse is not None:
        run_records(records, warehouse, result, timeout)
    else:
        with tempfile.TemporaryDirectory(prefix="dagster_rw_slt_") as tmp:
            run_records(records, os.path.join(tmp, "wh"), result, timeout)
    result.seconds = time.monotonic() - started
    return result


def run_records(records: list[Record], warehouse: str, result: FileResult, timeout: float | None) -> None:
    """Run records in order on one connection, adding to `result`; a failing record does not stop the rest."""
    import dagster_rw

    try:
        conn = dagster_rw.connect(warehouse)
    except Exception as e:
        result.failed += 1
        result.failures.append(Failure(result.path, 0, f"cannot open the warehouse: {_describe(e)}"))
        return
    try:
        for i, record in enumerate(records):
            if record.kind == "halt" and applies_to_us(record):
                break
            if record.kind == "halt":
                continue
            if record.kind == "skip" or not applies_to_us(record):
                result.skipped += 1
                continue
            try:
                reason = _with_timeout(timeout, run_record, conn, record)
            except RecordTimeout:
                _abandon_rest(records[i:], result, timeout)
                break
            if reason is None:
                result.passed += 1
            else:
                result.failed += 1
                result.failures.append(Failure(record.path, record.line, reason, record.sql))
    finally:
        try:
            conn.close()
        except Exception:
            pass


def _abandon_rest(records: list[Record], result: FileResult, timeout: float | None) -> None:
    first = records[0]
    result.failed += 1
    result.failures.append(Failure(first.path, first.line, f"timeout: the record ran longer than {timeout:g}s; "
                                   "the rest of the file is not run", first.sql))
    rest = [r for r in records[1:] if r.kind in ("statement", "query", "invalid") and applies_to_us(r)]
    for r in rest:
        result.failed += 1
        result.failures.append(Failure(r.path, r.line, "not run: an earlier record timed out", r.sql))


def _with_timeout(timeout: float | None, fn, *args):
    """Call fn(*args), raising RecordTimeout after `timeout` seconds (only on the main thread, via SIGALRM)."""
    usable = (timeout and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        return fn(*args)

    def on_alarm(signum, frame):
        raise RecordTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_record(conn, record: Record) -> str | None:
    """Run one record; None when it passed, else why it failed."""
    if record.kind == "invalid":
        return record.reason
    try:
        cur = conn.execute(record.sql)
    except Exception as e:
        return check_error(record, e)
    if record.expect_error:
        return "expected an error, but the statement succeeded"
    if record.kind == "statement":
        return check_count(record, cur)
    try:
        rows = cur.fetchall()
        types = [d[1] for d in cur.description] if cur.description else []
    except Exception as e:
        return f"fetching the rows failed: {_describe(e)}"
    return check_rows(record, rows, types)


def check_error(record: Record, error: BaseException) -> str | None:
    """An error raised by a record: fine when expected (and its message matches), else the failure."""
    import dagster_rw

    message = str(error)
    if not record.expect_error:
        return _describe(error)
    if not isinstance(error, dagster_rw.Error):
        return f"expected an error, but got an internal exception (not a dagster_rw.Error): {_describe(error)}"
    if record.error_pattern:
        if not _matches(record.error_pattern, message):
            return f"error message {_first_line(message)!r} does not match {record.error_pattern!r}"
    elif record.error_message:
        if normalize(_root_cause(record.error_message)) != normalize(_root_cause(message)):
            return f"error message {_first_line(message)!r} differs from the expected {_first_line(record.error_message)!r}"
    return None


def _root_cause(message: str) -> str:
    """The innermost cause of an error chain as RisingWave prints it (`<context>` then `Caused by:`
    sections; the client adds `db error: ERROR: ...` in front): the whole message when it has no
    cause. An expected message is matched on this part, which names what went wrong."""
    return message.rsplit("\nCaused by:", 1)[-1]


def _matches(pattern: str, message: str) -> bool:
    try:
        return re.search(pattern, message) is not None
    except re.error:
        return pattern in message


def check_count(record: Record, cur) -> str | None:
    if record.expected_count is not None and cur.rowcount != record.expected_count:
        return f"expected {record.expected_count} affected rows, got {cur.rowcount}"
    return None


def normalize(text: str) -> str:
    """Trim and collapse runs of white space to one space."""
    return " ".join(text.split())


def format_rows(rows, types=()) -> list[str]:
    """Each row as one normalized line of formatted values."""
    types = list(types)
    out = []
    for row in rows:
        values = [format_value(v, types[i] if i < len(types) else None) for i, v in enumerate(row)]
        out.append(normalize(" ".join(values)))
    return out


def check_rows(record: Record, rows, types=()) -> str | None:
    """Compare a query's rows with the expected ones under the record's sort mode."""
    actual = format_rows(rows, types)
    expected = [normalize(r) for r in record.expected]
    if len(expected) == 1 and _is_hash_line(expected[0]):
        return _check_hash(expected[0], rows, types)
    if record.sort_mode == "rowsort":
        actual, expected = sorted(actual), sorted(expected)
    elif record.sort_mode == "valuesort":
        actual = sorted(" ".join(actual).split())
        expected = sorted(" ".join(expected).split())
    if actual == expected:
        return None
    return _describe_mismatch(expected, actual)


_HASH_LINE = re.compile(r"^(\d+) values hashing to ([0-9a-f]{32})$")


def _is_hash_line(line: str) -> bool:
    return _HASH_LINE.match(line) is not None


def _check_hash(line: str, rows, types) -> str | None:
    count, digest = _HASH_LINE.match(line).groups()
    values = [format_value(v, types[i] if i < len(types) else None) for row in rows for i, v in enumerate(row)]
    got = hashlib.md5("".join(v + "\n" for v in values).encode()).hexdigest()
    if len(values) != int(count) or got != digest:
        return f"expected {count} values hashing to {digest}, got {len(values)} hashing to {got}"
    return None


def _describe_mismatch(expected: list[str], actual: list[str], limit: int = 12) -> str:
    def block(rows):
        shown = [f"    {r}" for r in rows[:limit]]
        if len(rows) > limit:
            shown.append(f"    ... ({len(rows) - limit} more)")
        return "\n".join(shown) if shown else "    (no rows)"

    missing = [r for r in expected if r not in actual]
    extra = [r for r in actual if r not in expected]
    summary = f"query result differs ({len(expected)} rows expected, {len(actual)} returned"
    if missing or extra:
        summary += f"; {len(missing)} expected rows missing, {len(extra)} unexpected"
    return f"{summary})\n  expected:\n{block(expected)}\n  actual:\n{block(actual)}"


def _first_line(text: str) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _describe(error: BaseException) -> str:
    import dagster_rw

    text = _first_line(str(error)) or "(no message)"
    if isinstance(error, dagster_rw.Error):
        return f"{type(error).__name__}: {text}"
    return f"internal error {type(error).__module__}.{type(error).__name__}: {text}"


# ------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------

def collect_files(paths) -> list[Path]:
    """Files as given, and every *.slt under each folder (not .slt.part), sorted."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(q for q in p.rglob("*.slt") if q.is_file()))
        else:
            files.append(p)
    return files


def main(paths, warehouse: str | None = None, verbose: bool = False, out=None,
         timeout: float | None = DEFAULT_RECORD_TIMEOUT) -> int:
    """Run .slt files and folders; print one line per file and totals. 0 when every file passed."""
    out = out or sys.stdout
    files = collect_files(paths)
    if not files:
        print("no .slt files found", file=out)
        return 1
    results = []
    for f in files:
        if not f.exists():
            r = FileResult(str(f), failed=1, failures=[Failure(str(f), 0, "no such file")])
        else:
            r = run_file(f, warehouse=warehouse, timeout=timeout)
        results.append(r)
        print_file_result(r, verbose, out)
    print_totals(results, out)
    return 0 if all(r.ok for r in results) else 1


def print_file_result(r: FileResult, verbose: bool, out) -> None:
    skipped = f", {r.skipped} skipped" if r.skipped else ""
    print(f"{'PASS' if r.ok else 'FAIL'}  {r.path}  ({r.passed}/{r.total} records{skipped}, {r.seconds:.1f}s)",
          file=out, flush=True)
    if verbose:
        for failure in r.failures:
            print(f"    {failure.path}:{failure.line}: {failure.reason}".replace("\n", "\n    "), file=out)


def print_totals(results: list[FileResult], out) -> None:
    files_ok = sum(r.ok for r in results)
    passed = sum(r.passed for r in results)
    total = sum(r.total for r in results)
    skipped = sum(r.skipped for r in results)
    print(f"files: {files_ok}/{len(results)} passed; records: {passed}/{total} passed; {skipped} skipped",
          file=out, flush=True)
