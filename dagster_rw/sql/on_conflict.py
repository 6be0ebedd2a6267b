"""CREATE TABLE ... ON CONFLICT: what an insert does to a row its primary key already holds.

    ON CONFLICT { DO NOTHING | IGNORE | DO UPDATE FULL | OVERWRITE | DO UPDATE IF NOT NULL }
        [ WITH VERSION COLUMN ( column ) ]

As in RisingWave: OVERWRITE (DO UPDATE FULL) is the default, the new row replaces the old; DO
NOTHING keeps the old row; DO UPDATE IF NOT NULL replaces the old row's columns where the new row
is not NULL. With a version column (not with DO NOTHING) a row takes effect only when its version
is greater than or equal to the stored row's (NULL below every value). The clause is kept in the
table's options (ON_CONFLICT, VERSION_COLUMN) and applied where staged rows meet the stored ones
(runtime/conflicts.py).
"""
from __future__ import annotations

from sqlglot.tokens import TokenType

from ..errors import ProgrammingError, unsupported
from .dialect import _DIALECT

ON_CONFLICT = "on_conflict"  # option: NOTHING | UPDATE_FULL | IF_NOT_NULL (absent: the default, overwrite)
VERSION_COLUMN = "version_column"
NOTHING, UPDATE_FULL, IF_NOT_NULL = "nothing", "update_full", "if_not_null"
_ACTIONS = {("DO", "NOTHING"): NOTHING, ("IGNORE",): NOTHING, ("DO", "UPDATE", "FULL"): UPDATE_FULL,
            ("OVERWRITE",): UPDATE_FULL, ("DO", "UPDATE", "IF", "NOT", "NULL"): IF_NOT_NULL}


def split_clause(sql: str) -> tuple[str, dict]:
    """The CREATE TABLE statement without its ON CONFLICT clause (what follows it moved up), and
    the clause as table options ({} when there is none)."""
    tokens = _DIALECT.tokenize(sql)
    depth, at = 0, None
    for i, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.text.upper() == "ON" and i + 1 < len(tokens) and tokens[i + 1].text.upper() == "CONFLICT":
            at = i
            break
    if at is None:
        return sql, {}
    words = [t.text.upper() for t in tokens]
    i = at + 2
    action = next((a for a in sorted(_ACTIONS, key=len, reverse=True) if tuple(words[i:i + len(a)]) == a), None)
    if action is None:
        raise unsupported(f"ON CONFLICT {' '.join(words[i:i + 3])} (DO NOTHING, DO UPDATE FULL, "
                          "DO UPDATE IF NOT NULL)", sql)
    options = {ON_CONFLICT: _ACTIONS[action]}
    i += len(action)
    if words[i:i + 3] == ["WITH", "VERSION", "COLUMN"]:
        if i + 5 >= len(tokens) or tokens[i + 3].token_type != TokenType.L_PAREN \
                or tokens[i + 5].token_type != TokenType.R_PAREN:
            raise ProgrammingError("syntax error in WITH VERSION COLUMN: expected WITH VERSION COLUMN (column)")
        name = tokens[i + 4]
        options[VERSION_COLUMN] = name.text if name.token_type == TokenType.IDENTIFIER else name.text.lower()
        i += 6
    end = tokens[i].start if i < len(tokens) else len(sql)
    return sql[:tokens[at].start].rstrip() + (" " + sql[end:] if i < len(tokens) else ""), options


def check_clause(table: str, options: dict, columns: dict[str, str], pk: list[str], append_only: bool) -> None:
    """Refuse an ON CONFLICT clause the table cannot have, naming the table and the cause."""
    action = options.get(ON_CONFLICT)
    if action is None:
        return
    if not pk:
        raise ProgrammingError(f"CREATE TABLE {table}: ON CONFLICT needs a primary key (without one no two rows "
                               "conflict)")
    if append_only:
        raise unsupported(f"ON CONFLICT on the APPEND ONLY table {table!r}")
    version = options.get(VERSION_COLUMN)
    if version is None:
        return
    if action == NOTHING:
        raise ProgrammingError(f"CREATE TABLE {table}: WITH VERSION COLUMN needs ON CONFLICT DO UPDATE FULL or "
                               "DO UPDATE IF NOT NULL (DO NOTHING never replaces a row)")
    if version not in columns:
        raise ProgrammingError(f'CREATE TABLE {table}: the version column "{version}" does not exist')
    if version in pk:
        raise ProgrammingError(f'CREATE TABLE {table}: the version column "{version}" is part of the primary key')
    if columns[version] in ("boolean", "jsonb") or columns[version].endswith("[]"):
        raise ProgrammingError(f'CREATE TABLE {table}: the version column "{version}" has the type '
                               f"{columns[version]}, which has no order for versions")
