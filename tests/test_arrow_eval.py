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
    CON.register("t", table)
    sql = f"SELECT {expr} AS x FROM t" + (f" WHERE {where}" if where else "")
    try:
        expected = CON.sql(sql).to_arrow_table()
    except duckdb.Error:
        expected = None
    finally:
        CON.unregister("t")
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    got = evaluate(table, [tree.expressions[0].this], tree.args["where"].this if where else None,
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
