"""Ordered-set aggregates: `percentile_cont(f)`, `percentile_disc(f)`, `mode()` and RisingWave's
`approx_percentile(f [, relative_error])`, each `WITHIN GROUP (ORDER BY x)`. The planner reads the
call's ORDER BY key (the aggregate's argument), its direction and its constant direct arguments,
and types the result as PostgreSQL does."""
from __future__ import annotations

from sqlglot import exp

from ... import types as sqltypes
from ...errors import ProgrammingError
from ..plan import ORDERED_SET_AGGS, Agg
from ..syntax import agg_name

NUMBER_TYPES = ("smallint", "integer", "bigint", "real", "double precision")
APPROX_RELATIVE_ERROR = 0.01  # approx_percentile's default, as in RisingWave


class OrderedSets:
    """Planner methods for `f(...) WITHIN GROUP (ORDER BY x)`."""

    def ordered_set_parts(self, call: exp.WithinGroup):
        """(ORDER BY key, desc, nulls first, direct arguments) of an ordered-set aggregate call,
        unbound; refuses the other WITHIN GROUP calls, several ORDER BY keys and direct
        arguments that are not constants in range."""
        func = agg_name(call)
        if func not in ORDERED_SET_AGGS:
            raise self.refuse(f"{func}(...) WITHIN GROUP (ORDER BY ...): of the ordered-set aggregates, "
                              f"only {', '.join(ORDERED_SET_AGGS)} are maintained", call)
        order = call.expression
        keys = order.expressions if isinstance(order, exp.Order) else []
        if len(keys) != 1:
            raise ProgrammingError(f"in {self.obj!r}: {func} takes one ORDER BY key in WITHIN GROUP, not "
                                   f"{len(keys)}{self.where(call)}")
        key = keys[0]
        desc = bool(key.args.get("desc"))
        nulls_first = key.args.get("nulls_first")
        inner = call.this
        written = list(inner.expressions) if isinstance(inner, exp.Anonymous) else \
            [a for a in (inner.args.get("this"), inner.args.get("expression")) if a is not None]
        if func == "mode":
            direct: tuple[float, ...] = ()
        else:
            fraction = self.direct_constant(func, written[0], call)
            if not 0 <= fraction <= 1:
                raise ProgrammingError(f"in {self.obj!r}: percentile value {written[0].sql(dialect='postgres')} "
                                       f"is not between 0 and 1{self.where(call)}")
            direct = (fraction,)
            if func == "approx_percentile":
                error = self.direct_constant(func, written[1], call) if len(written) > 1 else APPROX_RELATIVE_ERROR
                if not 0 < error < 1:
                    raise ProgrammingError(f"in {self.obj!r}: relative error {written[1].sql(dialect='postgres')} "
                                           f"of approx_percentile is not between 0 and 1{self.where(call)}")
                direct += (error,)
        return key.this, desc, desc if nulls_first is None else bool(nulls_first), direct

    def direct_constant(self, func: str, e: exp.Expression, call: exp.Expression) -> float:
        """A direct argument's value: a number, written as a literal (signed, in parentheses or cast)."""
        inner, sign = e, 1.0
        while isinstance(inner, (exp.Paren, exp.Neg, exp.Cast)):
            if isinstance(inner, exp.Neg):
                sign = -sign
            inner = inner.this
        if isinstance(inner, exp.Array):
            raise self.refuse(f"{func} over an array of fractions (one call per fraction)", call)
        try:
            if isinstance(inner, exp.Literal):
                return sign * float(inner.this)
        except ValueError:
            pass
        raise self.refuse(f"{func} with an argument that is not a constant number: {e.sql(dialect='postgres')}", call)

    def ordered_set_type(self, a: Agg, t: str) -> str:
        """The result type: double precision for percentile_cont and approx_percentile (of a number),
        the ORDER BY key's type for percentile_disc and mode."""
        if a.func in ("percentile_cont", "approx_percentile"):
            if t not in NUMBER_TYPES and not t.startswith("numeric"):
                raise ProgrammingError(
                    f"in {self.obj!r}: function {a.func}(double precision, {sqltypes.display_name(t)}) does not "
                    f"exist: its ORDER BY key must be a number (cast it with ::double precision)")
            return "double precision"
        if t == "interval" or t.endswith("[]") or t in ("bytea", "jsonb"):
            raise self.refuse(f"{a.func.upper()}(...) WITHIN GROUP (ORDER BY a value of type {t})")
        return t
