"""Statements of the PostgreSQL / RisingWave dialect: splitting a script and classifying each statement.

sqlglot parses the bodies; the few RisingWave words sqlglot does not know (APPEND ONLY, FLUSH, SHOW,
EXPLAIN, EMIT ON WINDOW CLOSE) are recognised here from sqlglot's own tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from .. import types as sqltypes
from ..errors import ProgrammingError, unsupported
from ..storage.catalog import Column
from .defaults import default_sql
from .dialect import _DIALECT, DIALECT, Statement, _parse  # noqa: F401 - DIALECT is read from here
from .plan import VIEW_COLUMNS




@dataclass
class CreateTable(Statement):
    name: str = ""
    columns: list[Column] = field(default_factory=list)
    pk: list[str] = field(default_factory=list)
    append_only: bool = False
    if_not_exists: bool = False
    as_query: exp.Expression | None = None  # CREATE TABLE ... AS SELECT: kept fed by the query
    emit_on_window_close: bool = False
    watermark: tuple[str, exp.Expression] | None = None  # (column, expression) of WATERMARK FOR
    on_conflict: dict = field(default_factory=dict)  # ON CONFLICT as table options (sql.on_conflict)
    defaults: list[tuple[str, exp.Expression]] = field(default_factory=list)  # (column, DEFAULT as written)


@dataclass
class CreateSource(Statement):
    """CREATE SOURCE, or CREATE TABLE with a connector (`is_table`: the rows are also stored)."""

    name: str = ""
    columns: list[Column] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)  # WITH (...), keys as written (lower case)
    format: str = ""
    encode: str = ""
    encode_options: dict[str, str] = field(default_factory=dict)
    watermark: tuple[str, exp.Expression] | None = None  # (column, expression) of WATERMARK FOR
    is_table: bool = False
    if_not_exists: bool = False
    secret_options: dict[str, str] = field(default_factory=dict)  # `key = secret name`: key -> name


@dataclass
class CreateView(Statement):
    name: str = ""
    query: exp.Expression | None = None
    if_not_exists: bool = False
    emit_on_window_close: bool = False


@dataclass
class CreateFunction(Statement):
    function: object = None  # sql.functions.SqlFunction
    replace: bool = False
    body: exp.Expression | None = None  # the function's body, parsed (its calls are checked like a query's)


@dataclass
class Drop(Statement):
    kind: str = ""
    name: str = ""
    if_exists: bool = False


@dataclass
class Insert(Statement):
    table: str = ""
    columns: list[str] | None = None
    source: exp.Expression | None = None


@dataclass
class Update(Statement):
    table: str = ""
    assignments: list[tuple[str, exp.Expression]] = field(default_factory=list)
    where: exp.Expression | None = None


@dataclass
class Delete(Statement):
    table: str = ""
    where: exp.Expression | None = None


@dataclass
class Flush(Statement):
    pass


@dataclass
class SetVar(Statement):
    name: str = ""
    value: str = ""


@dataclass
class Show(Statement):
    what: str = ""


@dataclass
class Describe(Statement):
    name: str = ""


@dataclass
class Explain(Statement):
    inner: Statement | None = None


@dataclass
class Query(Statement):
    query: exp.Expression | None = None


def split(script: str) -> list[str]:
    """Split a script into statements at top-level semicolons (comments and strings respected)."""
    try:
        tokens = _DIALECT.tokenize(script)
    except TokenError as e:
        raise ProgrammingError(f"syntax error: {e}") from None
    out, start = [], 0
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            text = script[start:t.start].strip()
            if text:
                out.append(text)
            start = t.end + 1
    tail = script[start:].strip()
    if tail and _DIALECT.tokenize(tail):
        out.append(tail)
    return out


NAMEDATALEN = 64  # as in PostgreSQL: an identifier takes at most NAMEDATALEN - 1 bytes


def check_identifier(name: str, quoted: bool = True) -> None:
    """Refuse an identifier PostgreSQL could not hold: longer than NAMEDATALEN - 1 bytes (PostgreSQL
    truncates it with a NOTICE; here it is an error, as two long names could otherwise meet), empty
    when quoted, or holding a control character (NUL included)."""
    from ..storage.catalog import check_storable, shown_name

    if quoted and not name:
        raise ProgrammingError('zero-length delimited identifier ("")')
    check_storable(name)
    size = len(name.encode("utf-8"))
    if size >= NAMEDATALEN:
        raise ProgrammingError(f"identifier {shown_name(name)} is too long: {size} bytes, the limit is "
                               f"{NAMEDATALEN - 1} (PostgreSQL's NAMEDATALEN - 1)")


def _tokens(sql: str, check_names: bool = True) -> list:
    """sqlglot's tokens of a statement; with `check_names`, its identifiers checked (check_identifier)."""
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as e:
        if sql.lstrip()[:13].upper().split() == ["CREATE", "SECRET"]:  # the message would quote the value
            raise ProgrammingError("syntax error in CREATE SECRET (an unterminated string?)") from None
        raise ProgrammingError(f"syntax error: {e}") from None
    if check_names:
        for t in tokens:
            if t.token_type in (TokenType.IDENTIFIER, TokenType.VAR):
                check_identifier(t.text, quoted=t.token_type == TokenType.IDENTIFIER)
    return tokens


