"""ALTER ... RENAME TO: the statement, and the stored definitions rewritten for the new name.

A definition is rewritten in its text, not regenerated: each identifier that names the renamed
relation (a FROM item, a column's qualifier, a sink's FROM / INTO, the object's own name) is
replaced where the parser found it, so the rest of the statement stays as the user wrote it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import TokenType

from ..errors import ProgrammingError, unsupported
from .dialect import _DIALECT, DIALECT, Statement

KINDS = {"TABLE": "table", "SOURCE": "source", "SINK": "sink", "MATERIALIZED VIEW": "materialized_view"}
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass
class Rename(Statement):
    kind: str = ""  # table | source | sink | materialized_view
    name: str = ""
    new_name: str = ""


def _name(tok) -> str:
    return tok.text if tok.token_type == TokenType.IDENTIFIER else tok.text.lower()


def parse_alter(sql: str, words: list[str]) -> Rename:
    """ALTER {TABLE | MATERIALIZED VIEW | SOURCE | SINK} name RENAME TO new_name, and ALTER TABLE's
    ADD / DROP COLUMN (sql/alter_columns.py); any other ALTER is refused by name."""
    kind_words = 3 if words[1:3] == ["MATERIALIZED", "VIEW"] else 2
    what = " ".join(words[1:kind_words])
    if what not in KINDS:
        raise unsupported(f"ALTER {words[1] if len(words) > 1 else ''}".rstrip(), sql)
    tokens = _DIALECT.tokenize(sql)
    rest = tokens[kind_words:]
    if len(rest) == 4 and [t.text.upper() for t in rest[1:3]] == ["RENAME", "TO"]:
        return Rename(sql, kind=KINDS[what], name=_name(rest[0]), new_name=_name(rest[3]))
    if what == "TABLE" and len(rest) > 1 and rest[1].text.upper() in ("ADD", "DROP"):
        from .alter_columns import parse_alter_columns

        return parse_alter_columns(sql)
    action = " ".join(t.text.upper() for t in rest[1:3]) if len(rest) > 1 else ""
    raise unsupported(f"ALTER {what} ... {action}".rstrip() + " (ALTER ... RENAME TO and ALTER TABLE ... ADD / DROP "
                      "COLUMN are supported)", sql)


def quoted(name: str) -> str:
    """`name` as SQL writes it: bare when PostgreSQL would read it back unchanged, else quoted."""
    if _PLAIN.fullmatch(name) and _DIALECT.tokenize(name)[0].token_type == TokenType.VAR:
        return name
    return '"' + name.replace('"', '""') + '"'


def _spliced(sql: str, spans: list[tuple[int, int]], text: str) -> str:
    for start, end in sorted(set(spans), reverse=True):
        sql = sql[:start] + text + sql[end + 1:]
    return sql


def _identifier_name(ident: exp.Identifier) -> str:
    return ident.name if ident.quoted else ident.name.lower()


def _name_token(tokens, after: int) -> int:
    """The position of the object's name in a CREATE statement's tokens, the first `after` of which
    are its kind's words (CREATE, MATERIALIZED, VIEW, ...)."""
    i = after
    if [t.text.upper() for t in tokens[i:i + 3]] == ["IF", "NOT", "EXISTS"]:
        i += 3
    return i


def renamed_definition(sql: str, new_name: str) -> str:
    """A stored CREATE statement with its own name replaced by `new_name`."""
    tokens = _DIALECT.tokenize(sql)
    words = [t.text.upper() for t in tokens]
    after = 3 if words[1:3] == ["MATERIALIZED", "VIEW"] else 2
    tok = tokens[_name_token(tokens, after)]
    return _spliced(sql, [(tok.start, tok.end)], quoted(new_name))


def renamed_references(sql: str, old: str, new: str) -> str:
    """A stored CREATE statement (of a view, a table AS SELECT or a sink) with every reference to
    relation `old` made a reference to `new`. Raises ProgrammingError where the statement also uses
    `old` for a name of its own (an alias, a WITH query), which a rewrite could not tell apart."""
    tokens = _DIALECT.tokenize(sql)
    words = [t.text.upper() for t in tokens]
    if words[1] == "SINK":
        return _renamed_in_sink(sql, tokens, old, new)
    body_end = len(sql)
    for tail in (["EMIT", "ON", "WINDOW", "CLOSE"], ["APPEND", "ONLY"]):
        if words[-len(tail):] == tail:
            body_end = tokens[-len(tail)].start
            break
    return _renamed_in_query(sql, 0, body_end, old, new)


def _renamed_in_query(sql: str, start: int, end: int, old: str, new: str) -> str:
    """sql[start:end] (a statement or query that parses alone) with relation `old` renamed to `new`."""
    try:
        tree = sqlglot.parse_one(sql[start:end], read=DIALECT)
    except ParseError as e:
        raise ProgrammingError(f"the stored definition does not parse again: {e}") from None
    # (a WITH query's name, a FROM item's or a subquery's alias: each is a TableAlias)
    if any(isinstance(a.this, exp.Identifier) and _identifier_name(a.this) == old
           for a in tree.find_all(exp.TableAlias)):
        raise ProgrammingError(f"it also uses the name {old!r} for an alias or a WITH query")
    spans = []
    for table in tree.find_all(exp.Table):
        ident = table.this
        if isinstance(ident, exp.Identifier) and _identifier_name(ident) == old and not table.args.get("catalog"):
            spans.append(ident)
    for column in tree.find_all(exp.Column):
        ident = column.args.get("table")
        if isinstance(ident, exp.Identifier) and _identifier_name(ident) == old:
            spans.append(ident)
    positions = []
    for ident in spans:
        if "start" not in ident.meta:
            raise ProgrammingError(f"the parser did not locate a reference to {old!r}")
        positions.append((start + ident.meta["start"], start + ident.meta["end"]))
    return _spliced(sql, positions, quoted(new))


def _renamed_in_sink(sql: str, tokens, old: str, new: str) -> str:
    """CREATE SINK name [INTO table] {FROM relation | AS query} ...: its INTO and FROM names, or the
    query's references, renamed."""
    i = _name_token(tokens, 2) + 1
    spans = []
    while i < len(tokens):
        word = tokens[i].text.upper()
        if word in ("INTO", "FROM") and i + 1 < len(tokens):
            if _name(tokens[i + 1]) == old:
                spans.append((tokens[i + 1].start, tokens[i + 1].end))
            i += 2
            continue
        if word == "AS":
            end = next((t.start for t in tokens[i + 1:] if t.text.upper() == "WITH"
                        and t.token_type != TokenType.IDENTIFIER and _depth(tokens, t) == 0), len(sql))
            text = _renamed_in_query(sql, tokens[i + 1].start, end, old, new)
            return _spliced(text, spans, quoted(new))  # (the spans lie before the query)
        break
    return _spliced(sql, spans, quoted(new))


def _depth(tokens, target) -> int:
    depth = 0
    for t in tokens:
        if t is target:
            return depth
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
    return depth
