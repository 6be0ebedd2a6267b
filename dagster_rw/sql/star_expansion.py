"""A view's `*` over a table written out as the columns it stands for, in the stored definition's
text: what ALTER TABLE ... ADD / DROP COLUMN does to a view that selects all of the table's columns,
so that the view keeps the columns it had (RisingWave binds a view's columns when it is created).
The stars are found wherever they are in the query: its select list, subqueries in FROM, WITH
queries, the branches of UNION / INTERSECT / EXCEPT, and subqueries in expressions."""
from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from .dialect import _DIALECT
from .renames import quoted
from .indexes import CreateIndex
from .statements import parse, view_query
from .syntax import ctes_in_scope as _ctes_in_scope


class StarNotExpanded(Exception):
    """A reader of the table whose columns cannot be kept by writing out its stars; the message
    names its shape and what to write instead."""


def _refused(shape: str) -> StarNotExpanded:
    return StarNotExpanded(f"its {shape} cannot be written out as columns: name the columns in its definition")


def _is_star(item: exp.Expression) -> bool:
    return isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))


def _from_items(select: exp.Select) -> list[exp.Expression]:
    """The FROM items of a SELECT, in order (the FROM's, then each join's)."""
    items = [select.args["from_"].this] if select.args.get("from_") is not None else []
    return items + [j.this for j in select.args.get("joins") or []]


def _is_relation(item: exp.Expression, name: str) -> bool:
    """Whether FROM item `item` reads the catalog's relation `name` (not a WITH query of that name)."""
    return isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier) and item.name == name \
        and name not in _ctes_in_scope(item)


def with_stars_expanded(sql: str, table: str, columns_of) -> str | None:
    """A stored view definition with each `*` and `x.*` that covers relation `table` written out as
    the columns it stands for now: `table`'s as `columns_of(table)` lists them, each qualified by its
    FROM item, and any other FROM item an unqualified `*` covers as `alias.*` (its columns do not
    change). None when no star covers `table`. Raises StarNotExpanded naming a star over `table`
    that cannot be written out (over a join USING or NATURAL, beside a FROM item without an alias,
    with EXCEPT / REPLACE, in a query with a CHANGELOG). Written into the text where the parser found each star, so the rest
    stays as the user wrote it."""
    statement = parse(sql, check_names=False)
    if isinstance(statement, CreateIndex) and statement.include is None:
        raise StarNotExpanded("an index without INCLUDE holds every column of the table: create it with "
                              "INCLUDE (column, ...)")
    query = view_query(sql)
    tokens = _DIALECT.tokenize(sql)
    star_tokens = {t.start for t in tokens if t.token_type == TokenType.STAR}
    changelog = any(t.text.upper() == "CHANGELOG" for t in tokens)
    edits = []  # (start, end, text)
    for select in query.find_all(exp.Select):
        items = _from_items(select)
        for star in (e for e in select.expressions if _is_star(e)):
            if isinstance(star, exp.Star):
                covered, bare = items, star
            else:
                covered, bare = [i for i in items if i.alias_or_name == star.table], star.this
            if not any(_is_relation(i, table) for i in covered):
                continue
            modifiers = [k.rstrip("_").upper() for k in ("except_", "replace", "rename", "ilike") if bare.args.get(k)]
            if modifiers:
                raise _refused(f"`*` with {modifiers[0]}")
            merged = [j for j in select.args.get("joins") or []
                      if j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL"]
            if isinstance(star, exp.Star) and merged:  # (the columns a join merges appear once)
                raise _refused("`*` over a join USING or NATURAL")
            listed = []
            for item in covered:
                if not item.alias_or_name:
                    raise _refused(f"`*` over {table} beside a FROM item without an alias")
                if _is_relation(item, table):
                    listed += [f"{quoted(item.alias_or_name)}.{quoted(c)}" for c in columns_of(table)]
                else:
                    listed.append(f"{quoted(item.alias_or_name)}.*")
            if changelog:  # (the query is planned from a rewritten text)
                raise _refused("`*` in a query with a CHANGELOG of the table")
            start, end = _span(sql, star, star_tokens)
            edits.append((start, end, ", ".join(listed)))
    if not edits:
        return None
    for start, end, text in sorted(edits, reverse=True):
        sql = sql[:start] + text + sql[end + 1:]
    return sql


def _span(sql: str, star: exp.Expression, star_tokens: set[int]) -> tuple[int, int]:
    """The first and last character of a select-list star (`*`, or `x.*` from its qualifier on)
    in the definition's text."""
    bare = star if isinstance(star, exp.Star) else star.this
    end = bare.meta.get("end")
    if end not in star_tokens or sql[end] != "*":
        raise _refused("`*` (not where the parser found it in the definition's text)")
    if isinstance(star, exp.Star):
        return end, end
    qualifier = star.args["table"]
    start = qualifier.meta.get("start")
    if star.args.get("db") or start is None or sql[qualifier.meta["end"] + 1:end].strip() != ".":
        raise _refused(f"`{star.sql(dialect='postgres')}` as the definition's text writes it")
    return start, end