def _words(sql: str, check_names: bool = True) -> list[str]:
    return [t.text.upper() for t in _tokens(sql, check_names)]


# Statements of DuckDB (and of PostgreSQL's server administration) that reach the host: its files
# (COPY, EXPORT / IMPORT DATABASE, ATTACH), its extensions (INSTALL, LOAD) or its settings (PRAGMA,
# RESET, USE, CALL of a table function). None has a meaning over a warehouse.
HOST_STATEMENTS = ("ATTACH", "CALL", "CHECKPOINT", "COPY", "DETACH", "EXPORT", "FORCE", "IMPORT", "INSTALL",
                   "LOAD", "PRAGMA", "RESET", "USE", "VACUUM")

# SET: the settings dagster-rw acts on, and RisingWave's session settings that only tune its
# physical plans (or mean nothing here): accepted and ignored, so that RisingWave scripts run, and
# answered by SHOW with the value set in the session, else RisingWave's default. Any other name is
# refused.
IMPLICIT_FLUSH_SETTINGS = ("rw_implicit_flush", "implicit_flush")
SETTING_DEFAULTS = {
    "rw_implicit_flush": "false", "implicit_flush": "false",
    "streaming_parallelism": "default", "streaming_max_parallelism": "256",
    "streaming_join_encoding": "memory_optimized", "sink_decouple": "default",
    "enable_two_phase_agg": "true", "rw_enable_two_phase_agg": "true", "rw_force_two_phase_agg": "false",
    "rw_force_split_distinct_agg": "false", "timezone": "UTC", "search_path": '"$user", public',
    "streaming_use_arrangement_backfill": "true", "streaming_use_snapshot_backfill": "false",
    "background_ddl": "false", "query_mode": "auto",
    "rw_streaming_enable_bushy_join": "true", "streaming_enable_bushy_join": "true",
    "streaming_enable_delta_join": "false", "rw_streaming_enable_delta_join": "false",
    "streaming_enable_unaligned_join": "false", "streaming_separate_consecutive_join": "false",
    "rw_streaming_over_window_cache_policy": "full", "streaming_over_window_cache_policy": "full",
    "rw_enable_share_plan": "true", "rw_enable_join_ordering": "true",
    "rw_streaming_allow_jsonb_in_stream_key": "false", "create_compaction_group_for_mv": "false",
    "streaming_force_filter_inside_join": "false", "streaming_unsafe_allow_unmaterialized_impure_expr": "false",
}
IGNORED_SETTINGS = frozenset(SETTING_DEFAULTS) - frozenset(IMPLICIT_FLUSH_SETTINGS)


