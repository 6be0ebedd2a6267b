"""The SQL dialect dagster-rw speaks (RisingWave's as sqlglot knows it, with calls tagged for the
function catalog), the parse of one statement's text, and the base of every parsed statement."""
from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.risingwave import RisingWave
from sqlglot.errors import ParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokens import TokenType

from ..errors import ProgrammingError
from .function_catalog import ARGUMENT_COUNT, FUNCTION_NAME


def _named_call(name: str, parse):
    """A parser of a call written with its own syntax (CAST, EXTRACT, TRIM, CEIL, STRING_AGG, ...)
    that also tags the node with the name as written and its argument count (top-level commas)."""

    def parse_named(parser):
        count = _argument_count(parser._tokens, parser._index)
        node = parse(parser)
        if isinstance(node, exp.Expression):
            node.meta.setdefault(FUNCTION_NAME, name.lower())
            if count is not None:
                node.meta.setdefault(ARGUMENT_COUNT, count)
        return node

    return parse_named


def _argument_count(tokens: list, index: int) -> int | None:
    """The number of arguments of a call whose first argument token is tokens[index] (the commas of
    an ORDER BY inside the call, as in string_agg(x, ',' ORDER BY a, b), separate no arguments)."""
    if index >= len(tokens) or tokens[index].token_type == TokenType.R_PAREN:
        return 0
    depth, count, counting = 0, 1, True
    for t in tokens[index:]:
        if t.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE):
            depth += 1
        elif t.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE):
            if depth == 0:
                return count
            depth -= 1
        elif depth == 0 and t.token_type == TokenType.ORDER_BY:
            counting = False
        elif t.token_type == TokenType.COMMA and depth == 0 and counting:
            count += 1
    return None


def _row(args: list) -> exp.Expression:
    """ROW(a, b): a struct whose fields are named f1, f2, ... as PostgreSQL names a row's columns
    (sqlglot writes it as DuckDB's {'f1': a, ...} and Spark's STRUCT(a AS f1, ...))."""
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(f"f{i + 1}"), expression=a)
                                   for i, a in enumerate(args)])


def _row_cast(node: exp.Expression) -> exp.Expression:
    """ROW(...)::STRUCT<a ..., b ...>: the row's fields take the struct's names by position, as
    PostgreSQL casts a row to a composite type (DuckDB would match them by name)."""
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Struct) and node.to.this == exp.DType.STRUCT:
        names = [f.name for f in node.to.expressions if isinstance(f, exp.ColumnDef)]
        items = node.this.expressions
        if len(names) == len(items) and all(isinstance(i, exp.PropertyEQ) for i in items):
            for i, n in zip(items, names):
                i.set("this", exp.to_identifier(n))
    return node


class DagsterRw(RisingWave):
    """RisingWave's dialect as sqlglot knows it, plus the 12-hour `HH` of to_char (PostgreSQL's HH is
    HH12; sqlglot leaves it as text, and Spark would read the text as a 24-hour hour). Its parser
    tags every function call with the name as written and its argument count, which the function
    catalog checks (sql.function_catalog)."""

    TIME_MAPPING = {**RisingWave.TIME_MAPPING, "HH": "%I", "FMHH": "%-I"}
    ORIGINAL_NAME_META_KEY = FUNCTION_NAME  # calls of sqlglot's function table keep their name

    class Parser(RisingWave.Parser):
        FUNCTIONS = {**RisingWave.Parser.FUNCTIONS, "ROW": _row}
        FUNCTION_PARSERS = {name: _named_call(name, parse)
                            for name, parse in RisingWave.Parser.FUNCTION_PARSERS.items()}
        NO_PAREN_FUNCTION_PARSERS = {  # IF(c, a, b) is a call of a function PostgreSQL does not have
            **RisingWave.Parser.NO_PAREN_FUNCTION_PARSERS,
            "IF": _named_call("IF", RisingWave.Parser.NO_PAREN_FUNCTION_PARSERS["IF"])}
        # PostgreSQL has no lambdas: `f(j -> 'a')` passes j's member a (sqlglot would read a lambda)
        LAMBDAS = {}

        def validate_expression(self, expression, args=None):
            if args is not None and not isinstance(expression, exp.Anonymous) and expression.error_messages(args):
                # a call sqlglot knows, with arguments it does not take (glob('/x'), split_part(s)): kept
                # as a plain call, which the function catalog judges by its name and argument count
                name = expression.sql_name() if isinstance(expression, exp.Func) else type(expression).__name__
                expression = exp.Anonymous(this=name.lower(),
                                           expressions=[a for a in args if isinstance(a, exp.Expression)])
            expression = super().validate_expression(expression, args)
            if args is not None:  # a call built from its argument list
                expression.meta[ARGUMENT_COUNT] = len(args)
            return expression


DIALECT = "dagsterrw"  # (sqlglot registers a dialect under its class name)
_DIALECT = DagsterRw()
if sqlglot.parse_one("SELECT lower(x)", read=DIALECT).expressions[0].meta_get(FUNCTION_NAME) != "lower":
    # the function catalog needs every call's name: fail at import rather than let calls through
    raise ImportError("dagster-rw needs a sqlglot whose parser keeps the names of function calls "
                      "(Dialect.ORIGINAL_NAME_META_KEY)")


@dataclass
class Statement:
    sql: str


def _parse(sql: str) -> exp.Expression:
    try:
        # PostgreSQL folds unquoted identifiers to lower case
        tree = normalize_identifiers(sqlglot.parse_one(sql, read=DIALECT), dialect="postgres")
        return tree.transform(_row_cast) if "row" in sql.lower() else tree
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        where = f" (line {err.get('line')}, column {err.get('col')})" if err.get("line") else ""
        raise ProgrammingError(f"syntax error{where}: {err.get('description', str(e))}") from None
