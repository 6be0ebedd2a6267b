"""PostgreSQL semantics that DuckDB's dialect does not share, applied to parsed expressions.

Integer division: in PostgreSQL `7 / 2` is 3 (it truncates) where DuckDB's `/` gives 3.5. sqlglot
writes the PostgreSQL meaning for DuckDB once the operands carry their types, so expressions are
type-annotated against the columns they read before they are rendered.
"""
from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

_SCOPE = "rw_t"


def typed_expression(expression: exp.Expression, column_types: dict[str, str]) -> exp.Expression:
    """`expression` (over unqualified columns) with sqlglot types annotated from `column_types`."""
    if expression.find(exp.Div) is None:
        return expression
    out = expression.copy()
    columns = list(out.find_all(exp.Column))
    for col in columns:
        col.set("table", exp.to_identifier(_SCOPE))
    try:
        holder = exp.Select(expressions=[out], from_=exp.From(this=exp.to_table(_SCOPE)))
        annotate_types(holder, schema={_SCOPE: column_types}, dialect="postgres")
    finally:
        for col in columns:
            col.set("table", None)
    out.parent = None
    return out


def typed_query(query: exp.Expression, schema: dict[str, dict[str, str]]) -> exp.Expression:
    """A batch query annotated with types (columns qualified; sqlglot may name unnamed outputs
    `_col_<i>`, which callers map back to PostgreSQL's names)."""
    if query.find(exp.Div) is None:
        return query
    try:
        q = qualify(query.copy(), schema=schema, dialect="postgres", validate_qualify_columns=False,
                    quote_identifiers=False, identify=False)
        annotate_types(q, schema=schema, dialect="postgres")
    except Exception:  # anything sqlglot cannot qualify runs as written
        return query
    return q
