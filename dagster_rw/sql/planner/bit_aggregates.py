"""BIT_AND, BIT_OR and BIT_XOR as counts per bit."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError
from ..syntax import BIT_AGGS, transform_top_down
from .scope import Scope

BIT_WIDTHS = {"smallint": 16, "integer": 32, "bigint": 64}


class BitAggregates:
    """Planner methods for the bitwise aggregates of a SELECT."""

    def expand_bit_aggregates(self, q: exp.Select, node, scope: Scope, select_items):
        """`q` and its select items with each bit_and / bit_or / bit_xor (of smallint, integer or
        bigint, as in PostgreSQL) written as counts, which every aggregate path maintains under
        deletes as well as inserts: per bit, how many of the group's non-NULL values set it. The
        bit is set in bit_or's answer when that count is above zero, in bit_and's when it equals
        the count of values, in bit_xor's when it is odd; NULL when there is no value. DISTINCT
        changes neither bit_and nor bit_or (bit_xor(DISTINCT ...) is refused); FILTER (WHERE c)
        makes x NULL where c does not hold. As window functions (OVER) they are refused by the
        window planner.

            SELECT k, bit_or(v) FROM t GROUP BY k   (v smallint)
            -> SELECT k, CAST(CASE WHEN count(v) > 0 THEN ((CASE WHEN count(NULLIF((v & 1), 0)) > 0 THEN 1
               ELSE 0 END) | (CASE WHEN count(NULLIF((v & 2), 0)) > 0 THEN 2 ELSE 0 END)) | ... | (CASE WHEN
               count(NULLIF((v & (-32767 - 1)), 0)) > 0 THEN -32767 - 1 ELSE 0 END) END AS SMALLINT) AS bit_or
               FROM t GROUP BY k
        """
        def has_bit_agg(e):
            return e is not None and any(type(n) in BIT_AGGS and not isinstance(n.parent, exp.Window)
                                         for n in e.walk())

        having = q.args["having"].this if q.args.get("having") else None
        order = q.args["order"] if q.args.get("order") else None
        if not (any(has_bit_agg(e) for e, _ in select_items) or has_bit_agg(having) or has_bit_agg(order)):
            return q, select_items

        def rewrite(n):
            when = None
            call = n
            if isinstance(n, exp.Filter) and type(n.this) in BIT_AGGS and isinstance(n.expression, exp.Where):
                when, call = n.expression.this, n.this
            if type(call) not in BIT_AGGS or isinstance(n.parent, exp.Window):
                return n
            return self.bit_aggregate_as_counts(call, when, node, scope)

        q = q.copy()
        if having is not None:
            q.args["having"].set("this", transform_top_down(q.args["having"].this, rewrite))
        if order is not None:
            q.set("order", transform_top_down(q.args["order"], rewrite))
        return q, [(transform_top_down(e, rewrite), name) for e, name in select_items]

    def bit_aggregate_as_counts(self, call, when, node, scope: Scope) -> exp.Expression:
        name = BIT_AGGS[type(call)]
        arg = call.this
        if isinstance(arg, exp.Distinct):
            if name == "bit_xor" or len(arg.expressions) != 1:
                raise self.refuse(f"{name.upper()}(DISTINCT ...)", call)
            arg = arg.expressions[0]  # the same bits whether each value counts once or more
        if arg is None or isinstance(arg, (exp.Star, exp.Order)) or \
                any(v for k, v in call.args.items() if k != "this"):
            raise self.refuse(f"this {name}() call: {call.sql(dialect='postgres')}", call)
        t = self.type_of(node, self.bind(arg, scope))
        if t not in BIT_WIDTHS:
            raise ProgrammingError(f"in {self.obj!r}: function {name}({t}) does not exist: bit_and, bit_or and bit_xor take "
                                   f"smallint, integer or bigint{self.where(call)}")
        if when is not None:
            arg = exp.Case(ifs=[exp.If(this=when.copy(), true=arg.copy())])
        x = exp.Paren(this=arg.copy())
        width = BIT_WIDTHS[t]
        values = exp.Count(this=arg.copy())
        bits = []
        for b in range(width):
            # the bit's mask; the sign bit's is the type's smallest value, written so that no
            # literal leaves BIGINT's range
            mask = exp.Sub(this=exp.Literal.number(-(2 ** b) + 1), expression=exp.Literal.number(1)) \
                if b == width - 1 else exp.Literal.number(2 ** b)
            hits = exp.Count(this=exp.Nullif(this=exp.Paren(this=exp.BitwiseAnd(this=x.copy(), expression=mask.copy())),
                                             expression=exp.Literal.number(0)))
            if name == "bit_or":
                on = exp.GT(this=hits, expression=exp.Literal.number(0))
            elif name == "bit_and":
                on = exp.EQ(this=hits, expression=values.copy())
            else:
                on = exp.EQ(this=exp.Mod(this=hits, expression=exp.Literal.number(2)), expression=exp.Literal.number(1))
            bits.append(exp.Paren(this=exp.Case(ifs=[exp.If(this=on, true=exp.cast(mask, "BIGINT"))],
                                                default=exp.cast(exp.Literal.number(0), "BIGINT"))))
        while len(bits) > 1:  # a balanced tree of ORs: shallow, as later rewrites walk it top-down
            bits = [exp.Paren(this=exp.BitwiseOr(this=a, expression=b)) for a, b in zip(bits[::2], bits[1::2])]
        answer = bits[0]
        some = exp.GT(this=values, expression=exp.Literal.number(0))
        return exp.cast(exp.Case(ifs=[exp.If(this=some, true=answer)]), t.upper())
