"""The functions dagster-rw supports, by their PostgreSQL / RisingWave names, and the check that a
statement calls no other.

Statements run on an embedded DuckDB (and on Spark), whose own functions reach far beyond SQL over
the warehouse: `read_csv`, `read_text`, `glob` and `read_parquet` read any file of the host,
`duckdb_settings()` and `current_setting` show its settings. A call is therefore allowed only when
its name is in this catalog (or is a SQL function of the warehouse, CREATE FUNCTION), with an
argument count the catalog accepts; anything else is refused before the statement runs, with
PostgreSQL's message: `function read_csv(unknown) does not exist`.

The parser of the project's dialect (sql.statements) tags every call it reads with the name as
written and the number of arguments (the meta keys below), whatever node sqlglot makes of it, so
that an alias sqlglot folds into a supported node (`group_concat` into string_agg's) is refused by
its own name. Operators and SQL's special forms (CASE, CAST, EXTRACT, ...) are syntax, not calls.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Iterator

from sqlglot import exp

from .. import types as sqltypes
from ..errors import ProgrammingError

FUNCTION_NAME = "rw_function"  # meta key: the name of a call as written (set by the dialect's parser)
ARGUMENT_COUNT = "rw_arguments"  # meta key: how many arguments the call was written with

SCALAR, AGGREGATE, WINDOW, TABLE, SYNTAX = "scalar", "aggregate", "window", "table", "syntax"


@dataclasses.dataclass(frozen=True)
class Signature:
    """One supported function: its kinds, its family (for the documentation) and the argument lists
    it accepts, as type classes (`numeric`, `integer`, `text`, `timestamp`, `interval`, `array`,
    `boolean`, `any`, ...)."""

    name: str
    kinds: frozenset[str]
    family: str
    forms: tuple[tuple[str, ...], ...]  # each accepted argument list; a trailing "..." repeats the last
    note: str = ""

    @property
    def min_args(self) -> int:
        return min(len([a for a in f if a != "..."]) for f in self.forms)

    @property
    def max_args(self) -> int | None:
        if any("..." in f for f in self.forms):
            return None
        return max(len(f) for f in self.forms)

    def accepts(self, count: int | None) -> bool:
        if count is None or SYNTAX in self.kinds:
            return True
        for form in self.forms:
            fixed = len([a for a in form if a != "..."])
            if count == fixed or ("..." in form and count >= fixed):
                return True
        return False

    def shown(self) -> str:
        """The accepted argument lists, as `round(numeric) | round(numeric, integer)`."""
        return " | ".join(f"{self.name}({', '.join(f)})" for f in self.forms)


# What the engines compute with PostgreSQL's meaning, by family. `name(a, b)` is one accepted
# argument list (a name written twice accepts both lists); `...` repeats the argument before it.
_SCALARS = {
    "mathematical": """
        abs(numeric) ceil(numeric) ceiling(numeric) floor(numeric) round(numeric) round(numeric, integer)
        trunc(numeric) trunc(numeric, integer) sign(numeric) sqrt(numeric) cbrt(numeric) exp(numeric)
        ln(numeric) log(numeric) log(numeric, numeric) log10(numeric) power(numeric, numeric)
        pow(numeric, numeric) mod(integer, integer) pi() degrees(numeric) radians(numeric) sin(numeric)
        cos(numeric) tan(numeric) cot(numeric) asin(numeric) acos(numeric) atan(numeric)
        atan2(numeric, numeric) gcd(integer, integer) lcm(integer, integer) random()
    """,
    "string": """
        length(text) char_length(text) character_length(text) bit_length(text) lower(text) upper(text)
        initcap(text) btrim(text) btrim(text, text) ltrim(text) ltrim(text, text) rtrim(text)
        rtrim(text, text) lpad(text, integer) lpad(text, integer, text) rpad(text, integer)
        rpad(text, integer, text) left(text, integer) right(text, integer) substr(text, integer)
        substr(text, integer, integer) substring(text, integer) substring(text, integer, integer)
        strpos(text, text) replace(text, text, text) reverse(text) repeat(text, integer)
        split_part(text, text, integer) concat(any, ...) concat_ws(text, any, ...)
        starts_with(text, text) md5(text) ascii(text) chr(integer) translate(text, text, text)
        regexp_replace(text, text, text) regexp_replace(text, text, text, text) regexp_count(text, text)
        regexp_match(text, text) string_to_array(text, text) to_char(timestamp, text)
    """,
    "date and time": """
        now() date_trunc(text, timestamp) date_part(text, timestamp) to_timestamp(numeric)
        to_timestamp(text, text) to_date(text, text) make_date(integer, integer, integer)
        make_timestamp(integer, integer, integer, integer, integer, numeric) timezone(text, timestamp)
        proctime()
    """,
    "array": """
        array_length(array) array_length(array, integer) cardinality(array) array_append(array, any)
        array_prepend(any, array) array_cat(array, array) array_position(array, any)
        array_remove(array, any) array_contains(array, any) array_to_string(array, text)
        array_join(array, text)
    """,
    "conditional": """
        coalesce(any, ...) nullif(any, any) greatest(any, ...) least(any, ...)
    """,
    "json": """
        jsonb_typeof(any) jsonb_build_object() jsonb_build_object(any, any, ...) jsonb_array_length(any)
        jsonb_strip_nulls(any) jsonb_extract_path(any, text, ...) jsonb_extract_path_text(any, text, ...)
        jsonb_set(any, text, any) jsonb_set(any, text, any, boolean) jsonb_insert(any, text, any)
        jsonb_insert(any, text, any, boolean) jsonb_build_array() jsonb_build_array(any, ...) to_jsonb(any)
        jsonb_pretty(any)
    """,
    "composite": """
        row(any, ...)
    """,
    "other": """
        gen_random_uuid()
    """,
}
_AGGREGATES = """
    count(any) sum(numeric) avg(numeric) min(any) max(any) string_agg(text, text) array_agg(any)
    first_value(any) last_value(any) bool_and(boolean) bool_or(boolean) every(boolean) bit_and(integer)
    bit_or(integer) bit_xor(integer) stddev(numeric)
    stddev_samp(numeric) stddev_pop(numeric) variance(numeric) var_samp(numeric) var_pop(numeric)
    grouping(any, ...) percentile_cont(numeric) percentile_disc(numeric) mode()
    approx_percentile(numeric) approx_percentile(numeric, numeric) jsonb_agg(any) jsonb_object_agg(any, any)
