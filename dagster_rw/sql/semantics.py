"""PostgreSQL semantics that DuckDB's dialect does not share, applied to parsed expressions.

Integer division: in PostgreSQL `7 / 2` is 3 (it truncates) where DuckDB's `/` gives 3.5. sqlglot
writes the PostgreSQL meaning for DuckDB once the operands carry their types, so expressions are
type-annotated against the columns they read before they are rendered. Division by zero in a view's
expressions is NULL, as in RisingWave's streaming (DuckDB would give infinity, or fail to cast it).
"""
from __future__ import annotations

import json
import re

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from .. import jsonb
from .. import types as sqltypes
from ..engine import udfs
from ..errors import ProgrammingError
from .syntax import transform_bottom_up

_SCOPE = "rw_t"


def typed_expression(expression: exp.Expression, column_types: dict[str, str]) -> exp.Expression:
    """`expression` (over unqualified columns) with sqlglot types annotated from `column_types`."""
    if expression.find(exp.Div) is None:
        return expression
    out = expression.copy()
    columns = list(out.find_all(exp.Column))
    for col in columns:
        col.set("table", exp.to_identifier(_SCOPE))
    try:
        holder = exp.Select(expressions=[out], from_=exp.From(this=exp.to_table(_SCOPE)))
        annotate_types(holder, schema={_SCOPE: column_types}, dialect="postgres")
    finally:
        for col in columns:
            col.set("table", None)
    out.parent = None
    for div in list(out.find_all(exp.Div)):
        divisor = div.expression
        if not (isinstance(divisor, exp.Literal) and divisor.is_number and float(divisor.name) != 0):
            # a division by zero in a streaming expression gives NULL, as in RisingWave (which logs it
            # and goes on): never an engine's error or infinity, so every path gives the same row
            guarded = exp.Nullif(this=divisor, expression=exp.Literal.number(0))
            guarded.type = divisor.type  # the dialects write integer division from the operands' types
            div.set("expression", guarded)
    return out


def regexp_match_groups(expression: exp.Expression) -> exp.Expression:
    """PostgreSQL's `regexp_match(s, pattern)[n]` as `CASE WHEN s matches pattern THEN
    regexp_extract(s, pattern, n) END`, which both DuckDB and Spark write (Nexmark q21). One
    difference remains: a group that did not take part in the match (`(a)|(b)`) is '' here, NULL in
    PostgreSQL. Without a subscript (the whole array) regexp_match stays as it is, and is refused."""

    def rewrite(node):
        if not isinstance(node, exp.Bracket) or len(node.expressions) != 1:
            return node
        call = node.this.this if isinstance(node.this, exp.Paren) else node.this
        index = node.expressions[0]
        if not (isinstance(call, exp.Anonymous) and call.name.lower() == "regexp_match"
                and len(call.expressions) == 2 and isinstance(index, exp.Literal) and not index.is_string):
            return node
        group = int(index.name) + 1  # sqlglot keeps subscripts 0-based (PostgreSQL's [2] is 1)
        if group < 1:
            return exp.null()
        text, pattern = call.expressions
        return exp.Case(ifs=[exp.If(
            this=exp.RegexpLike(this=text.copy(), expression=pattern.copy()),
            true=exp.RegexpExtract(this=text.copy(), expression=pattern.copy(),
                                   group=exp.Literal.number(group)))])

    if not any(isinstance(f, exp.Anonymous) and f.name.lower() == "regexp_match"
               for f in expression.find_all(exp.Anonymous)):
        return expression
    return expression.copy().transform(rewrite)


def ordered_sets_as_postgresql(query: exp.Expression) -> exp.Expression:
    """The ordered-set aggregates of a batch query as views compute them: percentile_cont of a
    NUMERIC key as double precision (DuckDB would interpolate decimals), and RisingWave's
    approx_percentile(f [, relative error]), which neither engine has, as percentile_disc(f) cast to
    double precision (exact, within any relative error)."""

    def rewrite(node):
        if not isinstance(node, exp.WithinGroup) or not isinstance(node.expression, exp.Order):
            return node
        inner = node.this
        if isinstance(inner, exp.PercentileCont):
            for key in node.expression.expressions:
                key.set("this", exp.cast(key.this, exp.DataType.build("DOUBLE")))
            return node
        if isinstance(inner, exp.Anonymous) and inner.name.lower() == "approx_percentile" and inner.expressions:
            disc = exp.WithinGroup(this=exp.PercentileDisc(this=inner.expressions[0]), expression=node.expression)
            return exp.cast(disc, exp.DataType.build("DOUBLE"))
        return node

    if query.find(exp.WithinGroup) is None:
        return query
    return query.copy().transform(rewrite)


