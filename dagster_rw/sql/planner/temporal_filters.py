"""Temporal filters (RisingWave's): the conjuncts of a WHERE that compare a time expression of the
input's columns with now() plus or minus a constant, planned as TemporalFilter nodes over the
rest of the query's FROM and WHERE.

A conjunct qualifies when it is a comparison (<, <=, >, >=, or BETWEEN, taken as two) with now()
(or current_timestamp) on exactly one side, that side never decreasing as now() grows (now(),
plus or minus a constant, cast, or truncated with date_trunc) and the other side an expression
of columns of type DATE, TIMESTAMP or TIMESTAMPTZ. now() anywhere else in a view (under OR, in a
join condition, in HAVING, in the select list) stays refused by Binding.check_deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from ...errors import ProgrammingError
from ..plan import NOW, Col, Node, TemporalFilter, TimeBound

_OPS = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
# what a constant next to now() may be made of: literals, intervals, arithmetic, casts
_CONSTANT = (exp.Literal, exp.Interval, exp.Var, exp.Neg, exp.Paren, exp.Mul, exp.Div, exp.Add, exp.Sub,
             exp.Cast, exp.DataType, exp.DataTypeParam)
_TIME_TYPES = ("date", "timestamp", "timestamptz")


def is_now(node: exp.Expression) -> bool:
    """now() or current_timestamp: the barrier time of the epoch a view's step reaches."""
    return isinstance(node, exp.CurrentTimestamp) or (
        isinstance(node, exp.Anonymous) and node.name.lower() in ("now", "current_timestamp"))


def _has_now(e: exp.Expression) -> bool:
    return any(is_now(n) for n in e.walk())


def _constant(e: exp.Expression) -> bool:
    return all(isinstance(n, _CONSTANT) for n in e.walk())


def _non_decreasing(e: exp.Expression) -> exp.Expression | None:
    """`e` with now() written as the column rw_now, when `e` never decreases as now() grows: now()
    itself, plus or minus a constant, in parentheses, cast to a time, or truncated (date_trunc);
    else None."""
    if is_now(e):
        return exp.column(NOW)
    if isinstance(e, exp.Paren):
        inner = _non_decreasing(e.this)
        return exp.Paren(this=inner) if inner is not None else None
    if isinstance(e, exp.Cast) and e.to.this in (exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ, exp.DType.DATE):
        inner = _non_decreasing(e.this)
        return exp.Cast(this=inner, to=e.to.copy()) if inner is not None else None
    if isinstance(e, (exp.TimestampTrunc, exp.DateTrunc)) and isinstance(e.args.get("unit"), (exp.Var, exp.Literal)):
        inner = _non_decreasing(e.this)
        if inner is None:
            return None
        out = e.copy()
        out.set("this", inner)
        return out
    if isinstance(e, exp.Add):
        for grows, const in ((e.this, e.expression), (e.expression, e.this)):
            inner = _non_decreasing(grows)
            if inner is not None and _constant(const):
                return exp.Add(this=inner, expression=const.copy())
        return None
    if isinstance(e, exp.Sub) and _constant(e.expression):
        inner = _non_decreasing(e.this)
        return exp.Sub(this=inner, expression=e.expression.copy()) if inner is not None else None
    return None


@dataclass
class TemporalConjunct:
    compared: exp.Expression  # the side of the input's columns, as written
    op: str  # compared <op> bound
    bound: exp.Expression  # the side of now(), now() written as rw_now
    written: exp.Expression  # the comparison as written (for positions in errors)


def _comparisons(conjunct: exp.Expression) -> list[exp.Expression]:
    """A conjunct, with `x BETWEEN a AND b` as `x >= a` and `x <= b` when a bound holds now()."""
    if isinstance(conjunct, exp.Between) and not conjunct.args.get("symmetric") and (
            _has_now(conjunct.args["low"]) or _has_now(conjunct.args["high"])):
        low = exp.GTE(this=conjunct.this.copy(), expression=conjunct.args["low"].copy())
        high = exp.LTE(this=conjunct.this.copy(), expression=conjunct.args["high"].copy())
        for part in (low, high):
            part.meta.update(conjunct.meta)
        return [low, high]
    return [conjunct]


def temporal_conjunct(e: exp.Expression) -> TemporalConjunct | None:
    """`e` as a temporal filter, or None when it is not one of the shapes a view maintains."""
    op = _OPS.get(type(e))
    if op is None:
        return None
    left, right = e.this, e.expression
    if _has_now(left) == _has_now(right):
        return None
    compared, side = (right, left) if _has_now(left) else (left, right)
    if _has_now(left):
        op = _FLIPPED[op]
    if compared.find(exp.Column) is None:
        return None
    bound = _non_decreasing(side)
    return TemporalConjunct(compared, op, bound, e) if bound is not None else None


class TemporalFilters:
    """Planner methods that take temporal filters out of a WHERE and plan them."""

    def split_temporal(self, conjuncts: list[exp.Expression]) -> tuple[list[TemporalConjunct], list[exp.Expression]]:
        """The WHERE conjuncts that are temporal filters, and the others (where a now() left over
        is refused when bound)."""
        temporal, rest = [], []
        for conjunct in conjuncts:
            parts = _comparisons(conjunct) if _has_now(conjunct) else [conjunct]
            found = [temporal_conjunct(p) for p in parts]
            if not any(found):
                rest.append(conjunct)
                continue
            temporal.extend(f for f in found if f is not None)
            rest.extend(p for p, f in zip(parts, found) if f is None)
        return temporal, rest

    def temporal_filter(self, node: Node, scope, conjuncts: list[TemporalConjunct]) -> Node:
        """A TemporalFilter per compared expression, over `node` (bounds on one expression share
        a node and its state); an expression that is not a column of a TIMESTAMP or TIMESTAMPTZ
        type is computed first, as a hidden column."""
        by_compared: dict[str, tuple[int, list[TimeBound]]] = {}
        for c in conjuncts:
            compared = self.bind(c.compared, scope)
            kind = self.type_of(node, compared)
            if kind not in _TIME_TYPES:
                raise self.refuse(f"a temporal filter comparing {kind} ({c.compared.sql(dialect='postgres')}) with "
                                  "now(): the compared side must be a date or a timestamp", c.written)
            self.check_bound_type(c)
            key = compared.sql()
            if key not in by_compared:
                plain = isinstance(compared, exp.Column) and kind != "date"
                if plain:
                    column = int(compared.name[1:])
                else:
                    if kind == "date":
                        compared = exp.Cast(this=compared, to=exp.DataType.build("timestamp"))
                    node = self.with_columns(node, [compared])
                    column = len(node.columns) - 1
                by_compared[key] = (column, [])
            by_compared[key][1].append(TimeBound(c.op, c.bound))
        for column, bounds in by_compared.values():
            node = TemporalFilter(columns=[Col(c.name, c.type, c.hidden) for c in node.columns],
                                  stream_key=list(node.stream_key), child=node, column=column, bounds=bounds)
        return node

    def check_bound_type(self, c: TemporalConjunct) -> None:
        """Refuse a now() side that is not a time (now() plus a number, say)."""
        now = pa.table({NOW: pa.array([], pa.timestamp("us", tz="UTC"))})
        try:
            (_, kind), = self.engine.describe(f"SELECT {c.bound.sql(dialect='duckdb')} AS b FROM t", t=now)
        except ProgrammingError:
            kind = None
        if kind not in ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE"):
            raise self.refuse(f"a temporal filter whose now() side ({c.written.sql(dialect='postgres')}) is not a time "
                              "(now() plus or minus a constant interval)", c.written)
