"""CREATE SINK, parsed from sqlglot's tokens: the sink's name, what it reads, its WITH options and FORMAT.

    CREATE SINK [IF NOT EXISTS] name [INTO table] { FROM object | AS query }
        WITH (key = value, ...) [FORMAT PLAIN | UPSERT ENCODE JSON [(key = value, ...)]]

Secrets (a password) are kept in the options but cut out of the statement text that is stored and shown;
an option written `key = secret name` refers to a secret CREATE SECRET stored (its name is kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from ..errors import ProgrammingError
from ..storage.secrets import REDACTED, is_secret_option as is_secret
from .dialect import _DIALECT, Statement, _parse
from .secret_statements import secret_reference


@dataclass
class CreateSink(Statement):
    name: str = ""
    from_name: str | None = None  # CREATE SINK ... FROM relation
    query: exp.Expression | None = None  # CREATE SINK ... AS query
    query_sql: str = ""
    into: str | None = None  # CREATE SINK ... INTO table
    options: dict[str, str] = field(default_factory=dict, repr=False)
    format: str | None = None  # PLAIN | UPSERT
    encode: str | None = None  # JSON
    if_not_exists: bool = False
    secret_options: set[str] = field(default_factory=set)  # options written `key = secret name`


def _name(tok: Token) -> str:
    return tok.text if tok.token_type == TokenType.IDENTIFIER else tok.text.lower()


def _closing(tokens: list[Token], open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(tokens)):
        if tokens[i].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[i].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return i
    raise ProgrammingError("syntax error in CREATE SINK: unbalanced parentheses")


def _options(sql: str, tokens: list[Token], start: int, end: int, sink: str,
             references: set | None = None) -> tuple[dict, list[Token]]:
    """`key = value` pairs between tokens start and end (exclusive); also the value tokens of secrets.
    An option `key = secret name` has the secret's name as its value, and its key goes in `references`."""
    options, secrets = {}, []
    parts, current, depth = [], [], 0
    for t in tokens[start:end]:
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        if t.token_type == TokenType.COMMA and depth == 0:
            parts.append(current)
            current = []
        else:
            current.append(t)
    if current:
        parts.append(current)
    for part in parts:
        eq = next((i for i, t in enumerate(part) if t.token_type == TokenType.EQ), None)
        reference = secret_reference(part[eq:]) if eq is not None and references is not None else None
        if reference is not None:
            key = "".join(t.text if t.token_type == TokenType.DOT else _name(t) for t in part[:eq])
            if key in options:
                raise ProgrammingError(f"CREATE SINK {sink}: option {key!r} is given twice")
            options[key] = reference
            references.add(key)
            continue
        if eq is None or eq == 0 or eq != len(part) - 2:
            text = sql[part[0].start:part[-1].end + 1] if part else ""
            raise ProgrammingError(f"CREATE SINK {sink}: expected `key = 'value'` in WITH, got {text!r}")
        key = "".join(t.text if t.token_type == TokenType.DOT else _name(t) for t in part[:eq])
        value_tok = part[-1]
        value = value_tok.text if value_tok.token_type in (TokenType.STRING, TokenType.NUMBER, TokenType.IDENTIFIER) \
            else value_tok.text.lower()
        if key in options:
            raise ProgrammingError(f"CREATE SINK {sink}: option {key!r} is given twice")
        options[key] = value
        if is_secret(key):
            secrets.append(value_tok)
    return options, secrets


def _redact(sql: str, secrets: list[Token]) -> str:
    for t in sorted(secrets, key=lambda t: t.start, reverse=True):
        sql = sql[:t.start] + f"'{REDACTED}'" + sql[t.end + 1:]
    return sql