"""
_WINDOWS = """
    row_number() rank() dense_rank() percent_rank() cume_dist() ntile(integer) lag(any) lag(any, integer)
    lag(any, integer, any) lead(any) lead(any, integer) lead(any, integer, any) first_value(any)
    last_value(any) nth_value(any, integer)
"""
_TABLES = """
    generate_series(integer, integer) generate_series(integer, integer, integer) unnest(array)
    jsonb_array_elements(any) jsonb_array_elements_text(any) jsonb_object_keys(any) jsonb_each(any)
    jsonb_each_text(any)
    generate_series(timestamp, timestamp, interval) generate_series(timestamptz, timestamptz, interval)
    tumble(relation, timestamp, interval) tumble(relation, timestamp, interval, interval)
    hop(relation, timestamp, interval, interval) hop(relation, timestamp, interval, interval, interval)
    gap_fill(relation, timestamp, interval, ...)
"""
# SQL's special forms written like calls: their arguments are clauses (CAST(x AS int), EXTRACT(year
# FROM ts), TRIM(BOTH 'x' FROM s), POSITION('a' IN s), ARRAY(SELECT ...)), not counted (SUBSTRING(s
# FROM 1 FOR 2) counts as substring(s, 1, 2))
_SYNTAX = """
    cast(any) extract(any) position(any) trim(any) overlay(any) array(any)
    locf(column) interpolate(column) keepnull(column)
