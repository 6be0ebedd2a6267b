"""Non-strict evaluation of a view's expressions: a value that cannot be computed is NULL, and counted.

In a batch SELECT an integer overflow or a bad cast fails the statement, as in PostgreSQL. In a
view it would stop every later epoch of the view, so (as RisingWave's streaming does) the failing
expression gives NULL, the row is kept, and the failure is recorded (`rw_view_errors`).

`non_strict` rewrites a projection's expressions into forms both engines evaluate without failing,
and gives for each expression that can fail a `Check`: a condition true on exactly the rows where
the strict form would have failed. Each form is written in SQL that DuckDB and Spark both run:

    CAST(s AS INT)  ->  TRY_CAST(s AS INT)                 fails where s IS NOT NULL and the result is NULL
    a + b (bigint)  ->  TRY_CAST(CAST(a AS DECIMAL(19, 0)) + CAST(b AS DECIMAL(19, 0)) AS BIGINT)
                                                           fails where a, b are not NULL and the result is
    a / b           ->  a / NULLIF(b, 0) (as before)       fails where a IS NOT NULL and b = 0
    a % b (integer) ->  a % NULLIF(b, 0)                   likewise

Integer arithmetic is computed exactly in a decimal wide enough for any two BIGINTs (their sum
has 20 digits, their product 38) and cast back to its type. A check inside a CASE branch (or a
later argument of COALESCE) holds only on the rows that evaluate that branch, as the strict form
would fail only there.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

_INTEGERS = {"SMALLINT", "INTEGER", "BIGINT"}
_TEXT = {"VARCHAR"}
_WIDER = {"SMALLINT": {"INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE"},
          "INTEGER": {"BIGINT", "HUGEINT", "FLOAT", "DOUBLE"}, "BIGINT": {"HUGEINT", "FLOAT", "DOUBLE"}}
_NAMES = {"SMALLINT": "smallint", "INTEGER": "integer", "BIGINT": "bigint"}
_WIDE = exp.DataType.build("DECIMAL(19, 0)")  # holds every BIGINT exactly
_OPERATORS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}


@dataclass
class Check:
    """One expression that can fail on a row's values."""

    condition: exp.Expression  # true on the rows where the strict expression fails (child columns)
    example: exp.Expression  # the failing values, as text
    error: str  # what failed, in PostgreSQL's words ("bigint out of range")
    expression: str  # the failing expression as written over the input's column names
    in_where: bool  # part of the filter: evaluated on every row (else only on the rows kept)


@dataclass
class NonStrict:
    """A projection's expressions and filter in forms that never fail, and their checks."""

    exprs: list[exp.Expression]
    where: exp.Expression | None
    checks: list[Check] = field(default_factory=list)


def non_strict(exprs: list[exp.Expression], where: exp.Expression | None,
               duck_types: Callable[[list[exp.Expression]], list[str]],
               column_names: dict[str, str]) -> NonStrict | None:
    """The non-strict form of a projection over columns `c<i>` (named `column_names[c<i>]` to the
    user), or None when none of its expressions can fail. `duck_types` gives DuckDB's types of
    expressions over the same columns (spelt as DuckDB spells them)."""
    trees = [e.copy() for e in exprs] + ([where.copy()] if where is not None else [])
    candidates = [n for t in trees for n in t.walk() if _may_fail(n)]
    if not candidates:
        return None
    operands = [n.this if isinstance(n, (exp.Cast, exp.Neg)) else n for n in candidates]
    types = duck_types([n.copy() for n in candidates] + [n.copy() for n in operands])
    for node, result, operand in zip(candidates, types, types[len(candidates):]):
        node.meta["rw_type"], node.meta["rw_operand_type"] = result, operand
    rewriter = _Rewriter(column_names)
    out = []
    for i, tree in enumerate(trees):
        rewriter.in_where = where is not None and i == len(trees) - 1
        out.append(rewriter.visit(tree, None))
    if not rewriter.checks:
        return None
    return NonStrict(out[:len(exprs)], out[len(exprs)] if where is not None else None, rewriter.checks)


def _may_fail(node: exp.Expression) -> bool:
    if isinstance(node, exp.Cast):
        return not isinstance(node, exp.TryCast)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Mod)):
        return True
    return isinstance(node, exp.Div) and isinstance(node.expression, exp.Nullif)


def _and(*conds: exp.Expression | None) -> exp.Expression | None:
    parts = [c for c in conds if c is not None]
    if not parts:
        return None
    out = parts[0]
    for c in parts[1:]:
        out = exp.And(this=exp.Paren(this=out), expression=exp.Paren(this=c))
    return out


def _is_true(cond: exp.Expression) -> exp.Expression:
    return exp.Coalesce(this=exp.Paren(this=cond.copy()), expressions=[exp.false()])


def _not_true(cond: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Paren(this=_is_true(cond)))


def _not_null(e: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Is(this=exp.Paren(this=e.copy()), expression=exp.Null()))


def _is_null(e: exp.Expression) -> exp.Expression:
    return exp.Is(this=exp.Paren(this=e.copy()), expression=exp.Null())


def _text(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=exp.Paren(this=e.copy()), to=exp.DataType.build("VARCHAR"))