def parse(sql: str, check_names: bool = True) -> Statement:
    """A statement classified and parsed. `check_names` refuses identifiers PostgreSQL could not
    hold (check_identifier): for statements users write; definitions read back from the catalog
    are taken as they were accepted."""
    sql = sql.strip().rstrip(";").strip()
    words = _words(sql, check_names)
    if not words:
        raise ProgrammingError("empty statement")
    head = words[0]
    if "CHANGELOG" in words:  # RisingWave's changelog CTE, as a subquery the planner knows (sql.changelog)
        from .changelog import rewrite

        rewritten = rewrite(sql, _DIALECT.tokenize(sql))
        if rewritten is not None:
            statement = parse(rewritten, check_names)
            statement.sql = sql
            return statement
    if head in HOST_STATEMENTS:
        raise unsupported(f"the statement {head} (dagster-rw reads and writes its warehouse only: no statement "
                          "reaches files, extensions or settings of the host)")
    if head == "FLUSH" and len(words) == 1:
        return Flush(sql)
    if head == "EXPLAIN":
        toks = _DIALECT.tokenize(sql)
        return Explain(sql, inner=parse(sql[toks[0].end + 1:], check_names))
    if head == "SHOW":
        return Show(sql, what=" ".join(words[1:]))
    if head in ("DESCRIBE", "DESC"):
        return Describe(sql, name=words[1].lower() if len(words) > 1 else "")
    if head == "SET":
        return _parse_set(sql, words)
    if head == "CREATE":
        return _parse_create(sql, words)
    if head == "DROP":
        return _parse_drop(sql, words)
    if head == "ALTER":
        from .renames import parse_alter

        return parse_alter(sql, words)
    tree = _parse(sql)
    if isinstance(tree, exp.Insert):
        return _parse_insert(sql, tree)
    if isinstance(tree, exp.Update):
        if tree.args.get("from_") or tree.args.get("returning"):
            raise unsupported("UPDATE ... FROM / RETURNING", sql, tree)
        assigns = [(a.this.name, a.expression) for a in tree.expressions]
        where = tree.args["where"].this if tree.args.get("where") else None
        return Update(sql, table=tree.this.name, assignments=assigns, where=where)
    if isinstance(tree, exp.Delete):
        if tree.args.get("using") or tree.args.get("returning"):
            raise unsupported("DELETE ... USING / RETURNING", sql, tree)
        where = tree.args["where"].this if tree.args.get("where") else None
        return Delete(sql, table=tree.this.name, where=where)
    if isinstance(tree, (exp.Select, exp.Union, exp.Except, exp.Intersect, exp.Subquery)):
        return Query(sql, query=tree)
    raise unsupported(f"the statement {head}", sql, tree)


def _parse_set(sql: str, words: list[str]) -> SetVar:
    toks = _DIALECT.tokenize(sql)
    if len(toks) < 3:
        raise ProgrammingError(f"syntax error in SET: {sql!r}")
    name = toks[1].text.lower()
    i = 2
    if toks[i].text.upper() in ("TO", "=") or toks[i].token_type == TokenType.EQ:
        i += 1
    value = " ".join(t.text for t in toks[i:]).strip("'\"").lower()
    if name not in IMPLICIT_FLUSH_SETTINGS and name not in IGNORED_SETTINGS:
        raise ProgrammingError(f'unrecognized configuration parameter "{name}"')
    return SetVar(sql, name=name, value=value)


def _parse_drop(sql: str, words: list[str]) -> Drop:
    if words[1] == "TABLE":
        kind, at = "table", 2
    elif words[1] == "SOURCE":
        kind, at = "source", 2
    elif words[1:3] == ["MATERIALIZED", "VIEW"]:
        kind, at = "materialized_view", 3
    elif words[1] == "FUNCTION":
        kind, at = "function", 2
    elif words[1] in ("SINK", "SECRET", "INDEX"):
        if_exists = words[2:4] == ["IF", "EXISTS"]
        toks = _DIALECT.tokenize(sql)
        if len(toks) != (5 if if_exists else 3):
            raise ProgrammingError(f"syntax error in DROP {words[1]}: expected DROP {words[1]} [IF EXISTS] name")
        name_tok = toks[-1]
        name = name_tok.text if name_tok.token_type == TokenType.IDENTIFIER else name_tok.text.lower()
        return Drop(sql, kind=words[1].lower(), name=name, if_exists=if_exists)
    else:
        raise unsupported(f"DROP {words[1]}", sql)
    if_exists = words[at:at + 2] == ["IF", "EXISTS"]
    tree = _parse(sql)
    name = tree.args["tables"][0].name if tree.args.get("tables") else tree.this.name
    return Drop(sql, kind=kind, name=name, if_exists=if_exists)


