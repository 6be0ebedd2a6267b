"""The team's sqllogictest files (tests/slt) through dagster_rw.slt, and unit tests of the runner itself."""
from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from pathlib import Path

import pytest

from dagster_rw import slt
from dagster_rw.slt import format_value

SLT_DIR = Path(__file__).parent / "slt"
SLT_FILES = sorted(SLT_DIR.glob("*.slt"))
# files that reproduce open engine bugs: expected to fail until the bugs are fixed
KNOWN_BUG_FILES = {"known_bugs.slt"}


def _slt_params():
    for f in SLT_FILES:
        marks = [pytest.mark.xfail(reason="reproduces open engine bugs", strict=False)] \
            if f.name in KNOWN_BUG_FILES else []
        yield pytest.param(f, id=f.name, marks=marks)


def test_there_are_slt_files():
    assert len(SLT_FILES) >= 5


@pytest.mark.parametrize("path", list(_slt_params()))
def test_slt_file(path, tmp_path):
    result = slt.run_file(path, warehouse=str(tmp_path / "wh"))
    report = "\n".join(str(f) for f in result.failures)
    assert result.failed == 0, f"{result.failed} of {result.total} records failed:\n{report}"
    assert result.passed > 0


# -- format_value ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (None, "NULL"),
    (True, "t"),
    (False, "f"),
    (42, "42"),
    (-7, "-7"),
    ("", "(empty)"),
    ("a b", "a b"),
    (Decimal("5727.60"), "5727.60"),
    (Decimal("0.00"), "0.00"),
    (Decimal("1E+2"), "100"),
    (2.5, "2.5"),
    (3.0, "3"),
    (-0.0, "-0"),
    (1e20, "1e+20"),
    (1e15, "1e+15"),
    (123456789012345.0, "123456789012345"),
    (0.0001, "0.0001"),
    (0.00001, "1e-05"),
    (0.1 + 0.2, "0.30000000000000004"),
    (float("nan"), "NaN"),
    (float("-inf"), "-Infinity"),
    (dt.datetime(2015, 7, 15, 0, 0, 22, 5000), "2015-07-15 00:00:22.005"),
    (dt.datetime(2015, 7, 15), "2015-07-15 00:00:00"),
    (dt.datetime(2015, 7, 15, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2015-07-14 23:00:00+00:00"),
    (dt.date(2020, 2, 29), "2020-02-29"),
    (dt.datetime(2015, 7, 15, 0, 0, 20, 210000), "2015-07-15 00:00:20.210"),  # RisingWave's milliseconds
    (dt.datetime(2022, 6, 10, 12, 20, 4, 858173), "2022-06-10 12:20:04.858173"),
    (dt.datetime(2022, 6, 10, 12, 20, 4, 858100), "2022-06-10 12:20:04.858100"),
    (dt.time(1, 2, 3, 500000), "01:02:03.500"),
    (dt.timedelta(hours=1, minutes=1, seconds=1), "01:01:01"),
    (dt.timedelta(days=21, hours=23, minutes=59, seconds=59), "21 days 23:59:59"),
    (dt.timedelta(days=1), "1 day"),
    (dt.timedelta(seconds=-1), "-00:00:01"),
    (dt.timedelta(days=-2, hours=-3), "-2 days -03:00:00"),
    (dt.timedelta(0), "00:00:00"),
    (dt.timedelta(milliseconds=1500), "00:00:01.5"),
    (b"\x01\xff", "\\x01ff"),
    ([1, None, 3], "{1,NULL,3}"),
])
def test_format_value(value, text):
    assert format_value(value) == text


def test_format_value_of_real_columns_uses_single_precision_digits():
    widened = 1.100000023841858  # the float4 1.1 as a Python float
    assert format_value(widened) == "1.100000023841858"
    assert format_value(widened, "FLOAT") == "1.1"
    assert format_value(1000000.0, "FLOAT") == "1e+06"
    assert format_value(123456.0, "REAL") == "123456"


def test_format_interval_with_months():
    assert slt.format_interval(14, 3, 3_600_000_000) == "1 year 2 mons 3 days 01:00:00"
    assert slt.format_interval(0, -1, 3_600_000_000) == "-1 days +01:00:00"
    assert slt.format_interval(1, 0, 0) == "1 mon"


# -- parser ---------------------------------------------------------------------------------------

PARSE_SAMPLE = """\
# a comment
statement ok
create table t
  (v int)

statement error does not exist
select * from nope

query IT rowsort label-1
select 1,
  'a'
----
1 a
2  b

skipif dagster-rw
statement ok
select 1

onlyif risingwave
statement ok
select 2

onlyif dagster-rw
query I
select 3
----
3

statement error
select x
----
db error: ERROR: Failed

Caused by:
  something


query error division
select 1/0

system ok
echo hi

sleep 1s

control substitution on

halt

statement ok
never reached
"""


def test_parse_records():
    records = slt.parse_text(PARSE_SAMPLE, "sample.slt")
    kinds = [r.kind for r in records]
    assert kinds == ["statement", "statement", "query", "statement", "statement", "query", "statement",
                     "query", "skip", "halt", "statement"]
    create, err, q, skipped, only_rw, only_us, multi, qerr, system, halt, _ = records
    assert create.sql == "create table t\n  (v int)" and create.line == 2 and not create.expect_error
    assert err.expect_error and err.error_pattern == "does not exist" and err.sql == "select * from nope"
    assert q.sort_mode == "rowsort" and q.expected == ["1 a", "2  b"] and q.sql == "select 1,\n  'a'"
    assert not slt.applies_to_us(skipped)
    assert not slt.applies_to_us(only_rw)
    assert slt.applies_to_us(only_us) and only_us.expected == ["3"]
    assert multi.expect_error and multi.error_message.startswith("db error") and "something" in multi.error_message
    assert qerr.expect_error and qerr.error_pattern == "division"
    assert halt.line == PARSE_SAMPLE.splitlines().index("halt") + 1


