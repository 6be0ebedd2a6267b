"""A small epoch's projections and filters evaluated with Arrow's kernels, without a SQL engine.

Most views' maps are columns, integer arithmetic, comparisons and boolean logic. For the few rows of
a small epoch, planning and running a DuckDB query costs milliseconds; Arrow's kernels take
microseconds. `evaluate` covers that subset with the engine's semantics and gives up (None) on
anything else, or when Arrow reports an error (an overflow, a division by zero), leaving the
query to DuckDB, which then decides (raises, or answers as it does).

Typing follows DuckDB's: an integer literal takes the type of the column it meets (if it fits), an
operation of two columns the wider of their types, and arithmetic is checked in that type.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_ARITH = {exp.Add: "add_checked", exp.Sub: "subtract_checked", exp.Mul: "multiply_checked",
          exp.Mod: "remainder_checked"}
_COMPARE = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.LT: "less", exp.LTE: "less_equal",
            exp.GT: "greater", exp.GTE: "greater_equal"}


class Unsupported(Exception):
    pass


def evaluate(table: pa.Table, exprs: list[exp.Expression], where: exp.Expression | None,
             types: list[pa.DataType]) -> tuple[list[pa.Array], pa.Array | None] | None:
    """The columns `exprs` (cast to `types`) of the rows of `table` where `where` holds, and the
    mask of those rows (None: every row); None when the subset does not cover them."""
    try:
        mask = None
        if where is not None:
            cond = _value(table, where)
            if not _is_bool(cond):
                return None
            mask = pc.fill_null(cond, False)
            table = table.filter(mask)
        out = []
        for e, t in zip(exprs, types):
            v = _value(table, e)
            if isinstance(v, _Literal):
                return None
            out.append(v if v.type == t else v.cast(t))
        return out, mask
    except (Unsupported, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ZeroDivisionError):
        return None


class _Literal:
    """An integer or string literal, typed by what it meets."""

    def __init__(self, value):
        self.value = value

    def as_type(self, t: pa.DataType) -> pa.Scalar:
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            if not pa.types.is_integer(t):
                raise Unsupported
            if not _fits(self.value, t):
                raise Unsupported
        elif isinstance(self.value, str):
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise Unsupported
        return pa.scalar(self.value, t)


def _fits(value: int, t: pa.DataType) -> bool:
    bits = t.bit_width
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def _is_bool(v) -> bool:
    return not isinstance(v, _Literal) and pa.types.is_boolean(v.type)


def _value(table: pa.Table, e: exp.Expression):
    if isinstance(e, exp.Paren):
        return _value(table, e.this)
    if isinstance(e, exp.Column):
        if e.table or e.name not in table.column_names:
            raise Unsupported
        col = table.column(e.name)
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(e, exp.Literal):
        if e.is_string:
            return _Literal(e.this)
        if e.is_int:
            return _Literal(int(e.this))
        raise Unsupported
    if isinstance(e, exp.Neg):
        v = _value(table, e.this)
        if isinstance(v, _Literal) or not pa.types.is_integer(v.type):
            raise Unsupported
        return pc.negate_checked(v)
    if isinstance(e, exp.Not):
        v = _value(table, e.this)
        if not _is_bool(v):
            raise Unsupported
        return pc.invert(v)
    if isinstance(e, (exp.And, exp.Or)):
        a, b = _value(table, e.this), _value(table, e.expression)
        if not (_is_bool(a) and _is_bool(b)):
            raise Unsupported
        return (pc.and_kleene if isinstance(e, exp.And) else pc.or_kleene)(a, b)
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        v = _value(table, e.this)
        if isinstance(v, _Literal):
            raise Unsupported
        return pc.is_null(v)
    op = getattr(pc, _ARITH.get(type(e)) or _COMPARE.get(type(e)) or "", None)
    if op is None:  # (or a kernel this pyarrow lacks: remainder_checked came in pyarrow 22)
        raise Unsupported
    a, b = _operands(_value(table, e.this), _value(table, e.expression), arithmetic=type(e) in _ARITH)
    if type(e) is exp.Mod and pc.any(pc.equal(b, 0)).as_py():
        raise Unsupported  # x % 0: the engine's own answer
    return op(a, b)


def _operands(a, b, arithmetic: bool):
    """Both sides in one type, as DuckDB types them."""
    if isinstance(a, _Literal) and isinstance(b, _Literal):
        raise Unsupported
    if isinstance(a, _Literal):
        return a.as_type(b.type), b
    if isinstance(b, _Literal):
        return a, b.as_type(a.type)
    if a.type == b.type:
        if arithmetic and not pa.types.is_integer(a.type):
            raise Unsupported
        return a, b
    if a.type in _INTS and b.type in _INTS:
        wide = max(a.type, b.type, key=_INTS.index)
        return a.cast(wide), b.cast(wide)
    raise Unsupported