def typed_query(query: exp.Expression, schema: dict[str, dict[str, str]]) -> exp.Expression:
    """A batch query annotated with types (columns qualified; sqlglot may name unnamed outputs
    `_col_<i>`, which callers map back to PostgreSQL's names); regexp_match groups rewritten."""
    query = ordered_sets_as_postgresql(regexp_match_groups(query))
    if query.find(exp.Div) is None:
        return query
    try:
        q = qualify(query.copy(), schema=schema, dialect="postgres", validate_qualify_columns=False,
                    quote_identifiers=False, identify=False)
        annotate_types(q, schema=schema, dialect="postgres")
    except Exception:  # anything sqlglot cannot qualify runs as written
        return query
    return q


def with_ties_as_rank(query: exp.Expression) -> exp.Expression:
    """FETCH FIRST n ROWS WITH TIES, which DuckDB's and Spark's dialects lack, as a filter on
    rank() over the ORDER BY: the first n rows and every row tied with the n-th.

    A plain SELECT gets `QUALIFY rank() OVER (ORDER BY ...) <= n`, with ORDER BY positions and
    output aliases replaced by the expressions they name. SELECT DISTINCT and set operations are
    ranked after they run (QUALIFY would rank before DISTINCT), so there the ORDER BY must name
    output columns, as PostgreSQL requires anyway."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        fetch = node.args.get("limit")
        options = fetch.args.get("limit_options") if isinstance(fetch, exp.Fetch) else None
        if options is None or not options.args.get("with_ties"):
            return node
        order = node.args.get("order")
        if order is None:
            raise ProgrammingError("WITH TIES cannot be specified without ORDER BY clause")
        if node.args.get("offset") is not None:
            raise ProgrammingError("not supported: OFFSET with FETCH FIRST ... WITH TIES")
        count = fetch.args.get("count") or exp.Literal.number(1)
        node = node.copy()
        node.set("limit", None)
        wrap = not isinstance(node, exp.Select) or bool(node.args.get("distinct"))
        outputs = node.named_selects
        items = node.selects
        ordered = []
        for o in order.expressions:
            target = o.this
            k = None
            if isinstance(target, exp.Literal) and not target.is_string and 1 <= int(target.name) <= len(items):
                k = int(target.name) - 1
            elif isinstance(target, exp.Column) and not target.table and target.name in outputs:
                k = outputs.index(target.name)
            elif wrap:
                raise ProgrammingError("FETCH FIRST ... WITH TIES over SELECT DISTINCT or a set operation: "
                                       f"ORDER BY {target.sql(dialect='postgres')} must name an output column")
            if k is not None:
                target = exp.column(outputs[k], quoted=True) if wrap else items[k].unalias()
            key = o.copy()
            key.set("this", target.copy())
            ordered.append(key)
        rank = exp.Window(this=exp.Anonymous(this="rank"), order=exp.Order(expressions=ordered))
        test = exp.LTE(this=rank, expression=count.copy())
        if wrap:
            node.set("order", None)
            outer = exp.select("*").from_(exp.Subquery(this=node, alias=exp.TableAlias(
                this=exp.to_identifier("rw_ties"))))
            outer.set("qualify", exp.Qualify(this=test))
            outer.set("order", exp.Order(expressions=[o.copy() for o in ordered]))
            return outer
        qualify = node.args.get("qualify")
        node.set("qualify", exp.Qualify(this=test if qualify is None else exp.and_(qualify.this, test)))
        return node

    return query.transform(rewrite) if query.find(exp.Fetch) else query


JSON_TYPES = (exp.DType.JSON, exp.DType.JSONB)


def jsonb_constants(expression: exp.Expression) -> exp.Expression:
    """Every constant jsonb (`'{"b": 1, "a": 2}'::jsonb`) in its one stored form (dagster_rw.jsonb),
    so that it compares equal to the same value in a column; an invalid one is refused here."""

    def rewrite(node):
        if isinstance(node, exp.Cast) and node.to.this in JSON_TYPES and isinstance(node.this, exp.Literal) \
                and node.this.is_string:
            return exp.Cast(this=exp.Literal.string(jsonb.normalize(node.this.this)), to=node.to.copy())
        return node

    if not any(isinstance(c.to, exp.DataType) and c.to.this in JSON_TYPES for c in expression.find_all(exp.Cast)):
        return expression
    return expression.transform(rewrite)


# PostgreSQL's jsonb operators as the Python functions both engines call (dagster_rw.jsonb,
# engine/udfs.py): `->` and `->>` with a constant key or index, `#>` and `#>>` with a constant path
JSONB_RESULTS = tuple(name for name, (_, _, result, _) in udfs.FUNCTIONS.items() if result == "JSON")
_JSONB_CALLS = {exp.JSONExtract: "rw_jsonb_get", exp.JSONExtractScalar: "rw_jsonb_get_text",
                exp.JSONBExtract: "rw_jsonb_path", exp.JSONBExtractScalar: "rw_jsonb_path_text"}
# `?`, `?|`, `?&` and `#-`, which sqlglot reads as nodes of their own
JSONB_KEY_OPERATORS = {exp.JSONBContainsTopKey: "rw_jsonb_exists",
                       exp.JSONBContainsAnyTopKeys: "rw_jsonb_exists_any",
                       exp.JSONBContainsAllTopKeys: "rw_jsonb_exists_all",
                       exp.JSONBDeleteAtPath: "rw_jsonb_delete_path"}


# jsonb functions of one argument, each a call of the function both engines have under its name
JSONB_READERS = ("jsonb_typeof", "jsonb_array_length", "jsonb_strip_nulls", "jsonb_pretty")
_JSONB_PATHS = ("jsonb_extract_path", "jsonb_extract_path_text")
_JSONB_SETTERS = ("jsonb_set", "jsonb_insert")


def jsonb_operators(expression: exp.Expression, refuse) -> exp.Expression:
    """`expression` with PostgreSQL's jsonb operators (`->`, `->>`, `#>`, `#>>`, `#-`, `?`, `?|`,
    `?&`), jsonb_typeof, jsonb_array_length, jsonb_strip_nulls, jsonb_pretty,
    jsonb_extract_path[_text], jsonb_set and jsonb_insert (a constant path) as calls of the
    functions both engines have; `refuse(node, what)` raises for an operand that is not a constant.
    (`||` and `-` depend on their operands' types: jsonb_typed_operators.)"""
    if not any(isinstance(n, (*_JSONB_CALLS, *JSONB_KEY_OPERATORS))
               or _is_call(n, *JSONB_READERS, *_JSONB_PATHS, *_JSONB_SETTERS) for n in expression.walk()):
        return expression

    def translate(node: exp.Expression) -> exp.Expression:
        if _is_call(node, *_JSONB_SETTERS) and len(node.expressions) in (3, 4):
            name = node.name.lower()
            target, path, new, *flag = node.expressions
            if not (isinstance(path, exp.Literal) and path.is_string):
                refuse(node, f"{name}(...): a jsonb path that is not a constant")
            if flag and not isinstance(flag[0], exp.Boolean):
                what = "create_if_missing" if name == "jsonb_set" else "insert_after"
                refuse(node, f"{name}(...): {what} that is not a constant true or false")
            jsonb.check_path(path.this)
            spec = {"path": jsonb.path_keys(path.this)}
            if name == "jsonb_set":
                spec["create"] = flag[0].this if flag else True
            else:
                spec["after"] = flag[0].this if flag else False
            return exp.Anonymous(this="rw_" + name, expressions=[target, exp.Literal.string(json.dumps(spec)),
                                                                 _jsonb_operand(new)])
        if _is_call(node, *JSONB_READERS) and len(node.expressions) == 1:
            return exp.Anonymous(this="rw_" + node.name.lower(), expressions=list(node.expressions))
        if _is_call(node, *_JSONB_PATHS) and node.expressions:
            keys = node.expressions[1:]
            if not all(isinstance(k, exp.Literal) and k.is_string for k in keys):
                refuse(node, f"{node.name.lower()}(...): a jsonb path that is not constant keys")
            return exp.Anonymous(this="rw_" + node.name.lower(), expressions=[
                node.expressions[0], exp.Literal.string(json.dumps([k.this for k in keys]))])
        name = JSONB_KEY_OPERATORS.get(type(node))
        if name == "rw_jsonb_exists":
            return exp.Anonymous(this=name, expressions=[node.this, node.expression])
        if name is not None:
            keys = constant_text_array(node.expression)
            if keys is None:
                shown = "a jsonb path" if name == "rw_jsonb_delete_path" else "an array of keys"
                refuse(node, f"{node.sql(dialect='postgres')}: {shown} that is not a constant")
            return exp.Anonymous(this=name, expressions=[node.this, exp.Literal.string(json.dumps(keys))])
        name = _JSONB_CALLS.get(type(node))
        if name is None:
            return node
        operand = node.expression
        if name in ("rw_jsonb_get", "rw_jsonb_get_text"):
            key = _member_key(operand)
            if key is None:
                refuse(node, f"{node.sql(dialect='postgres')}: a jsonb member or element chosen by an expression "
                             "(a constant key or index is maintained)")
        else:
            if not (isinstance(operand, exp.Literal) and operand.is_string):
                refuse(node, f"{node.sql(dialect='postgres')}: a jsonb path that is not a constant")
            jsonb.check_path(operand.this)
            key = operand.this
        return exp.Anonymous(this=name, expressions=[node.this, exp.Literal.string(key)])

    return transform_bottom_up(expression, translate)  # (`j -> 'a' -> 'b'`: the inner call first)


def constant_text_array(e: exp.Expression) -> list | None:
    """The elements of a constant text array (`'{a,b}'`, `'{a,b}'::text[]`, `ARRAY['a', 'b']`; NULL
    elements as None), or None for anything else."""
    if isinstance(e, exp.Paren):
        return constant_text_array(e.this)
    if isinstance(e, exp.Cast) and e.to.this == exp.DType.ARRAY:
        e = e.this
    if isinstance(e, exp.Literal) and e.is_string:
        jsonb.check_path(e.this)
        return jsonb.path_keys(e.this)
    if isinstance(e, exp.Array) and all(isinstance(x, exp.Null) or (isinstance(x, exp.Literal) and x.is_string)
                                        for x in e.expressions):
        return [None if isinstance(x, exp.Null) else x.this for x in e.expressions]
    return None


def _jsonb_operand(e: exp.Expression) -> exp.Expression:
    """A value given as jsonb: a string constant in its stored form (refused if not JSON)."""
    if isinstance(e, exp.Literal) and e.is_string:
        return exp.Literal.string(jsonb.normalize(e.this))
    return e


def _is_call(node: exp.Expression, *names: str) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() in names


def _member_key(operand: exp.Expression) -> str | None:
    """The JSON text of `->`'s constant operand (a string: a member's key; an integer: an index)."""
    if isinstance(operand, exp.JSONPath):
        parts = operand.expressions[1:] if operand.expressions and isinstance(
            operand.expressions[0], exp.JSONPathRoot) else operand.expressions
        if len(parts) == 1 and isinstance(parts[0], exp.JSONPathKey) and isinstance(parts[0].this, str):
            return json.dumps(parts[0].this)
        if len(parts) == 1 and isinstance(parts[0], exp.JSONPathSubscript) and isinstance(parts[0].this, int):
            return str(parts[0].this)
        return None
    if isinstance(operand, exp.Literal):
        return json.dumps(operand.this) if operand.is_string else str(int(operand.this))
    if isinstance(operand, exp.Neg) and isinstance(operand.this, exp.Literal) and not operand.this.is_string:
        return str(-int(operand.this.this))
    return None


_INTEGERS = ("smallint", "integer", "bigint")


def jsonb_typed_operators(expression: exp.Expression, type_of, refuse) -> exp.Expression:
    """The operators whose meaning over jsonb depends on their operands' types, as calls of the
    functions both engines have: `a @> b` and `a <@ b` (sqlglot reads them as the array operators)
    where a side is jsonb; `a || b` where one side is jsonb and the other jsonb or an untyped
    constant (as PostgreSQL resolves it; jsonb || text stays text concatenation); `j - k` for jsonb j
    and a text k (a member or string elements), an integer k (an element) or a constant text array.
    `type_of(x)`: x's type name, or None where it is not known. Arrays' operators stay as they are."""
    kinds = (exp.ArrayContainsAll, exp.ArrayContainedBy, exp.DPipe, exp.Sub)
    if not any(isinstance(n, kinds) for n in expression.walk()):
        return expression

    def kind(e: exp.Expression) -> str | None:
        if isinstance(e, exp.Paren):
            return kind(e.this)
        if isinstance(e, exp.Null) or (isinstance(e, exp.Literal) and e.is_string):
            return "unknown"
        if isinstance(e, exp.Literal) or (isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal)):
            return "integer" if re.fullmatch(r"-?\d+", e.sql()) else "numeric"
        if isinstance(e, exp.Cast):
            try:
                return sqltypes.canonical(e.to)
            except ProgrammingError:
                return None
        if isinstance(e, exp.Anonymous) and e.name.lower() in JSONB_RESULTS:
            return "jsonb"
        if isinstance(e, exp.Array):
            return "array"
        if isinstance(e, exp.Case):  # (to_jsonb(x): NULL or x's jsonb)
            branches = {kind(b) for b in [i.args["true"] for i in e.args.get("ifs") or []] + [e.args.get("default")]
                        if b is not None and not isinstance(b, exp.Null)}
            if branches == {"jsonb"}:
                return "jsonb"
        return type_of(e)

    def may_be_jsonb(e: exp.Expression) -> bool:  # (without asking type_of of anything but columns)
        return any((isinstance(n, exp.Column) and type_of(n) == "jsonb")
                   or (isinstance(n, exp.Cast) and n.to.this in JSON_TYPES)
                   or (isinstance(n, exp.Anonymous) and n.name.lower() in JSONB_RESULTS) for n in e.walk())

    def rewrite(node):
        if not isinstance(node, kinds) or not may_be_jsonb(node):
            return node
        left, right = kind(node.this), kind(node.expression)
        if left != "jsonb" and right != "jsonb":
            return node
        if isinstance(node, (exp.ArrayContainsAll, exp.ArrayContainedBy)):
            outer, inner = (node.this, node.expression) if isinstance(node, exp.ArrayContainsAll) \
                else (node.expression, node.this)
            return exp.Anonymous(this="rw_jsonb_contains", expressions=[outer, inner])
        if isinstance(node, exp.DPipe):
            if {left, right} <= {"jsonb", "unknown"}:
                return exp.Anonymous(this="rw_jsonb_concat", expressions=[_jsonb_operand(node.this),
                                                                           _jsonb_operand(node.expression)])
            return node  # jsonb || text: the texts concatenated
        if left != "jsonb":
            return node
        key = node.expression
        if right == "integer" or right in _INTEGERS:
            return exp.Anonymous(this="rw_jsonb_delete_index", expressions=[node.this, key])
        if right in ("unknown", "varchar"):
            return exp.Anonymous(this="rw_jsonb_delete_key", expressions=[node.this, key])
        keys = constant_text_array(key) if right in ("array", "varchar[]") or isinstance(key, exp.Cast) else None
        if keys is None:
            refuse(node, f"{node.sql(dialect='postgres')}: jsonb minus what is not text, an integer or a "
                         "constant text array")
        return exp.Anonymous(this="rw_jsonb_delete_keys", expressions=[node.this, exp.Literal.string(json.dumps(keys))])

    return transform_bottom_up(expression, rewrite)  # (`a || b || c`: the inner call first)