def test_include_expands_part_files(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "b.slt.part").write_text("statement ok\nselect 2\n")
    (tmp_path / "parts" / "a.slt.part").write_text("statement ok\nselect 1\n")
    main = tmp_path / "main.slt"
    main.write_text("include ./parts/*.slt.part\n\nstatement ok\nselect 3\n")
    records = slt.parse_file(main)
    assert [r.sql for r in records] == ["select 1", "select 2", "select 3"]
    assert records[0].path.endswith("a.slt.part")


def _write(tmp_path, text, name="t.slt"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_wrong_expected_row_is_a_failure(tmp_path):
    p = _write(tmp_path, """\
statement ok
create table t (v int)

statement ok
insert into t values (1), (2)

statement ok
flush

query I rowsort
select v from t
----
1
2

query I rowsort
select v from t
----
1
3

statement ok
select * from no_such_table

statement error
select v from t

query I
select v + 100 from t where v = 1
----
101
""")
    result = slt.run_file(p, warehouse=str(tmp_path / "wh"))
    assert (result.passed, result.failed) == (5, 3)
    lines = [f.line for f in result.failures]
    assert lines == [16, 22, 25]
    assert "query result differs" in result.failures[0].reason
    assert "no_such_table" in result.failures[1].reason
    assert "succeeded" in result.failures[2].reason


def test_error_regex_must_match(tmp_path):
    p = _write(tmp_path, """\
statement error does not exist
select * from no_such_table

statement error this text is not in the message
select * from no_such_table
""")
    result = slt.run_file(p, warehouse=str(tmp_path / "wh"))
    assert (result.passed, result.failed) == (1, 1)
    assert result.failures[0].line == 4


def test_sort_modes_and_empty_results(tmp_path):
    p = _write(tmp_path, """\
statement ok
create table t (a int, b varchar)

statement ok
insert into t values (2, 'x'), (1, ''), (3, null)

statement ok
flush

query IT nosort
select * from t order by a desc
----
3 NULL
2 x
1 (empty)

query IT
select * from t order by a
----
3 NULL
2 x
1 (empty)

query IT valuesort
select * from t
----
1 2 3
(empty) NULL x

query I
select a from t where a > 10
----
""")
    result = slt.run_file(p, warehouse=str(tmp_path / "wh"))
    assert result.passed == 6 and result.failed == 1
    assert result.failures[0].line == 17  # nosort: order matters


def test_skip_conditions_system_and_halt(tmp_path):
    p = _write(tmp_path, """\
onlyif risingwave
statement ok
this would fail

skipif dagster-rw
statement ok
this would fail too

system ok
exit 1

statement ok
select 1

halt

statement ok
not run
""")
    result = slt.run_file(p, warehouse=str(tmp_path / "wh"))
    assert (result.passed, result.failed, result.skipped) == (1, 0, 3)


def test_timeout_abandons_the_rest_of_the_file(tmp_path, monkeypatch):
    import time

    def slow(conn, record):
        time.sleep(5)

    monkeypatch.setattr(slt, "run_record", slow)
    p = _write(tmp_path, "statement ok\nselect 1\n\nstatement ok\nselect 2\n")
    result = slt.run_file(p, warehouse=str(tmp_path / "wh"), timeout=0.2)
    assert result.failed == 2 and "timeout" in result.failures[0].reason


def test_main_prints_per_file_lines_and_totals(tmp_path):
    (tmp_path / "d").mkdir()
    _write(tmp_path / "d", "statement ok\nselect 1\n", "good.slt")
    _write(tmp_path / "d", "statement ok\nselect * from nope\n", "bad.slt")
    _write(tmp_path / "d", "statement ok\nselect * from nope\n", "ignored.slt.part")
    out = io.StringIO()
    code = slt.main([str(tmp_path / "d")], verbose=True, out=out)
    text = out.getvalue()
    assert code == 1
    assert "FAIL  " in text and "bad.slt  (0/1 records" in text
    assert "PASS  " in text and "good.slt  (1/1 records" in text
    assert "ignored" not in text
    assert "bad.slt:1:" in text
    assert "files: 1/2 passed; records: 1/2 passed; 0 skipped" in text
    assert slt.main([str(tmp_path / "d" / "good.slt")], out=io.StringIO()) == 0


def test_an_expected_message_is_matched_on_its_innermost_cause(tmp_path):
    # RisingWave's client prints `db error: ERROR: <context>`, then each cause after `Caused by:`;
    # the innermost cause is what must match, word for word.
    p = _write(tmp_path, """\
statement ok
create table t1 (v1 int, v2 int)

statement ok
create table t2 (v1 int, v3 int)

statement error
create materialized view v5 as select * from t1 union corresponding by (vxx, v1) select * from t2
----
db error: ERROR: Failed to run the query

Caused by:
  Invalid input syntax: Column name `vxx` in CORRESPONDING BY is not found in a side of the UNION operation. It shall be included in both sides.


statement error
create materialized view v6 as select * from t1 union corresponding by (vxx, v1) select * from t2
----
db error: ERROR: Failed to run the query

Caused by:
  Invalid input syntax: Column name `v1` in CORRESPONDING BY is not found in a side of the UNION operation. It shall be included in both sides.
""")
    result = slt.run_file(p, warehouse=str(tmp_path / "wh"))
    assert (result.passed, result.failed) == (3, 1)
    assert result.failures[0].line == 16 and "differs from the expected" in result.failures[0].reason
