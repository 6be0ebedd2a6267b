"""SQL functions (CREATE FUNCTION ... LANGUAGE SQL): scalar functions whose body is one expression,
inlined wherever they are called, as RisingWave and PostgreSQL inline such functions.

A call `f(x, y)` becomes `CAST((body) AS returns)` with each parameter (by name, or as $1, $2, ...)
replaced by the argument cast to the parameter's type. Inlining happens before a statement is
planned or run, so a view over a function is maintained incrementally like any other expression.
A function is kept in the catalog (durable, visible to every process); a view that calls one is
planned again from its SQL by a new process, so DROP FUNCTION is refused while an object calls it.
"""
from __future__ import annotations

import dataclasses
import re

import sqlglot
from sqlglot import exp

from .. import types as sqltypes
from ..errors import IntegrityError, ProgrammingError, unsupported
from .function_catalog import CATALOG


@dataclasses.dataclass
class SqlFunction:
    name: str
    params: list[tuple[str | None, str]]  # (name or None, type as SQL)
    returns: str
    body: str  # the expression, as SQL of the project's dialect
    sql: str = ""  # the CREATE FUNCTION statement

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def shown(self) -> tuple[str, str, str, str]:
        """SHOW FUNCTIONS' row: name, arguments, return type, language (PostgreSQL's type names)."""
        def display(t: str) -> str:
            return sqltypes.display_name(sqltypes.canonical(exp.DataType.build(t, dialect="postgres")))

        args = ", ".join(f"{n} {display(t)}" if n else display(t) for n, t in self.params)
        return self.name, args, display(self.returns), "sql"

    @classmethod
    def from_json(cls, d: dict) -> SqlFunction:
        return cls(**{**d, "params": [tuple(p) for p in d["params"]]})


def parse_create_function(sql: str, tree: exp.Create, dialect) -> tuple[SqlFunction, bool]:
    """The function a CREATE [OR REPLACE] FUNCTION statement defines, and whether it replaces."""
    udf = tree.this
    if not isinstance(udf, exp.UserDefinedFunction):
        raise unsupported("this form of CREATE FUNCTION", sql, tree)
    name = udf.this.name.lower() if not udf.this.this.quoted else udf.this.name
    if name in CATALOG or not isinstance(sqlglot.parse_one(f"{name}(1)", read=dialect), exp.Anonymous):
        raise ProgrammingError(f'CREATE FUNCTION {name}: "{name}" is the name of a built-in function')
    props = {type(p): p for p in (tree.args.get("properties").expressions if tree.args.get("properties") else [])}
    language = props.get(exp.LanguageProperty)
    if language is not None and language.name.lower() != "sql":
        raise unsupported(f"CREATE FUNCTION ... LANGUAGE {language.name} (only LANGUAGE SQL functions)", sql, tree)
    returns = props.get(exp.ReturnsProperty)
    if returns is None or returns.args.get("is_table") or not isinstance(returns.this, exp.DataType):
        raise unsupported(f"CREATE FUNCTION {name} without RETURNS <scalar type>", sql, tree)
    params = []
    for p in udf.expressions:
        if isinstance(p, exp.ColumnDef) and isinstance(p.args.get("kind"), exp.DataType):
            params.append((p.name.lower(), p.args["kind"].sql(dialect="postgres")))
        elif isinstance(p, (exp.Identifier, exp.DataType)):  # an unnamed parameter: its type
            params.append((None, exp.DataType.build(p.name if isinstance(p, exp.Identifier) else p.sql(),
                                                    dialect="postgres").sql(dialect="postgres")))
        else:
            raise unsupported(f"the parameter {p.sql(dialect='postgres')} of CREATE FUNCTION {name}", sql, p)
    body = tree.expression
    if isinstance(body, exp.Return):
        expression = body.this
    elif isinstance(body, (exp.Heredoc, exp.Literal)):
        try:
            query = sqlglot.parse_one(body.name, read=dialect)
        except sqlglot.errors.ParseError as e:
            raise ProgrammingError(f"CREATE FUNCTION {name}: syntax error in its body: {e}") from None
        if not isinstance(query, exp.Select) or len(query.expressions) != 1 or any(
                query.args.get(k) for k in ("from_", "where", "group", "having", "order", "limit", "joins")):
            raise unsupported(f"the body of CREATE FUNCTION {name} (a SQL function must be SELECT <expression>, "
                              "without FROM)", sql, tree)
        expression = query.expressions[0].unalias()
    else:
        raise unsupported(f"the body of CREATE FUNCTION {name}", sql, tree)
    if any(isinstance(e, (exp.Select, exp.AggFunc, exp.Window)) for e in expression.walk()):
        raise unsupported(f"a subquery, aggregate or window function in the body of CREATE FUNCTION {name}",
                          sql, tree)
    names = {n for n, _ in params if n}
    for col in expression.find_all(exp.Column):
        if col.table or col.name.lower() not in names:
            raise ProgrammingError(f'CREATE FUNCTION {name}: column "{col.sql(dialect="postgres")}" does not exist '
                                   "(the body can refer to its parameters only)")
    for param in expression.find_all(exp.Parameter):
        if not param.name.isdigit() or not 1 <= int(param.name) <= len(params):
            raise ProgrammingError(f"CREATE FUNCTION {name}: there is no parameter ${param.name}")
    for t in [t for _, t in params] + [returns.this.sql(dialect="postgres")]:
        sqltypes.canonical(exp.DataType.build(t, dialect="postgres"), name)  # a type tables can hold
    function = SqlFunction(name=name, params=params, returns=returns.this.sql(dialect="postgres"),
                           body=expression.sql(dialect=dialect), sql=sql)
    return function, bool(tree.args.get("replace"))


