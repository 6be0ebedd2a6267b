"""Projections and filters of small epochs in Arrow (operators/arrow_eval.py) against DuckDB.

Random integer tables (every width, NULLs, extreme values) and random expressions of the covered
subset (columns, integer literals, + - * %, comparisons, AND/OR/NOT, IS NULL, negation). Wherever
the Arrow path gives an answer, it is DuckDB's, value for value; where DuckDB raises (an overflow),
the Arrow path must have given up.
"""
from __future__ import annotations

import duckdb
import pyarrow as pa
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_rw.operators.arrow_eval import evaluate

TYPES = {"a": pa.int8(), "b": pa.int16(), "c": pa.int32(), "d": pa.int64(), "e": pa.int32()}
EDGES = {8: [-128, 127], 16: [-32768, 32767], 32: [-2**31, 2**31 - 1], 64: [-2**63, 2**63 - 1]}


def column_values(t: pa.DataType):
    bits = t.bit_width
    lo, hi = EDGES[bits]
    return st.lists(st.one_of(st.none(), st.integers(-20, 20), st.integers(-20, 20),
                              st.sampled_from(EDGES[bits] + [0, 1, -1]), st.integers(lo, hi)), min_size=4, max_size=4)


tables = st.fixed_dictionaries({name: column_values(t) for name, t in TYPES.items()}).map(
    lambda cols: pa.table({n: pa.array(v, TYPES[n]) for n, v in cols.items()}))

literals = st.one_of(st.integers(0, 10), st.integers(0, 10),
                     st.sampled_from([7, 127, 128, 40000, 2**31, 2**40])).map(str)
columns = st.sampled_from(list(TYPES))


def arith(children):
    """Operations with a column on at least one side (a literal on both sides: constant SQL no
    view plan leaves unfolded, outside the subset)."""
    ops = st.sampled_from(["+", "-", "*", "%"])
    return st.one_of(
        st.tuples(children, ops, st.one_of(children, literals)).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(literals, ops, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda x: f"(- {x})"),
    )


numbers = st.recursive(columns, arith, max_leaves=4)


def logic(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["AND", "OR"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda x: f"(NOT {x})"),
    )


comparisons = st.one_of(
    st.tuples(numbers, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), st.one_of(numbers, literals)).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"),
    numbers.map(lambda x: f"({x} IS NULL)"),
    numbers.map(lambda x: f"({x} IS NOT NULL)"),
)
conditions = st.recursive(comparisons, logic, max_leaves=3)


CON = duckdb.connect()


@settings(max_examples=200, deadline=None)
@given(table=tables, expr=st.one_of(numbers, conditions), where=st.one_of(st.none(), conditions))
def test_arrow_evaluation_equals_duckdb_wherever_it_answers(table, expr, where):
    _check_against_duckdb(table, f"SELECT {expr} AS x FROM t" + (f" WHERE {where}" if where else ""))


def _check_against_duckdb(table: pa.Table, sql: str) -> None:
    """`sql` (one column x over the table t) evaluated in Arrow equals DuckDB's answer wherever the
    Arrow path answers (where DuckDB raises, the Arrow path must not answer)."""
    CON.register("t", table)
    try:
        expected = CON.sql(sql).to_arrow_table()
    except duckdb.Error:
        expected = None
    finally:
        CON.unregister("t")
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    where = tree.args.get("where")
    got = evaluate(table, [tree.expressions[0].this], where.this if where is not None else None,
                   [expected.schema.field("x").type] if expected is not None else [pa.int64()])
    if got is None:
        return  # left to the engine
    assert expected is not None, f"DuckDB raises on {sql}, the Arrow path answered"
    (column,), _mask = got
    assert column.to_pylist() == expected.column("x").to_pylist(), sql


