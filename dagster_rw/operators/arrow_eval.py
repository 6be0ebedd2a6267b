"""Projections and filters evaluated with Arrow's kernels, without a SQL engine.

Most views' maps are columns, integer arithmetic, comparisons and boolean logic, and the window
start a TUMBLE or HOP computes from a timestamp. For the few rows of a small epoch, planning and
running a DuckDB query costs milliseconds; Arrow's kernels take microseconds; for a large epoch
they skip the copy into the engine and back. `evaluate` covers that subset with the engine's
semantics and gives up (None) on anything else, or when Arrow reports an error (an overflow, a
division by zero), leaving the query to DuckDB, which then decides (raises, or answers as it does).

Typing follows DuckDB's: an integer literal takes the type of the column it meets (if it fits), an
operation of two columns the wider of their types, and arithmetic is checked in that type. An
integer column times a decimal literal is computed exactly (Arrow's decimal product is wide enough
for every value) and then cast to the view's type only where no digit is lost. Timestamps are
microseconds without a time zone: a difference in microseconds is checked integer arithmetic, and
microseconds back to a timestamp stay within the years 1 to 9999.
"""
from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_ARITH = {exp.Add: "add_checked", exp.Sub: "subtract_checked", exp.Mul: "multiply_checked",
          exp.Mod: "remainder_checked"}
_INT_DECIMAL = {pa.int8(): pa.decimal128(3, 0), pa.int16(): pa.decimal128(5, 0), pa.int32(): pa.decimal128(10, 0),
                pa.int64(): pa.decimal128(19, 0)}  # the decimal DuckDB widens each integer type to
_MICROS = pa.timestamp("us")
_MIN_MICROS, _MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999  # 0001-01-01 .. 9999-12-31
_TIMESTAMP_TEXT = r"^\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d:\d\d(?:\.\d{1,6})?)?$"
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
        else:  # a decimal or a timestamp: only where the rules above place them
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
        return table.column(e.name)
    if isinstance(e, exp.Literal):
        if e.is_string:
            return _Literal(e.this)
        if e.is_int:
            return _Literal(int(e.this))
        if not e.is_string:
            return _Literal(Decimal(e.this))
        raise Unsupported
    if isinstance(e, exp.Cast):
        return _cast(table, e)
    if isinstance(e, exp.DateDiff):
        return _micros_between(table, e)
    if isinstance(e, exp.UnixToTime):
        return _from_micros(table, e)
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
    if isinstance(e, exp.Mul):
        product = _decimal_product(_value(table, e.this), _value(table, e.expression))
        if product is not None:
            return product
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
    if isinstance(a, _Literal) and isinstance(a.value, Decimal) or isinstance(b, _Literal) and isinstance(b.value, Decimal):
        raise Unsupported  # (only a product: see _decimal_product)
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


def _decimal_product(a, b):
    """An integer column times a decimal literal, exactly (None: not that shape)."""
    if isinstance(a, _Literal):
        a, b = b, a
    if isinstance(a, _Literal) or not isinstance(b, _Literal) or not isinstance(b.value, Decimal):
        return None
    if a.type not in _INT_DECIMAL:
        raise Unsupported
    digits = b.value.as_tuple()
    scale = max(0, -digits.exponent)
    precision = max(len(digits.digits), scale, 1)
    wide = _INT_DECIMAL[a.type]
    if wide.precision + precision + 1 > 38:
        raise Unsupported  # Arrow's product type would not hold every product
    return pc.multiply(a.cast(wide), pa.scalar(b.value, pa.decimal128(precision, scale)))


def _is_timestamp_type(to: exp.DataType) -> bool:
    return to.this in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ)


def _cast(table: pa.Table, e: exp.Cast):
    """CAST to TIMESTAMP of a timestamp column (nothing to do) or of a plain timestamp literal."""
    if not _is_timestamp_type(e.to):
        raise Unsupported
    if isinstance(e.this, exp.Literal) and e.this.is_string:
        text = pa.array([e.this.this])
        if not pc.all(pc.match_substring_regex(text, _TIMESTAMP_TEXT)).as_py():
            raise Unsupported
        return _Literal(text.cast(_MICROS)[0])
    v = _value(table, e.this)
    if isinstance(v, _Literal) or v.type != _MICROS:
        raise Unsupported
    return v


def _micros(v):
    if isinstance(v, _Literal):
        if not isinstance(v.value, pa.TimestampScalar) or v.value.type != _MICROS:
            raise Unsupported
        return pa.scalar(v.value.cast(pa.int64()).as_py(), pa.int64())
    if v.type != _MICROS:
        raise Unsupported
    return v.cast(pa.int64())


def _micros_between(table: pa.Table, e: exp.DateDiff):
    """DATE_DIFF('MICROSECOND', start, end): end - start in microseconds."""
    unit = e.args.get("unit")
    if unit is None or unit.name.upper() != "MICROSECOND":
        raise Unsupported
    end, start = _value(table, e.this), _value(table, e.expression)
    if isinstance(end, _Literal) and isinstance(start, _Literal):
        raise Unsupported
    return pc.subtract_checked(_micros(end), _micros(start))


def _from_micros(table: pa.Table, e: exp.UnixToTime):
    """MAKE_TIMESTAMP(microseconds) of an integer column, within the years 1 to 9999."""
    scale = e.args.get("scale")
    if scale is None or not isinstance(scale, exp.Literal) or scale.this not in ("6", 6):
        raise Unsupported
    v = _value(table, e.this)
    if isinstance(v, _Literal) or v.type != pa.int64():
        raise Unsupported
    bounds = pc.min_max(v)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and (low < _MIN_MICROS or high > _MAX_MICROS):
        raise Unsupported
    return v.cast(_MICROS)
