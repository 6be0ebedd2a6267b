"""DEFAULT of a table's column: the expression an INSERT that leaves the column out computes (and
ALTER TABLE ... ADD COLUMN ... DEFAULT gives the rows already there)."""
from __future__ import annotations

from sqlglot import exp

from .. import types as sqltypes
from ..errors import unsupported


def default_sql(value: exp.Expression, type_name: str, column: str, sql: str) -> str:
    """A column's DEFAULT as the DuckDB SQL that computes it at each INSERT (cast to the column's
    type): an expression of constants and functions (now() is the time of the INSERT); a column,
    a subquery, an aggregate or a window is refused by name."""
    if any(True for _ in value.find_all(exp.Column, exp.Subquery, exp.Select, exp.AggFunc, exp.Window)):
        raise unsupported(f"DEFAULT {value.sql(dialect='postgres')} of {column} (a default is an expression of "
                          "constants and functions)", sql, value)
    cast = exp.Cast(this=value.copy(), to=exp.DataType.build(sqltypes.duckdb_type(type_name), dialect="duckdb"))
    return cast.sql(dialect="duckdb")