def test_the_subset_answers_the_common_shapes():
    table = pa.table({"k": pa.array([1, -7, None, 9], pa.int32()), "v": pa.array([3, 4, 5, None], pa.int64())})
    for sql, want in [("k % 7", [1, 0, None, 2]), ("k + v", [4, -3, None, None]), ("-k * 2", [-2, 14, None, -18])]:
        tree = sqlglot.parse_one(f"SELECT {sql}", dialect="duckdb").expressions[0]
        got = evaluate(table, [tree], None, [pa.int64()])
        assert got is not None and got[0][0].to_pylist() == want, sql
    where = sqlglot.parse_one("SELECT 1 WHERE k > 0 AND v IS NOT NULL", dialect="duckdb").args["where"].this
    (col,), mask = evaluate(table, [sqlglot.exp.column("k")], where, [pa.int32()])
    assert col.to_pylist() == [1] and mask.to_pylist() == [True, False, False, False]
    # outside the subset: left to the engine
    for sql in ["k / 2", "CAST(k AS VARCHAR)", "abs(k)", "k % 0"]:
        tree = sqlglot.parse_one(f"SELECT {sql}", dialect="duckdb").expressions[0]
        assert evaluate(table, [tree], None, [pa.int64()]) is None, sql


MICROS = st.one_of(st.none(), st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),
                   st.integers(-10**12, 10**12), st.sampled_from([0, -1, 1, 9_999_999, -10_000_000]))
WINDOW_STARTS = [  # a TUMBLE's and a HOP's window start, in the form the planner writes them
    "MAKE_TIMESTAMP(DATE_DIFF('MICROSECOND', CAST('1970-01-01 00:00:00' AS TIMESTAMP), CAST(ts AS TIMESTAMP)) - "
    "(((DATE_DIFF('MICROSECOND', CAST('1970-01-01 00:00:00' AS TIMESTAMP), CAST(ts AS TIMESTAMP))) % {size}) + {size})"
    " % {size} - {offset})",
    "MAKE_TIMESTAMP(DATE_DIFF('MICROSECOND', CAST('2020-01-01 00:00:00.5' AS TIMESTAMP), ts) + {offset})",
]


@settings(max_examples=100, deadline=None)
@given(ints=st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(-1000, 1000)), min_size=4,
                     max_size=4),
       micros=st.lists(MICROS, min_size=4, max_size=4),
       literal=st.sampled_from(["0.908", "1.5", "12.25", "0.0001", "3.0", "123456789.123456789"]),
       shape=st.sampled_from(WINDOW_STARTS), size=st.sampled_from([1, 10_000_000, 86_400_000_000]),
       offset=st.sampled_from([0, 2_000_000, -7]))
def test_decimal_products_and_window_starts_equal_duckdb_wherever_they_answer(ints, micros, literal, shape, size,
                                                                              offset):
    table = pa.table({"v": pa.array(ints, pa.int64()), "i": pa.array([x if x is None or -2**31 <= x < 2**31 else 0
                                                                        for x in ints], pa.int32()),
                      "ts": pa.array(micros, pa.int64()).cast(pa.timestamp("us"))})
    for expr in [f"v * {literal}", f"{literal} * i", shape.format(size=size, offset=offset)]:
        _check_against_duckdb(table, f"SELECT {expr} AS x FROM t")


def test_window_starts_and_decimal_products_are_in_the_subset():
    table = pa.table({"price": pa.array([100, None, 7], pa.int64()),
                      "ts": pa.array([0, 12_345_678, -1], pa.int64()).cast(pa.timestamp("us"))})
    tumble = sqlglot.parse_one(f"SELECT {WINDOW_STARTS[0].format(size=10_000_000, offset=0)}",
                               dialect="duckdb").expressions[0]
    product = sqlglot.parse_one("SELECT price * 0.908", dialect="duckdb").expressions[0]
    got = evaluate(table, [tumble, product], None, [pa.timestamp("us"), pa.decimal128(23, 3)])
    assert got is not None
    (starts, prices), _ = got
    assert starts.cast(pa.int64()).to_pylist() == [0, 10_000_000, -10_000_000]
    assert [str(p) if p is not None else None for p in prices.to_pylist()] == ["90.800", None, "6.356"]
