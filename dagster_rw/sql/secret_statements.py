"""CREATE SECRET and the `key = secret name` form of a connector option, as in RisingWave:

    CREATE SECRET [IF NOT EXISTS] name WITH (backend = 'meta') AS 'value'
    DROP SECRET [IF EXISTS] name
    SHOW SECRETS
    CREATE SINK ... WITH (..., password = secret name)

No error raised here quotes the secret's value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot.tokens import Token, TokenType

from ..errors import ProgrammingError, unsupported
from .dialect import _DIALECT, Statement

BACKENDS = ("meta",)


@dataclass
class CreateSecret(Statement):
    name: str = ""
    value: str = field(default="", repr=False)
    backend: str = "meta"
    if_not_exists: bool = False


def _name(tok: Token) -> str:
    return tok.text if tok.token_type == TokenType.IDENTIFIER else tok.text.lower()


def parse_create_secret(sql: str) -> CreateSecret:
    tokens = _DIALECT.tokenize(sql)
    words = [t.text.upper() for t in tokens]
    i = 2
    if_not_exists = words[i:i + 3] == ["IF", "NOT", "EXISTS"]
    if if_not_exists:
        i += 3
    if i >= len(tokens) or tokens[i].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
        raise ProgrammingError("syntax error in CREATE SECRET: expected a name "
                               "(CREATE SECRET name WITH (backend = 'meta') AS 'value')")
    name = _name(tokens[i])
    i += 1
    backend = "meta"
    if i < len(words) and words[i] == "WITH":
        if i + 1 >= len(tokens) or tokens[i + 1].token_type != TokenType.L_PAREN:
            raise ProgrammingError(f"syntax error in CREATE SECRET {name}: expected ( after WITH")
        j = i + 2
        while j < len(tokens) and tokens[j].token_type != TokenType.R_PAREN:
            key = tokens[j].text.lower()
            if j + 2 >= len(tokens) or tokens[j + 1].token_type != TokenType.EQ:
                raise ProgrammingError(f"syntax error in CREATE SECRET {name}: expected `key = 'value'` in WITH")
            value = tokens[j + 2].text
            if key != "backend":
                raise unsupported(f"the option {key} of CREATE SECRET (only backend = 'meta')", obj=name)
            backend = value.lower()
            j += 3
            if j < len(tokens) and tokens[j].token_type == TokenType.COMMA:
                j += 1
        if j >= len(tokens):
            raise ProgrammingError(f"syntax error in CREATE SECRET {name}: unbalanced parentheses")
        i = j + 1
    if backend not in BACKENDS:
        raise unsupported(f"the secret backend {backend!r} (only 'meta': the value is stored encrypted in the "
                          "warehouse's catalog)", obj=name)
    if i >= len(words) or words[i] != "AS":
        raise ProgrammingError(f"syntax error in CREATE SECRET {name}: expected AS 'value'")
    if i + 2 != len(tokens) or tokens[i + 1].token_type != TokenType.STRING:
        raise ProgrammingError(f"syntax error in CREATE SECRET {name}: AS takes one string literal")
    value = tokens[i + 1].text
    if not value:
        raise ProgrammingError(f"CREATE SECRET {name}: the value is empty")
    # the statement's text keeps no value: it is what any error, log or listing may show
    return CreateSecret(f"CREATE SECRET {name} WITH (backend = '{backend}') AS '***'", name=name, value=value,
                        backend=backend, if_not_exists=if_not_exists)


def secret_reference(part: list[Token]) -> str | None:
    """The secret's name when the tokens of one WITH option after its key are `= SECRET name`."""
    if len(part) == 3 and part[0].token_type == TokenType.EQ and part[1].text.upper() == "SECRET" \
            and part[2].token_type in (TokenType.VAR, TokenType.IDENTIFIER):
        return _name(part[2])
    return None


def replace_references(sql: str) -> tuple[str, dict[str, str]]:
    """`sql` with each top-level WITH option written `key = secret name` turned into `key = 'name'`
    (so that sqlglot parses it), and those options' keys (as written, lower case) with the names."""
    tokens = _DIALECT.tokenize(sql)
    found: dict[str, str] = {}
    edits = []
    for i in range(1, len(tokens) - 2):
        if tokens[i].token_type != TokenType.EQ:
            continue
        name = secret_reference(tokens[i:i + 3])
        if name is None or (i + 3 < len(tokens) and tokens[i + 3].token_type not in (TokenType.COMMA,
                                                                                        TokenType.R_PAREN)):
            continue
        k = i - 1
        while k > 0 and tokens[k - 1].token_type not in (TokenType.COMMA, TokenType.L_PAREN):
            k -= 1
        key = "".join(t.text for t in tokens[k:i]).lower()
        found[key] = name
        edits.append((tokens[i + 1].start, tokens[i + 2].end + 1, "'" + name.replace("'", "''") + "'"))
    for start, end, text in reversed(edits):
        sql = sql[:start] + text + sql[end:]
    return sql, found
