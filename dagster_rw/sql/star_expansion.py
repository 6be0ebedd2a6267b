"""A view's `*` written out as the columns it stands for, in the stored definition's text: what
ALTER TABLE ... ADD COLUMN does to a view that selects all of the table's columns, so that the view
keeps the columns it had (RisingWave binds a view's columns when it is created)."""
from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from .dialect import _DIALECT
from .renames import quoted
from .statements import view_query

_BEFORE_STAR = (TokenType.SELECT, TokenType.DISTINCT, TokenType.ALL, TokenType.COMMA)
_AFTER_STAR = (TokenType.COMMA, TokenType.FROM)


def with_stars_expanded(sql: str, columns_of) -> str | None:
    """A stored view whose query is one SELECT over tables and views alone (no subquery, CTE or
    set operation) with `*` and `x.*` in its select list written out as the columns they stand
    for now (`columns_of(relation)`: its visible column names), each qualified by its FROM item;
    None when the query has another shape, or its stars cannot all be found in the text. Written
    into the text where the parser found each star, so the rest stays as the user wrote it."""
    query = view_query(sql)
    if not isinstance(query, exp.Select) or len(list(query.find_all(exp.Select))) != 1 or query.args.get("with_"):
        return None
    items = [query.args["from_"].this] + [j.this for j in query.args.get("joins") or []] \
        if query.args.get("from_") is not None else []
    if not items or not all(isinstance(i, exp.Table) and not i.args.get("db") for i in items):
        return None
    sources = [(i.alias_or_name, i.name) for i in items]
    stars = [e for e in query.expressions if isinstance(e, exp.Star)
             or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))]
    if not stars:
        return None

    def listed(alias: str, relation: str) -> list[str]:
        return [f"{quoted(alias)}.{quoted(c)}" for c in columns_of(relation)]

    tokens = _DIALECT.tokenize(sql)
    edits = []  # (start, end, text), in the order of the text
    for i, tok in enumerate(tokens):
        if tok.token_type != TokenType.STAR or i == 0 or i + 1 == len(tokens) \
                or tokens[i + 1].token_type not in _AFTER_STAR:
            continue
        if tokens[i - 1].token_type in _BEFORE_STAR:
            edits.append((tok.start, tok.end, ", ".join(c for a, r in sources for c in listed(a, r))))
        elif tokens[i - 1].token_type == TokenType.DOT and i >= 2:
            q = tokens[i - 2]
            qualifier = q.text if q.token_type == TokenType.IDENTIFIER else q.text.lower()
            match = [(a, r) for a, r in sources if a == qualifier]
            if len(match) != 1:
                return None
            edits.append((q.start, tok.end, ", ".join(listed(*match[0]))))
    if len(edits) != len(stars):
        return None
    for start, end, text in reversed(edits):
        sql = sql[:start] + text + sql[end + 1:]
    return sql