_JSON_NUMBERS = ("smallint", "integer", "bigint", "real", "double precision")
JSON_VALUE_TYPES = ("jsonb", "varchar", "boolean", *_JSON_NUMBERS)  # (and numeric(p,s)): values_as_json spells them


def values_as_json(expression: exp.Expression, type_of, refuse) -> exp.Expression:
    """Each `rw_to_jsonb(x)` (rewrites.jsonb_functions) as the JSON text of x's value, written for
    x's type so that both engines compute it (JSON null for NULL): a jsonb value as it is, text as a
    JSON string, numbers and booleans as their JSON spelling. `type_of(x)`: x's type, or None where
    it is not known (a batch SELECT, which DuckDB runs: its to_json). `refuse(node, what)` raises
    for a type jsonb has no spelling for here."""
    if not any(_is_call(n, "rw_to_jsonb") for n in expression.walk()):
        return expression

    def rewrite(node):
        if not _is_call(node, "rw_to_jsonb"):
            return node
        (x,) = node.expressions
        t = type_of(x)
        if isinstance(x, exp.Literal):  # (a constant as written: 1.50 keeps its scale)
            text = exp.Literal.string(jsonb.normalize(x.this) if x.is_number else jsonb.string(x.this))
        elif isinstance(x, (exp.Boolean, exp.Null)):
            text = exp.Literal.string("null" if isinstance(x, exp.Null) else "true" if x.this else "false")
        elif t is None:
            text = exp.cast(exp.Anonymous(this="to_json", expressions=[x]), "VARCHAR")
        elif t == "jsonb":
            text = exp.cast(x, "VARCHAR")
        elif t == "varchar":
            text = exp.Anonymous(this="rw_jsonb_string", expressions=[x])
        elif t == "boolean":
            text = exp.Case(ifs=[exp.If(this=x.copy(), true=exp.Literal.string("true")),
                                 exp.If(this=exp.Not(this=x.copy()), true=exp.Literal.string("false"))])
        elif t in _JSON_NUMBERS or t.startswith("numeric"):
            text = exp.cast(x, "VARCHAR")
        else:
            refuse(node, f"a value of type {t} in a jsonb built by a view (jsonb, text, numbers and booleans are)")
        return exp.Coalesce(this=exp.cast(text, "VARCHAR"), expressions=[exp.Literal.string("null")])

    return transform_bottom_up(expression, rewrite)  # (a built value inside a built value: the inner first)