def inline(tree: exp.Expression, functions: dict[str, SqlFunction], dialect) -> exp.Expression:
    """`tree` with every call of a catalog function replaced by the function's body."""
    if not functions or not any(isinstance(n, exp.Anonymous) for n in tree.walk()):
        return tree

    def expand(node: exp.Expression, depth: int = 0) -> exp.Expression:
        if not isinstance(node, exp.Anonymous):
            return node
        f = functions.get(node.name.lower())
        if f is None:
            return node
        if depth > 16:
            raise ProgrammingError(f"function {f.name}: calls nested too deeply (is it calling itself?)")
        args = node.expressions
        if len(args) != len(f.params):
            types = ", ".join(t.lower() for _, t in f.params)
            raise ProgrammingError(f"function {f.name}({types}) takes {len(f.params)} argument"
                                   f"{'s' if len(f.params) != 1 else ''}, not {len(args)}")
        values = [exp.Cast(this=exp.Paren(this=a.copy()), to=exp.DataType.build(t, dialect="postgres"))
                  for a, (_, t) in zip(args, f.params)]
        by_name = {n: v for (n, _), v in zip(f.params, values) if n}
        body = sqlglot.parse_one(f.body, read=dialect)

        def substitute(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in by_name:
                return by_name[n.name.lower()].copy()
            if isinstance(n, exp.Parameter) and n.name.isdigit():
                return values[int(n.name) - 1].copy()
            return n

        body = body.transform(substitute)
        body = body.transform(lambda n: expand(n, depth + 1))  # functions calling functions
        return exp.Cast(this=exp.Paren(this=body), to=exp.DataType.build(f.returns, dialect="postgres"))

    return tree.transform(expand)


def inline_statement(statement, functions: dict[str, SqlFunction], dialect) -> None:
    """Inline the function calls of every expression a parsed statement holds (in place)."""
    if not functions:
        return
    for field in dataclasses.fields(statement):
        value = getattr(statement, field.name)
        if isinstance(value, exp.Expression):
            setattr(statement, field.name, inline(value, functions, dialect))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            inline_statement(value, functions, dialect)
        elif isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
            setattr(statement, field.name, [tuple(inline(x, functions, dialect) if isinstance(x, exp.Expression)
                                                  else x for x in v) for v in value])


def calls(sql: str, name: str) -> bool:
    """Whether an object's SQL calls the function `name` (a word followed by a parenthesis)."""
    return re.search(rf"(?<![\w\"]){re.escape(name)}\s*\(", sql, re.IGNORECASE) is not None


def check_droppable(name: str, objects, verb: str = "drop") -> None:
    """Refuse to drop (or replace) a function while an object's SQL calls it: the object is planned
    again from its SQL by every new process. (Text-based: a call inside a string literal also
    counts, which can only refuse a drop, never lose an object.)"""
    users = [o.name for o in objects if calls(o.sql, name)]
    if users:
        raise IntegrityError(f"cannot {verb} function {name}: other objects depend on it ({', '.join(users)})")