"""
_NOTES = {
    "regexp_match": "only as regexp_match(s, pattern)[n]: the n-th group of the first match",
    "generate_series": "in FROM (constant arguments) and in a view's select list, over integers or timestamps "
                       "with a constant step (an INTERVAL without months)",
    "unnest": "also in a view's select list",
    "tumble": "TUMBLE(relation, time column, size[, offset]): a time window in FROM",
    "hop": "HOP(relation, time column, slide, size[, offset]): a time window in FROM",
    "gap_fill": "GAP_FILL(relation, time column, interval[, LOCF(c) | INTERPOLATE(c) | KEEPNULL(c) ...]) in FROM: "
                "the rows and a filled row every interval between two consecutive rows",
    "locf": "in GAP_FILL: carry the earlier row's value forward (the default)",
    "interpolate": "in GAP_FILL: step linearly from the earlier row's value to the later row's",
    "keepnull": "in GAP_FILL: NULL in filled rows",
    "proctime": "in FOR SYSTEM_TIME AS OF PROCTIME() of a temporal join",
    "first_value": "as an aggregate, with ORDER BY inside the call",
    "last_value": "as an aggregate, with ORDER BY inside the call",
    "percentile_cont": "f(fraction) WITHIN GROUP (ORDER BY x)",
    "percentile_disc": "f(fraction) WITHIN GROUP (ORDER BY x)",
    "mode": "mode() WITHIN GROUP (ORDER BY x)",
    "approx_percentile": "f(fraction [, relative error]) WITHIN GROUP (ORDER BY x); exact: percentile_disc's value",
}
# keywords that read like a value but report the host's session (DuckDB's user, schema, catalog)
_HOST_KEYWORDS = {exp.CurrentUser: "current_user", exp.CurrentRole: "current_role",
                  exp.CurrentCatalog: "current_catalog", exp.SessionUser: "session_user",
                  exp.CurrentSchema: "current_schema"}


def _build() -> dict[str, Signature]:
    groups = [(SCALAR, family, text) for family, text in _SCALARS.items()] + [
        (AGGREGATE, "aggregate", _AGGREGATES), (WINDOW, "window", _WINDOWS), (TABLE, "set-returning", _TABLES),
        (SYNTAX, "syntax", _SYNTAX)]
    found: dict[str, Signature] = {}
    for kind, family, text in groups:
        for name, args in re.findall(r"(\w+)\(([^)]*)\)", text):
            form = tuple(a.strip() for a in args.split(",") if a.strip())
            old = found.get(name)
            if old is None:
                found[name] = Signature(name, frozenset({kind}), family, (form,), _NOTES.get(name, ""))
            else:
                forms = old.forms if form in old.forms else old.forms + (form,)
                found[name] = dataclasses.replace(old, kinds=old.kinds | {kind}, forms=forms)
    return found


CATALOG: dict[str, Signature] = _build()


def by_family() -> dict[str, list[Signature]]:
    """The catalog grouped by family, each sorted by name (for the documentation)."""
    out: dict[str, list[Signature]] = {}
    for s in sorted(CATALOG.values(), key=lambda s: s.name):
        out.setdefault(s.family, []).append(s)
    return out


# -- the check ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Call:
    name: str
    node: exp.Expression
    arguments: int | None  # None: not known (a special form)


def calls(tree: exp.Expression) -> Iterator[Call]:
    """Every function call in a parsed tree, wherever it is (subqueries, CTEs, FROM, windows)."""
    for node in tree.walk():
        if node.meta_get(FUNCTION_NAME) is not None:
            yield Call(str(node.meta_get(FUNCTION_NAME)).lower(), node, node.meta_get(ARGUMENT_COUNT))
        elif isinstance(node, exp.Anonymous):
            ident = node.this
            quoted = isinstance(ident, exp.Identifier) and ident.quoted
            yield Call(node.name if quoted else node.name.lower(), node, len(node.expressions))
        elif type(node) in _HOST_KEYWORDS:
            yield Call(_HOST_KEYWORDS[type(node)], node, None)


def check_calls(tree: exp.Expression, user_functions: Collection[str] = (), sql: str | None = None,
                column_type: Callable[[exp.Column], str | None] | None = None) -> None:
    """Refuse the first call of `tree` that is neither in the catalog (with an argument count it
    accepts) nor a SQL function of the warehouse (`user_functions`). `sql` is the statement's text
    (for the position in the message); `column_type` gives a column's type, where known, for the
    argument types shown."""
    for call in calls(tree):
        if call.name in user_functions:
            continue
        signature = CATALOG.get(call.name)
        if signature is not None and signature.accepts(call.arguments):
            continue
        types = ", ".join(argument_type(a, column_type) for a in _arguments(call.node))
        message = f"function {_shown_name(call.name)}({types}) does not exist{_position(sql, call)}"
        if signature is not None:
            message += f": {call.name} takes {_count_text(signature)} (" + signature.shown() + ")"
        raise ProgrammingError(message)


def check_relations(tree: exp.Expression) -> None:
    """Refuse a relation named in another schema than `public`: the warehouse has no other, and the
    engines would read their own (DuckDB's information_schema, a file as Spark's csv.`/path`)."""
    for table in tree.find_all(exp.Table):
        schema = table.args.get("db")
        if table.args.get("catalog") is not None or (schema is not None and schema.name.lower() != "public"):
            qualifier = table.args.get("catalog") or schema
            raise ProgrammingError(f'schema "{qualifier.name}" does not exist')


def check_statement(statement, user_functions: Collection[str] = (),
                    relation_columns: Callable[[str], dict[str, str] | None] | None = None) -> None:
    """check_calls and check_relations over every expression a parsed statement holds (its query,
    VALUES rows, SET assignments, WHERE, watermark, a SQL function's body, an EXPLAINed statement)."""
    sql = getattr(statement, "sql", None)
    trees = list(_expressions(statement))
    target = getattr(statement, "table", None)  # INSERT, UPDATE, DELETE: the table they change
    column_type = relation_column_types(trees, relation_columns, target) if relation_columns else None
    for tree in trees:
        check_calls(tree, user_functions, sql, column_type)
        check_relations(tree)


def _expressions(value) -> Iterator[exp.Expression]:
    """The parsed expressions a statement holds, in its fields, nested statements, lists and tuples."""
    if isinstance(value, exp.Expression):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _expressions(getattr(value, f.name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _expressions(item)


# -- the message ----------------------------------------------------------------------------------
def _arguments(node: exp.Expression) -> list[exp.Expression]:
    """A call's arguments in the order written, as far as sqlglot's node keeps them."""
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    out = []
    for key in node.arg_types:
        value = node.args.get(key)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, exp.Expression):
                out.append(v)
    count = node.meta_get(ARGUMENT_COUNT)
    return out[:count] if isinstance(count, int) else out


def argument_type(e: exp.Expression, column_type: Callable[[exp.Column], str | None] | None = None) -> str:
    """The type PostgreSQL would name for an argument, as far as it shows without planning:
    `unknown` for a string literal or NULL, `integer` / `bigint` / `numeric` for numbers, the
    target of a cast, a column's type when `column_type` knows it."""
    if isinstance(e, (exp.Alias, exp.Paren)):
        return argument_type(e.this, column_type)
    if isinstance(e, exp.Literal):
        if e.is_string:
            return "unknown"
        text = e.name
        if re.fullmatch(r"\d+", text):
            return "integer" if int(text) < 2 ** 31 else "bigint" if int(text) < 2 ** 63 else "numeric"
        return "numeric"
    if isinstance(e, exp.Neg):
        return argument_type(e.this, column_type)
    if isinstance(e, exp.Null):
        return "unknown"
    if isinstance(e, (exp.Boolean, exp.Predicate, exp.Not, exp.Connector)):
        return "boolean"
    if isinstance(e, exp.Interval):
        return "interval"
    if isinstance(e, exp.DPipe):
        return "text"
    if isinstance(e, exp.Cast) and isinstance(e.to, exp.DataType):
        return _type_name(e.to)
    if isinstance(e, exp.Column) and column_type is not None:
        found = column_type(e)
        if found:
            return _display(found)
    if isinstance(e, exp.Array):
        inner = {argument_type(x, column_type) for x in e.expressions}
        element = inner.pop() if len(inner) == 1 else "unknown"
        return ("text" if element == "unknown" else element) + "[]"
    return "unknown"


def _type_name(dtype: exp.DataType) -> str:
    try:
        return _display(sqltypes.canonical(dtype))
    except Exception:  # noqa: BLE001 - a type tables cannot hold is still named in the message
        return dtype.sql(dialect="postgres").lower()


def _display(canonical: str) -> str:
    return re.sub(r"\(\d+(,\s*\d+)?\)", "", sqltypes.display_name(canonical))  # numeric(10,2) -> numeric


def _shown_name(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def _count_text(signature: Signature) -> str:
    lo, hi = signature.min_args, signature.max_args
    if hi is None:
        return f"at least {lo} argument{'s' if lo != 1 else ''}"
    if lo == hi:
        return f"{lo} argument{'s' if lo != 1 else ''}"
    return f"{lo} to {hi} arguments"


def _position(sql: str | None, call: Call) -> str:
    """` (line l, column c)` of the call in the statement, when its parsed position is in `sql`
    (a SQL function's inlined body was parsed from its own text)."""
    start = call.node.meta_get("start")
    if not sql or start is None or sql[start:start + len(call.name)].lower() != call.name.lower():
        return ""
    line = sql.count("\n", 0, start) + 1
    column = start - (sql.rfind("\n", 0, start) + 1) + 1
    return f" (line {line}, column {column})"


def relation_column_types(trees: list[exp.Expression],
                          relation_columns: Callable[[str], dict[str, str] | None], target: str | None = None):
    """A column -> type lookup over the relations the statement names (by name or alias), read
    when a message first needs it; a column that more than one of them has, or none, stays unknown."""
    relations: dict[str, dict[str, str]] = {}
    read: list[bool] = []

    def column_type(col: exp.Column) -> str | None:
        if not read:
            read.append(True)
            if isinstance(target, str) and relation_columns(target):
                relations[target] = relation_columns(target)
            for tree in trees:
                for table in tree.find_all(exp.Table):
                    if isinstance(table.this, exp.Identifier) and table.name:
                        columns = relation_columns(table.name)
                        if columns:
                            relations[table.alias_or_name] = columns
                            relations.setdefault(table.name, columns)
        if col.table:
            return (relations.get(col.table) or {}).get(col.name)
        found = {cols[col.name] for cols in relations.values() if col.name in cols}
        return found.pop() if len(found) == 1 else None

    return column_type