def _parse_create(sql: str, words: list[str]) -> Statement:
    if words[1:3] == ["MATERIALIZED", "VIEW"]:
        eowc = words[-4:] == ["EMIT", "ON", "WINDOW", "CLOSE"]
        body = sql
        if eowc:
            toks = _DIALECT.tokenize(sql)
            body = sql[:toks[-4].start].rstrip()
        tree = _parse(body)
        target, query = tree.this, tree.expression
        if isinstance(query, exp.Values):
            query = values_as_select(sql, query)
        if not isinstance(query, (exp.Select, exp.Union, exp.Except, exp.Intersect, exp.Subquery)):
            raise unsupported("CREATE MATERIALIZED VIEW without AS SELECT or VALUES", sql, tree)
        if isinstance(target, exp.Schema):
            # CREATE MATERIALIZED VIEW v (a, b) AS ...: name the outputs
            names = [i.name for i in target.expressions]
            target = target.this
            query = _rename_outputs(sql, query, names)
        if not target.name:
            raise ProgrammingError(f"CREATE MATERIALIZED VIEW needs a name: {sql!r}")
        return CreateView(sql, name=target.name, query=query, if_not_exists=bool(tree.args.get("exists")),
                          emit_on_window_close=eowc)
    if words[1] == "TABLE":
        return _parse_create_table(sql, words)
    if words[1] == "SOURCE":
        return _parse_create_source(sql, is_table=False)
    if words[1] == "SINK":
        from .sink_statements import parse_create_sink

        return parse_create_sink(sql)
    if words[1] == "SECRET" or words[1:5] == ["SECRET", "IF", "NOT", "EXISTS"]:
        from .secret_statements import parse_create_secret

        return parse_create_secret(sql)
    if words[1] == "INDEX":
        from .indexes import parse_create_index

        return parse_create_index(sql)
    if words[1] == "FUNCTION" or words[1:4] == ["OR", "REPLACE", "FUNCTION"]:
        from .functions import parse_create_function

        function, replace = parse_create_function(sql, _parse(sql), DIALECT)
        return CreateFunction(sql, function=function, replace=replace,
                              body=sqlglot.parse_one(function.body, read=DIALECT))
    what = " ".join(words[1:3]) if words[1] in ("MATERIALIZED", "OR") else words[1]
    raise unsupported(f"CREATE {what}", sql)


