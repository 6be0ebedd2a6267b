"""Helpers over sqlglot's AST shared by the rewrite rules (sql/rewrites) and the planner: the
aggregate and window functions the product maintains, a query as a FROM item, the terms of AND
and OR chains, the output name PostgreSQL gives a select item, a select list's stars and their
EXCEPT lists, the WITH queries in scope at a node, and top-down replacement."""
from __future__ import annotations

from sqlglot import exp

from ..errors import ProgrammingError, unsupported

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


def star_of(item: exp.Expression) -> exp.Star | None:
    """The star of a select item `*` or `x.*`, or None."""
    if isinstance(item, exp.Star):
        return item
    if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
        return item.this
    return None


# the modifiers of * that sqlglot parses and RisingWave does not have (its * takes EXCEPT only)
STAR_MODIFIERS = {"replace": "REPLACE", "rename": "RENAME", "ilike": "ILIKE"}


def star_except(star: exp.Star) -> list[exp.Column]:
    """The columns of `* EXCEPT (c, ...)` ([] without EXCEPT). Raises ProgrammingError for a
    modifier RisingWave does not have (REPLACE, RENAME, ILIKE), an empty list, or an entry that is
    not a column name."""
    for key, word in STAR_MODIFIERS.items():
        if star.args.get(key):
            raise ProgrammingError(f"* {word} is not supported: a * takes EXCEPT (column, ...) only; "
                                   "write the changed columns out")
    columns = star.args.get("except_")
    if columns is None:
        return []
    if not columns:
        raise ProgrammingError("the EXCEPT list of * is empty")
    for c in columns:
        if not isinstance(c, exp.Column) or isinstance(c.this, exp.Star) or c.args.get("db") is not None:
            raise ProgrammingError(f"only column names can be in the EXCEPT list of *: {c.sql(dialect='postgres')}")
    return list(columns)


def check_stars(query: exp.Expression) -> None:
    """Raise ProgrammingError for a `*` or `x.*` of a select list anywhere in `query` with a
    modifier RisingWave does not have or an EXCEPT list that is not column names (star_except)."""
    for select in query.find_all(exp.Select):
        for item in select.expressions:
            star = star_of(item)
            if star is not None:
                star_except(star)


def visible_ctes(node: exp.Expression) -> dict[str, exp.CTE]:
    """The WITH queries `node` can read, by name (an inner WITH's hiding an outer one's): those of
    every enclosing WITH, inside a WITH query the ones before it (all of them for WITH RECURSIVE).
    A WITH query does not see itself: `WITH t AS (SELECT * FROM t)` reads the relation t
    (PostgreSQL's scoping)."""
    found: dict[str, exp.CTE] = {}
    child, parent = node, node.parent
    while parent is not None:
        ctes = None
        if isinstance(parent, exp.With):
            at = next((n for n, c in enumerate(parent.expressions) if c is child), len(parent.expressions))
            ctes = parent.expressions if parent.args.get("recursive") else parent.expressions[:at]
        elif isinstance(parent.args.get("with_"), exp.With) and child is not parent.args["with_"]:
            ctes = parent.args["with_"].expressions
        for c in ctes or ():
            found.setdefault(c.alias_or_name, c)
        child, parent = parent, parent.parent
    return found


def ctes_in_scope(node: exp.Expression) -> set[str]:
    """The names of the WITH queries `node` can read (visible_ctes)."""
    return set(visible_ctes(node))


def relation_tables(query: exp.Expression):
    """The FROM items of `query` (at any depth) that name a relation of the catalog: each table
    reference but those that read a WITH query in scope."""
    for t in query.find_all(exp.Table):
        if t.name and isinstance(t.this, exp.Identifier) and (t.args.get("db") is not None
                                                                or t.name not in ctes_in_scope(t)):
            yield t


def with_queries_apart(query: exp.Expression) -> exp.Expression:
    """`query` with each WITH query whose name the query also uses for a relation (`WITH t AS
    (SELECT * FROM t WHERE ...)`) renamed, and the references that read it: engines that would take
    the inner t for the WITH query itself (DuckDB) read the relation, as PostgreSQL does."""
    relations = {t.name for t in relation_tables(query) if t.args.get("db") is None}
    clashing = [c for c in query.find_all(exp.CTE) if c.alias_or_name in relations]
    if not clashing:
        return query
    query = query.copy()
    clashing = [c for c in query.find_all(exp.CTE) if c.alias_or_name in relations]
    new_names = {id(c): f"_rw_with{n}_{c.alias_or_name}" for n, c in enumerate(clashing)}
    readers = []
    for t in query.find_all(exp.Table):
        if t.name and isinstance(t.this, exp.Identifier) and t.args.get("db") is None:
            cte = visible_ctes(t).get(t.name)
            if cte is not None and id(cte) in new_names:
                readers.append((t, new_names[id(cte)]))
    for t, name in readers:
        if not t.alias:
            t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
        t.set("this", exp.to_identifier(name, quoted=True))
    for c in clashing:
        c.args["alias"].set("this", exp.to_identifier(new_names[id(c)], quoted=True))
    return query


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
