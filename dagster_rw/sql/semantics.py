"""PostgreSQL semantics that DuckDB's dialect does not share, applied to parsed expressions.

Integer division: in PostgreSQL `7 / 2` is 3 (it truncates) where DuckDB's `/` gives 3.5. sqlglot
writes the PostgreSQL meaning for DuckDB once the operands carry their types, so expressions are
type-annotated against the columns they read before they are rendered. Division by zero in a view's
expressions is NULL, as in RisingWave's streaming (DuckDB would give infinity, or fail to cast it).
"""
from __future__ import annotations

import json

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from .. import jsonb
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
JSONB_RESULTS = ("rw_jsonb_get", "rw_jsonb_path", "rw_jsonb_set")  # (the ones whose result is jsonb)
_JSONB_CALLS = {exp.JSONExtract: "rw_jsonb_get", exp.JSONExtractScalar: "rw_jsonb_get_text",
                exp.JSONBExtract: "rw_jsonb_path", exp.JSONBExtractScalar: "rw_jsonb_path_text"}


# jsonb functions of one argument, each a call of the function both engines have under its name
JSONB_READERS = ("jsonb_typeof", "jsonb_array_length", "jsonb_strip_nulls")
_JSONB_PATHS = ("jsonb_extract_path", "jsonb_extract_path_text")


def jsonb_operators(expression: exp.Expression, refuse) -> exp.Expression:
    """`expression` with PostgreSQL's jsonb operators (`->`, `->>`, `#>`, `#>>`), jsonb_typeof,
    jsonb_array_length, jsonb_strip_nulls, jsonb_extract_path[_text] and jsonb_set (a constant
    path) as calls of the functions
    both engines have; `refuse(node, what)` raises for an operand that is not a constant."""
    if not any(isinstance(n, tuple(_JSONB_CALLS)) or _is_call(n, *JSONB_READERS, *_JSONB_PATHS, "jsonb_set")
               for n in expression.walk()):
        return expression

    def translate(node: exp.Expression) -> exp.Expression:
        if _is_call(node, "jsonb_set") and len(node.expressions) in (3, 4):
            target, path, new, *create = node.expressions
            if not (isinstance(path, exp.Literal) and path.is_string):
                refuse(node, "jsonb_set(...): a jsonb path that is not a constant")
            if create and not isinstance(create[0], exp.Boolean):
                refuse(node, "jsonb_set(...): create_if_missing that is not a constant true or false")
            jsonb.check_path(path.this)
            spec = json.dumps({"path": jsonb.path_keys(path.this), "create": create[0].this if create else True})
            return exp.Anonymous(this="rw_jsonb_set", expressions=[target, exp.Literal.string(spec), new])
        if _is_call(node, *JSONB_READERS) and len(node.expressions) == 1:
            return exp.Anonymous(this="rw_" + node.name.lower(), expressions=list(node.expressions))
        if _is_call(node, *_JSONB_PATHS) and node.expressions:
            keys = node.expressions[1:]
            if not all(isinstance(k, exp.Literal) and k.is_string for k in keys):
                refuse(node, f"{node.name.lower()}(...): a jsonb path that is not constant keys")
            return exp.Anonymous(this="rw_" + node.name.lower(), expressions=[
                node.expressions[0], exp.Literal.string(json.dumps([k.this for k in keys]))])
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


def jsonb_containment(expression: exp.Expression, column_types: dict[str, str]) -> exp.Expression:
    """`a @> b` and `a <@ b` over jsonb (sqlglot reads them as the array operators) as calls of
    the containment function both engines have; arrays' stay as they are."""
    if not any(isinstance(n, (exp.ArrayContainsAll, exp.ArrayContainedBy)) for n in expression.walk()):
        return expression

    def is_jsonb(e: exp.Expression) -> bool:
        if isinstance(e, exp.Paren):
            return is_jsonb(e.this)
        if isinstance(e, exp.Column):
            return column_types.get(e.name) == "jsonb"
        if isinstance(e, exp.Cast):
            return e.to.this in JSON_TYPES
        return isinstance(e, exp.Anonymous) and e.name.lower() in JSONB_RESULTS

    def rewrite(node):
        if isinstance(node, (exp.ArrayContainsAll, exp.ArrayContainedBy)) and (
                is_jsonb(node.this) or is_jsonb(node.expression)):
            outer, inner = (node.this, node.expression) if isinstance(node, exp.ArrayContainsAll) \
                else (node.expression, node.this)
            return exp.Anonymous(this="rw_jsonb_contains", expressions=[outer, inner])
        return node

    return expression.transform(rewrite)


_JSON_NUMBERS = ("smallint", "integer", "bigint", "real", "double precision")


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
        if t is None:
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
