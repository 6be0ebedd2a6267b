"""jsonb functions as the functions both engines have (engine/udfs.py): jsonb_build_object,
jsonb_build_array, to_jsonb, jsonb_agg and jsonb_object_agg (over array_agg where they aggregate),
jsonb_array_elements, jsonb_object_keys and jsonb_each (over unnest)."""
from __future__ import annotations

from sqlglot import exp

from ..syntax import transform_bottom_up

# the set-returning ones: unnest of an array the function both engines have gives
_SET_RETURNING = {"jsonb_array_elements": "rw_jsonb_elements", "jsonb_array_elements_text": "rw_jsonb_elements_text",
                  "jsonb_object_keys": "rw_jsonb_object_keys", "jsonb_each": "rw_jsonb_each",
                  "jsonb_each_text": "rw_jsonb_each_text"}
TO_JSONB = "rw_to_jsonb"  # the JSON text of a value (JSON null for NULL); the planner writes it by type


def jsonb_functions_as_calls(query: exp.Expression, context=None) -> exp.Expression:
    """`jsonb_build_object(k, v, ...)` as one call over an array of keys and an array of values
    as JSON texts; `jsonb_build_array(v, ...)` as one call over an array of values as JSON texts;
    `to_jsonb(x)` as x's JSON text in its stored form (NULL for NULL); `jsonb_agg(x [ORDER BY ...])`
    as that call over `array_agg`, which every path maintains; `jsonb_object_agg(k, v)` over an array_agg of members (one array, so each key stays
    beside its value); `jsonb_array_elements[_text](j)`, `jsonb_object_keys(j)` and
    `jsonb_each[_text](j)` as unnest of an array of j's elements, keys or (key, value) members
    (named as the call). `rw_to_jsonb(x)` stands for x's JSON text until the planner knows x's type.
    Every query nested in `query` is rewritten too; as window functions (OVER) they are left to the
    planner, which refuses them.

        SELECT k, jsonb_agg(v ORDER BY id) AS a, jsonb_build_object('k', k) AS o FROM t GROUP BY k
        -> SELECT k, RW_JSONB_ARRAY(ARRAY_AGG(RW_TO_JSONB(v) ORDER BY id)) AS a,
           RW_JSONB_OBJECT(ARRAY[CAST('k' AS TEXT)], ARRAY[RW_TO_JSONB(k)]) AS o FROM t GROUP BY k
    """
    if not any(_builder(n) for n in query.walk()):
        return query

    def rewrite(node: exp.Expression) -> exp.Expression:
        name = _builder(node)
        if name is None or isinstance(node.parent, exp.Window):
            return node
        if name in _SET_RETURNING:
            elements = exp.Anonymous(this=_SET_RETURNING[name], expressions=[node.expressions[0]])
            unnest = exp.Unnest(expressions=[elements])
            return exp.alias_(unnest, name) if isinstance(node.parent, exp.Select) else unnest
        if name == "jsonb_build_object":
            args = node.expressions
            keys = [exp.cast(a.copy(), "TEXT") for a in args[0::2]]
            values = [_to_jsonb(a) for a in args[1::2]]
            return exp.Anonymous(this="rw_jsonb_object", expressions=[exp.Array(expressions=keys),
                                                                      exp.Array(expressions=values)])
        if name == "jsonb_build_array":
            if not node.expressions:
                return exp.Cast(this=exp.Literal.string("[]"), to=exp.DataType.build("JSONB"))
            return exp.Anonymous(this="rw_jsonb_array", expressions=[
                exp.Array(expressions=[_to_jsonb(a) for a in node.expressions])])
        if name == "to_jsonb":
            (arg,) = node.expressions
            return exp.Case(ifs=[exp.If(this=exp.Is(this=arg.copy(), expression=exp.Null()), true=exp.Null())],
                            default=exp.Anonymous(this="rw_jsonb_value", expressions=[_to_jsonb(arg)]))
        if name == "jsonb_agg":
            arg = node.expressions[0]
            if isinstance(arg, exp.Order):
                inner = exp.Order(this=_to_jsonb(arg.this), expressions=[o.copy() for o in arg.expressions])
            else:
                inner = _to_jsonb(arg)
            return exp.Anonymous(this="rw_jsonb_array", expressions=[exp.ArrayAgg(this=inner)])
        member = exp.Anonymous(this="rw_jsonb_pair", expressions=[exp.cast(node.this.copy(), "TEXT"),
                                                                   _to_jsonb(node.expression)])
        return exp.Anonymous(this="rw_jsonb_object_of_pairs", expressions=[exp.ArrayAgg(this=member)])

    return transform_bottom_up(query, rewrite)  # (a builder's arguments may build too)


def _builder(node: exp.Expression) -> str | None:
    if isinstance(node, exp.JSONBObjectAgg):
        return "jsonb_object_agg"
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name == "jsonb_build_object" and len(node.expressions) % 2 == 0 or name == "jsonb_build_array":
            return name
        if name == "to_jsonb" and len(node.expressions) == 1:
            return name
        if (name == "jsonb_agg" or name in _SET_RETURNING) and len(node.expressions) == 1:
            return name
    return None


def _to_jsonb(e: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=TO_JSONB, expressions=[e.copy()])
