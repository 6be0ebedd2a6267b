"""Helpers over sqlglot's AST shared by the rewrite rules (sql/rewrites) and the planner: the
aggregate and window functions the product maintains, a query as a FROM item, the terms of AND
and OR chains, the output name PostgreSQL gives a select item, and top-down replacement."""
from __future__ import annotations

from sqlglot import exp

from ..errors import unsupported

AGG_FUNCS = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
             exp.GroupConcat: "string_agg", exp.FirstValue: "first_value", exp.LastValue: "last_value",
             exp.ArrayAgg: "array_agg", exp.WithinGroup: "within group"}
# the ordered-set aggregates, written `f(direct arguments) WITHIN GROUP (ORDER BY x)`, by the call
# inside WITHIN GROUP (approx_percentile, RisingWave's, is an anonymous call to sqlglot)
ORDERED_SET_FUNCS = {exp.PercentileCont: "percentile_cont", exp.PercentileDisc: "percentile_disc",
                     exp.Mode: "mode"}
WINDOW_FUNCS = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
WINDOW_AGGS = {t: n for t, n in AGG_FUNCS.items() if n in ("count", "sum", "avg", "min", "max")}
WINDOW_OFFSETS = {exp.Lag: "lag", exp.Lead: "lead"}
BIT_AGGS = {exp.BitwiseAndAgg: "bit_and", exp.BitwiseOrAgg: "bit_or", exp.BitwiseXorAgg: "bit_xor"}
WINDOW_VALUES = {exp.FirstValue: "first_value", exp.LastValue: "last_value", exp.NthValue: "nth_value"}
SUBQUERY_ALIAS = "_rw_sq"  # the aliases of FROM items the planner makes of subqueries begin so


def nested_queries(e: exp.Expression) -> list[exp.Expression]:
    """The queries (subqueries) directly inside `e`, not inside one another."""
    found = []
    for n in e.walk(prune=lambda n: n is not e and isinstance(n, exp.Query)):
        if n is not e and isinstance(n, exp.Query):
            found.append(n)
    return found


def own_columns(e: exp.Expression) -> list[exp.Column]:
    """The columns of `e` outside the subqueries nested in it."""
    return [n for n in e.walk(prune=lambda n: n is not e and isinstance(n, exp.Query))
            if isinstance(n, exp.Column)]


def columns_only(cols: list[exp.Column]) -> exp.Expression:
    """Columns as one expression (to resolve them together)."""
    return exp.Tuple(expressions=[c.copy() for c in cols])


def without_windows(e: exp.Expression) -> exp.Expression:
    """`e` with every window call replaced by NULL (to check what surrounds the calls)."""
    return transform_top_down(e, lambda n: exp.Null() if isinstance(n, exp.Window) else n)


def derived(query: exp.Expression, alias: str, columns: list | tuple = ()) -> exp.Subquery:
    """`(query) AS alias [(columns)]`: a query as a FROM item (columns: names or identifiers)."""
    return exp.Subquery(this=query, alias=exp.TableAlias(
        this=exp.to_identifier(alias), columns=[exp.to_identifier(c) for c in columns]))


def operands(cond, op):
    """The operands of a chain of `op` (AND, OR), parentheses looked through."""
    if isinstance(cond, op):
        yield from operands(cond.this, op)
        yield from operands(cond.expression, op)
    elif isinstance(cond, exp.Paren):
        yield from operands(cond.this, op)
    else:
        yield cond


def and_terms(cond):
    """The terms of an AND chain (a WHERE or ON condition's conjuncts)."""
    yield from operands(cond, exp.And)


def ancestors_until(node: exp.Expression, top: exp.Expression):
    """The nodes above `node`, up to (not including) `top`."""
    p = node.parent
    while p is not None and p is not top:
        yield p
        p = p.parent


def find_aggs(e: exp.Expression) -> list[exp.Expression]:
    """The aggregate calls in `e`; refuses the aggregates that are not maintained and FILTER."""
    found = []
    for n in e.walk(prune=lambda n: isinstance(n, exp.WithinGroup)):  # (the call inside is its name)
        if type(n) in AGG_FUNCS:
            found.append(n)
        elif isinstance(n, exp.AggFunc):
            raise unsupported(f"the aggregate function {n.sql(dialect='postgres')}", None, None)
        elif isinstance(n, exp.Filter):
            raise unsupported("aggregate FILTER (WHERE ...)", None, None)
    return found


def agg_name(call: exp.Expression) -> str:
    """An aggregate call's function name: AGG_FUNCS's, or for `f(...) WITHIN GROUP (ORDER BY ...)`
    the name of f as written (an ordered-set aggregate, or a call the planner refuses by it)."""
    if not isinstance(call, exp.WithinGroup):
        return AGG_FUNCS[type(call)]
    inner = call.this
    if type(inner) in ORDERED_SET_FUNCS:
        return ORDERED_SET_FUNCS[type(inner)]
    return inner.name.lower() if isinstance(inner, exp.Anonymous) else inner.sql_name().lower()


def output_name(item: exp.Expression) -> str:
    """The name PostgreSQL gives a select item's column."""
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Window) and type(item.this) in WINDOW_FUNCS:
        return WINDOW_FUNCS[type(item.this)]
    if isinstance(item, exp.Window) and type(item.this) in WINDOW_OFFSETS:
        return WINDOW_OFFSETS[type(item.this)]
    if isinstance(item, exp.Window) and type(item.this) in WINDOW_VALUES:
        return WINDOW_VALUES[type(item.this)]
    if isinstance(item, exp.Column):
        return item.name
    if isinstance(item, exp.Cast) and isinstance(item.this, exp.Column):
        return item.this.name
    if type(item) in AGG_FUNCS:
        return agg_name(item)
    if type(item) in BIT_AGGS:
        return BIT_AGGS[type(item)]
    if isinstance(item, (exp.Explode, exp.Unnest)):  # PostgreSQL's names for the set-returning functions
        return "unnest"
    if isinstance(item, exp.GenerateSeries):
        return "generate_series"
    if isinstance(item, exp.Anonymous):
        return item.name.lower()
    if isinstance(item, exp.Func) and not isinstance(item, exp.Case):
        return item.sql_name().lower()
    if isinstance(item, exp.Case):
        return "case"
    return "?column?"


def transform_top_down(e: exp.Expression, fn) -> exp.Expression:
    """Replace nodes top-down: once a node is replaced, its children are not visited. `e` is left
    as it is: the answer is a copy (made once, then replaced in place)."""
    new = fn(e)
    if new is not e:
        return new
    e = e.copy()
    _replace_below(e, fn)
    return e


def _replace_below(e: exp.Expression, fn) -> None:
    for key, value in list(e.args.items()):
        if isinstance(value, exp.Expression):
            new = fn(value)
            if new is not value:
                e.set(key, new)
            else:
                _replace_below(value, fn)
        elif isinstance(value, list):
            out = []
            for v in value:
                if isinstance(v, exp.Expression):
                    new = fn(v)
                    if new is v:
                        _replace_below(v, fn)
                    v = new
                out.append(v)
            e.set(key, out)


def transform_bottom_up(e: exp.Expression, fn) -> exp.Expression:
    """Replace nodes bottom-up: a node's children are replaced before it is handed to `fn`, so a
    rewrite of a call sees its arguments rewritten. `e` is left as it is: the answer is a copy."""
    def visit(node: exp.Expression) -> exp.Expression:
        for child in list(node.iter_expressions()):
            new = visit(child)
            if new is not child:
                child.replace(new)
        return fn(node)

    return visit(e.copy())
