"""ALTER TABLE ... ADD [COLUMN] name type / DROP [COLUMN] [IF EXISTS] name: the statement, and the
table's stored CREATE TABLE rewritten to match (its column list edited where the parser found it).
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.tokens import TokenType

from .. import types as sqltypes
from ..errors import ProgrammingError, unsupported
from ..storage.catalog import Column
from .defaults import default_sql
from .dialect import _DIALECT, Statement, _parse


@dataclass
class AlterColumns(Statement):
    table: str = ""
    add: Column | None = None
    add_sql: str = ""  # the new column's definition as written (name, type, DEFAULT)
    default: exp.Expression | None = None  # the new column's DEFAULT as written (checked as any call)
    drop: str | None = None
    if_exists: bool = False


def parse_alter_columns(sql: str) -> AlterColumns:
    tree = _parse(sql)
    if not isinstance(tree, exp.Alter) or len(tree.args.get("actions") or []) != 1:
        raise unsupported("this form of ALTER TABLE (one ADD COLUMN or DROP COLUMN at a time)", sql)
    table = tree.this.name
    action = tree.args["actions"][0]
    if isinstance(action, exp.ColumnDef):
        if action.args.get("kind") is None:
            raise ProgrammingError(f'ALTER TABLE {table}: column "{action.name}" has no type')
        column = Column(action.name, sqltypes.canonical(action.args["kind"], table, action.name))
        default = None
        for c in action.args.get("constraints") or []:
            if not isinstance(c.kind, exp.DefaultColumnConstraint):
                raise unsupported(f"{c.sql(dialect='postgres')} in ALTER TABLE {table} ADD COLUMN", sql, c)
            default = c.kind.this
            column.default = default_sql(default, column.type, f"{table}.{action.name}", sql)
        return AlterColumns(sql, table=table, add=column, add_sql=action.sql(dialect="postgres"), default=default)
    if isinstance(action, exp.Drop) and (action.args.get("kind") or "").upper() == "COLUMN":
        if action.args.get("cascade"):
            raise unsupported(f"DROP COLUMN ... CASCADE on {table!r}", sql)
        return AlterColumns(sql, table=table, drop=action.args["tables"][0].name,
                            if_exists=bool(action.args.get("exists")))
    raise unsupported(f"ALTER TABLE {table} {action.key.upper()}", sql)


def _column_segments(tokens) -> tuple[int, int, list[tuple[int, int]]]:
    """(opening, closing) token positions of a CREATE TABLE's column list and its comma-separated
    items as (first, last) token positions."""
    start = next(i for i, t in enumerate(tokens) if t.token_type == TokenType.L_PAREN)
    depth, items, first = 0, [], start + 1
    for i in range(start, len(tokens)):
        kind = tokens[i].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                items.append((first, i - 1))
                return start, i, items
        elif kind == TokenType.COMMA and depth == 1:
            items.append((first, i - 1))
            first = i + 1
    raise ProgrammingError("the stored CREATE TABLE has no column list")


def with_column_added(sql: str, definition: str) -> str:
    """A stored CREATE TABLE with `definition` added at the end of its column list."""
    tokens = _DIALECT.tokenize(sql)
    _, closing, items = _column_segments(tokens)
    last = tokens[items[-1][1]]
    return sql[:last.end + 1] + ", " + definition + sql[last.end + 1:]


def with_column_dropped(sql: str, column: str) -> str:
    """A stored CREATE TABLE without the definition of `column`."""
    tokens = _DIALECT.tokenize(sql)
    _, _, items = _column_segments(tokens)

    def named(item):
        tok = tokens[item[0]]
        return (tok.text if tok.token_type == TokenType.IDENTIFIER else tok.text.lower()) == column

    at = next(n for n, item in enumerate(items) if named(item))
    if at > 0:  # from the end of the item before (its comma included) to the end of this one
        return sql[:tokens[items[at - 1][1]].end + 1] + sql[tokens[items[at][1]].end + 1:]
    return sql[:tokens[items[0][0]].start] + sql[tokens[items[1][0]].start:]