def _rename_outputs(sql: str, query: exp.Expression, names: list[str]) -> exp.Expression:
    """`query` with its output columns renamed, for a column list after the view's name."""
    if not isinstance(query, exp.Select) or any(isinstance(e, exp.Star) or
                                                (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
                                                for e in query.expressions):
        # the outputs are known once planned: name them there (the planner checks the count)
        alias = exp.TableAlias(this=exp.to_identifier(VIEW_COLUMNS),
                               columns=[exp.to_identifier(n) for n in names])
        return exp.select(exp.Star()).from_(exp.Subquery(this=query.copy(), alias=alias))
    if len(names) != len(query.expressions):
        raise ProgrammingError(
            f"the view's column list names {len(names)} columns but its query returns {len(query.expressions)}")
    query = query.copy()
    query.set("expressions", [exp.alias_(e.unalias() if isinstance(e, exp.Alias) else e, n)
                              for e, n in zip(query.expressions, names)])
    return query


def _parse_create_table(sql: str, words: list[str]) -> CreateTable:
    from .on_conflict import check_clause, split_clause

    text, conflict = split_clause(sql)
    if conflict:
        if any(w in ("AS", "CONNECTOR") for w in _words(text, False)):
            raise unsupported("ON CONFLICT on a table created AS SELECT or with a connector", sql)
        table = _parse_create_table(text, _words(text, False))
        check_clause(table.name, conflict, {c.name: c.type for c in table.columns}, table.pk, table.append_only)
        table.sql, table.on_conflict = sql, conflict
        return table
    append_only = words[-2:] == ["APPEND", "ONLY"]
    body = sql
    if append_only:
        toks = _DIALECT.tokenize(sql)
        body = sql[:toks[-2].start].rstrip()
    if "WITH" in words and "CONNECTOR" in words:
        return _parse_create_source(body, is_table=True)  # append-only whether or not it says so
    eowc = words[-4:] == ["EMIT", "ON", "WINDOW", "CLOSE"]
    if eowc:
        toks = _DIALECT.tokenize(sql)
        body = sql[:toks[-4].start].rstrip()
    tree = _parse(body)
    if not isinstance(tree, exp.Create):
        raise unsupported("this form of CREATE TABLE", sql, tree)
    if tree.expression is not None:
        query = tree.expression
        if not isinstance(query, (exp.Select, exp.Union, exp.Subquery)):
            raise unsupported("CREATE TABLE ... AS with anything but a query", sql, tree)
        target = tree.this
        if isinstance(target, exp.Schema):
            if any(not isinstance(i, exp.Identifier) for i in target.expressions):
                raise unsupported("column definitions in CREATE TABLE ... AS SELECT (name the columns only)",
                                  sql, target)
            query = _rename_outputs(sql, query, [i.name for i in target.expressions])
            target = target.this
        return CreateTable(sql, name=target.name, append_only=True, if_not_exists=bool(tree.args.get("exists")),
                           as_query=query, emit_on_window_close=eowc)
    if eowc:
        raise unsupported("EMIT ON WINDOW CLOSE on CREATE TABLE without AS SELECT", sql)
    schema = tree.this
    name = schema.this.name if isinstance(schema, exp.Schema) else schema.name
    columns: list[Column] = []
    pk: list[str] = []
    watermark = None
    defaults: list[tuple[str, exp.Expression]] = []
    for item in schema.expressions if isinstance(schema, exp.Schema) else []:
        if isinstance(item, exp.WatermarkColumnConstraint):
            if watermark is not None:
                raise unsupported("more than one WATERMARK", sql, item)
            watermark = (item.this.name, item.expression)
            continue
        if isinstance(item, exp.ColumnDef):
            cname = item.this.name
            if item.args.get("kind") is None:
                raise ProgrammingError(f'column "{cname}" of {name!r} has no type')
            columns.append(Column(cname, sqltypes.canonical(item.args["kind"], name, cname)))
            for c in item.args.get("constraints") or []:
                if isinstance(c.kind, exp.PrimaryKeyColumnConstraint):
                    pk.append(cname)
                elif isinstance(c.kind, (exp.NotNullColumnConstraint,)):
                    pass
                elif isinstance(c.kind, exp.DefaultColumnConstraint):
                    defaults.append((cname, c.kind.this))
                    columns[-1].default = default_sql(c.kind.this, columns[-1].type, f"{name}.{cname}", sql)
                else:
                    raise unsupported(f"the column constraint {c.sql(dialect='postgres')}", sql, c)
        elif isinstance(item, exp.PrimaryKey):
            if pk:
                raise ProgrammingError(f"multiple primary keys for table {name!r} are not allowed")
            pk = [e.name for e in item.expressions]
        else:
            raise unsupported(f"{item.sql(dialect='postgres')} in CREATE TABLE", sql, item)
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ProgrammingError(f"column specified more than once in {name!r}")
    for k in pk:
        if k not in names:
            raise ProgrammingError(f'column "{k}" named in key does not exist in {name!r}')
    return CreateTable(sql, name=name, columns=columns, pk=pk, append_only=append_only,
                       if_not_exists=bool(tree.args.get("exists")), watermark=watermark, defaults=defaults)



def _redact_literal_secrets(sql: str, options: dict[str, str], references: dict[str, str]) -> str:
    """The statement's text as the catalog keeps it and SHOW displays it: the literal value of a
    secret-like option (s3.credentials.secret, ...) replaced by '***' (the option itself is kept
    encrypted, see storage.secrets); `secret name` and 'env:NAME' stay as written."""
    from ..storage.secrets import ENV, REDACTED, is_secret_option

    for key, value in options.items():
        if key in references or not value or value.startswith(ENV) or not is_secret_option(key):
            continue
        sql = sql.replace("'" + value.replace("'", "''") + "'", f"'{REDACTED}'")
    return sql


def _parse_create_source(sql: str, is_table: bool) -> CreateSource:
    """CREATE SOURCE / CREATE TABLE ... WITH (connector = ...) FORMAT ... ENCODE ... (...)."""
    what = "CREATE TABLE" if is_table else "CREATE SOURCE"
    from .secret_statements import replace_references

    parsed_sql, references = replace_references(sql)
    tree = _parse(parsed_sql)
    if not isinstance(tree, exp.Create) or tree.expression is not None:
        raise unsupported(f"this form of {what}", sql, tree)
    schema = tree.this
    if not isinstance(schema, exp.Schema):
        raise ProgrammingError(f"{what} needs a column list (schema inference is not supported): {sql!r}")
    name = schema.this.name
    columns: list[Column] = []
    watermark = None
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            cname = item.this.name
            if item.args.get("kind") is None:
                raise ProgrammingError(f'column "{cname}" of {name!r} has no type')
            for c in item.args.get("constraints") or []:
                if isinstance(c.kind, exp.PrimaryKeyColumnConstraint):
                    raise unsupported(f"a primary key on {name!r} with FORMAT PLAIN (sources are append-only)",
                                      sql, c)
                if not isinstance(c.kind, exp.NotNullColumnConstraint):
                    raise unsupported(f"the column constraint {c.sql(dialect='postgres')}", sql, c)
            columns.append(Column(cname, sqltypes.canonical(item.args["kind"], name, cname)))
        elif isinstance(item, exp.WatermarkColumnConstraint):
            if watermark is not None:
                raise unsupported("more than one WATERMARK", sql, item)
            watermark = (item.this.name, item.expression)
        elif isinstance(item, exp.PrimaryKey):
            raise unsupported(f"a primary key on {name!r} with FORMAT PLAIN (sources are append-only)", sql, item)
        else:
            raise unsupported(f"{item.sql(dialect='postgres')} in {what}", sql, item)
    names = [c.name for c in columns]
    if not names:
        raise ProgrammingError(f"{what} {name} needs at least one column")
    if len(set(names)) != len(names):
        raise ProgrammingError(f"column specified more than once in {name!r}")
    options: dict[str, str] = {}
    fmt, encode, encode_options = "", "", {}
    for prop in (tree.args.get("properties").expressions if tree.args.get("properties") else []):
        if isinstance(prop, exp.FileFormatProperty):
            fmt = prop.this.name.lower()
        elif isinstance(prop, exp.EncodeProperty):
            encode = prop.this.name.lower()
            inner = prop.args.get("properties")
            for p in inner.expressions if inner is not None else []:
                encode_options[_property_key(p)] = _property_value(parsed_sql, p)
        elif isinstance(prop, exp.Property):
            options[_property_key(prop)] = _property_value(parsed_sql, prop)
        else:
            raise unsupported(f"{prop.sql(dialect=DIALECT)} in {what}", sql, prop)
    sql = _redact_literal_secrets(sql, options, references)
    return CreateSource(sql, name=name, columns=columns, options=options, format=fmt, encode=encode,
                        encode_options=encode_options, watermark=watermark, is_table=is_table,
                        if_not_exists=bool(tree.args.get("exists")), secret_options=references)


def _property_key(prop: exp.Property) -> str:
    key = prop.this
    return (key.name if isinstance(key, (exp.Var, exp.Identifier, exp.Literal)) else key.sql()).lower()


def _property_value(sql: str, prop: exp.Property) -> str:
    value = prop.args.get("value")
    if isinstance(value, exp.Boolean):
        return "true" if value.this else "false"
    if isinstance(value, (exp.Literal, exp.Var, exp.Identifier)):
        return value.name
    raise unsupported(f"the option value {value.sql(dialect=DIALECT) if value else ''} (use a string literal)",
                      sql, prop)


def _parse_insert(sql: str, tree: exp.Insert) -> Insert:
    target = tree.this
    cols = None
    if isinstance(target, exp.Schema):
        cols = [i.name for i in target.expressions]
        target = target.this
    if tree.args.get("returning") or tree.args.get("conflict"):
        raise unsupported("INSERT ... ON CONFLICT / RETURNING", sql, tree)
    return Insert(sql, table=target.name, columns=cols, source=tree.expression)


def values_as_select(sql: str, values: exp.Values) -> exp.Expression:
    """`VALUES (a, b), (c, d)` as `SELECT a AS column1, b AS column2 UNION ALL SELECT c, d`: the
    rows once, named as PostgreSQL names them, typed as a UNION types them."""
    rows = [list(t.expressions) if isinstance(t, exp.Tuple) else [t] for t in values.expressions]
    if any(len(r) != len(rows[0]) for r in rows):
        raise ProgrammingError(f"VALUES lists must all be the same length: {sql!r}")
    if any(n.find(exp.Select, exp.Column) for r in rows for n in r):
        raise unsupported("a column or a subquery in VALUES", sql, values)
    first = exp.select(*[e.copy().as_(f"column{i + 1}") for i, e in enumerate(rows[0])])
    out: exp.Expression = first
    for r in rows[1:]:
        out = exp.union(out, exp.select(*[e.copy() for e in r]), distinct=False)
    return out


def view_query(sql: str) -> exp.Expression:
    """The query of a stored CREATE MATERIALIZED VIEW statement."""
    from .indexes import CreateIndex

    st = parse(sql, check_names=False)
    if isinstance(st, CreateTable) and st.as_query is not None:
        return st.as_query
    if isinstance(st, CreateIndex):
        return st.query
    assert isinstance(st, CreateView)
    return st.query


def view_emits_on_window_close(sql: str) -> bool:
    st = parse(sql, check_names=False)
    return isinstance(st, (CreateView, CreateTable)) and st.emit_on_window_close