def parse_create_sink(sql: str) -> CreateSink:
    """Parse CREATE SINK; an error message never carries a secret written in the statement."""
    try:
        return _parse_create_sink(sql)
    except ProgrammingError as e:
        message = str(e)
        tokens = _DIALECT.tokenize(sql)
        for i, t in enumerate(tokens[:-2]):
            if is_secret(t.text) and tokens[i + 1].token_type == TokenType.EQ and tokens[i + 2].text \
                    and secret_reference(tokens[i + 1:i + 4]) is None:
                message = message.replace(tokens[i + 2].text, REDACTED)
        raise ProgrammingError(message) from None


def _parse_create_sink(sql: str) -> CreateSink:
    tokens = _DIALECT.tokenize(sql)
    words = [t.text.upper() for t in tokens]
    i = 2
    if_not_exists = words[i:i + 3] == ["IF", "NOT", "EXISTS"]
    if if_not_exists:
        i += 3
    if i >= len(tokens):
        raise ProgrammingError(f"CREATE SINK needs a name: {sql!r}")
    name = _name(tokens[i])
    i += 1
    into = None
    if i < len(words) and words[i] == "INTO":
        into = _name(tokens[i + 1])
        i += 2
    # the sink's WITH: the last top-level WITH followed by a parenthesis (a CTE's WITH is followed by a name)
    depth, with_at = 0, None
    for j in range(i, len(tokens) - 1):
        tt = tokens[j].token_type
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN:
            depth -= 1
        elif tt == TokenType.WITH and depth == 0 and tokens[j + 1].token_type == TokenType.L_PAREN:
            with_at = j
    if with_at is None and into is None:
        raise ProgrammingError(f"CREATE SINK {name}: a WITH (connector = ...) clause is needed")
    references: set[str] = set()
    if with_at is None:  # INTO a table needs no options
        with_at = close = len(tokens)
        options, secrets = {}, []
    else:
        close = _closing(tokens, with_at + 1)
        options, secrets = _options(sql, tokens, with_at + 2, close, name, references)
    fmt = enc = None
    rest = words[close + 1:]
    if rest:
        if rest[0] != "FORMAT" or len(rest) < 4 or rest[2] != "ENCODE":
            raise ProgrammingError(f"CREATE SINK {name}: expected FORMAT ... ENCODE ... after WITH (...), "
                                   f"got {sql[tokens[close + 1].start:]!r}")
        fmt, enc = rest[1], rest[3]
        if len(rest) > 4:
            open_at = close + 5
            if tokens[open_at].token_type != TokenType.L_PAREN:
                raise ProgrammingError(f"CREATE SINK {name}: unexpected {words[open_at]!r} after ENCODE {enc}")
            end = _closing(tokens, open_at)
            more_refs: set[str] = set()
            more, more_secrets = _options(sql, tokens, open_at + 1, end, name, more_refs)
            references |= {f"format.{k}" for k in more_refs}
            options.update({f"format.{k}": v for k, v in more.items()})
            secrets += more_secrets
    source = query = None
    query_sql = ""
    if i < len(words) and words[i] == "FROM":
        if with_at != i + 2:
            raise ProgrammingError(f"CREATE SINK {name}: FROM takes one table or materialized view name "
                                   "(use AS SELECT ... for a query)")
        source = _name(tokens[i + 1])
    elif i < len(words) and words[i] == "AS":
        query_sql = sql[tokens[i].end + 1:tokens[with_at].start if with_at < len(tokens) else len(sql)].strip()
        query = _parse(query_sql)
        if not isinstance(query, (exp.Select, exp.Union, exp.Except, exp.Intersect, exp.Subquery)):
            raise ProgrammingError(f"CREATE SINK {name}: AS must be followed by a query")
    else:
        raise ProgrammingError(f"CREATE SINK {name}: expected FROM <relation> or AS <query>")
    # the statement keeps only the redacted text: it is what the catalog stores and SHOW displays
    return CreateSink(_redact(sql, secrets), name=name, from_name=source, query=query, query_sql=query_sql, into=into,
                      options=options, format=fmt, encode=enc, if_not_exists=if_not_exists,
                      secret_options=references)