class _Rewriter:
    def __init__(self, column_names: dict[str, str]):
        self.column_names = column_names
        self.checks: list[Check] = []
        self.in_where = False

    def visit(self, node: exp.Expression, guard: exp.Expression | None) -> exp.Expression:
        """`node` in its non-strict form (children first); checks met under `guard` (the condition
        on which the strict evaluation reaches `node`) are recorded with it."""
        original = node.copy() if _may_fail(node) else None
        if isinstance(node, exp.Case):
            return self._case(node, guard)
        if isinstance(node, exp.Coalesce):
            return self._coalesce(node, guard)
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, self.visit(value, guard))
            elif isinstance(value, list):
                node.set(key, [self.visit(v, guard) if isinstance(v, exp.Expression) else v for v in value])
        if original is None:
            return node
        return self._fallible(node, original, guard)

    def _case(self, node: exp.Case, guard):
        operand = node.args.get("this")
        if operand is not None:
            node.set("this", operand := self.visit(operand, guard))
        taken: list[exp.Expression] = []  # conditions of the branches before this one
        ifs = []
        for branch in node.args.get("ifs") or []:
            reach = _and(guard, *[_not_true(c) for c in taken])
            cond = self.visit(branch.this, reach)
            branch.set("this", cond)
            test = cond if operand is None else exp.EQ(this=operand.copy(), expression=cond.copy())
            branch.set("true", self.visit(branch.args["true"], _and(reach, _is_true(test))))
            taken.append(test)
            ifs.append(branch)
        node.set("ifs", ifs)
        default = node.args.get("default")
        if default is not None:
            node.set("default", self.visit(default, _and(guard, *[_not_true(c) for c in taken])))
        return node

    def _coalesce(self, node: exp.Coalesce, guard):
        first = self.visit(node.this, guard)
        node.set("this", first)
        before = [first]
        rest = []
        for arg in node.expressions:
            v = self.visit(arg, _and(guard, *[_is_null(b) for b in before]))
            rest.append(v)
            before.append(v)
        node.set("expressions", rest)
        return node

    def _fallible(self, node: exp.Expression, original: exp.Expression, guard) -> exp.Expression:
        result = original.meta.get("rw_type", "")
        operand = original.meta.get("rw_operand_type", "")
        if isinstance(node, exp.Cast):
            if result in _TEXT or result == operand or (operand in _WIDER and result in _WIDER[operand]):
                return node  # nothing to fail: to text, to the same type, to a wider number
            value = exp.TryCast(**{k: v for k, v in node.args.items()})
            failed = _and(_not_null(node.this), _is_null(value))
            error = (f"invalid input syntax for type {result.lower()}" if operand in _TEXT
                     else f"{result.lower()} out of range")
            return self._record(value, failed, _text(node.this), error, original, guard)
        if isinstance(node, exp.Div):
            divisor = node.expression.this
            failed = _and(_not_null(node.this), exp.EQ(this=exp.Paren(this=divisor.copy()),
                                                       expression=exp.Literal.number(0)))
            return self._record(node, failed, _text(node.this), "division by zero", original, guard)
        if result not in _INTEGERS:
            return node  # decimal, floating point, time arithmetic: not checked here
        if isinstance(node, exp.Mod):
            divisor = node.expression
            node.set("expression", exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
            failed = _and(_not_null(node.this), exp.EQ(this=exp.Paren(this=divisor.copy()),
                                                       expression=exp.Literal.number(0)))
            return self._record(node, failed, _text(node.this), "division by zero", original, guard)
        to = exp.DataType.build(result)
        if isinstance(node, exp.Neg):
            wide = exp.Neg(this=exp.Cast(this=exp.Paren(this=node.this), to=_WIDE.copy()))
            value = exp.TryCast(this=wide, to=to)
            failed = _and(_not_null(node.this), _is_null(value))
            return self._record(value, failed, _text(node.this), f"{_NAMES[result]} out of range", original, guard)
        a, b = node.this, node.expression
        wide = type(node)(this=exp.Cast(this=exp.Paren(this=a), to=_WIDE.copy()),
                          expression=exp.Cast(this=exp.Paren(this=b), to=_WIDE.copy()))
        value = exp.TryCast(this=wide, to=to)
        failed = _and(_not_null(a), _not_null(b), _is_null(value))
        example = exp.DPipe(this=exp.DPipe(this=_text(a), expression=exp.Literal.string(f" {_OPERATORS[type(node)]} ")),
                            expression=_text(b))
        return self._record(value, failed, example, f"{_NAMES[result]} out of range", original, guard)

    def _record(self, value, failed, example, error: str, original: exp.Expression, guard) -> exp.Expression:
        def unguarded(n):
            if isinstance(n, exp.Nullif) and isinstance(n.parent, exp.Div):
                return n.this  # the guard division is written with (a / b: a / NULLIF(b, 0))
            return n

        def user_names(n):
            if isinstance(n, exp.Column) and n.name in self.column_names:
                return exp.column(self.column_names[n.name], quoted=not self.column_names[n.name].isidentifier())
            return n

        written = original.transform(unguarded).transform(user_names).sql(dialect="postgres")
        self.checks.append(Check(_and(guard, failed), example, error, written, self.in_where))
        if original.type is not None:  # the dialects write integer division from the operands' types
            value.type = original.type
        return value
