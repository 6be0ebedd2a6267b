"""RisingWave's changelog CTE, `WITH c AS CHANGELOG FROM name`: the changes of a table, source or
materialized view as rows, each with `changelog_op` (1 insert, 2 delete, 3 the new row of an
update, 4 its old row) and, where the statement names it, `_changelog_row_id` (increasing in the
order of the changes). sqlglot has no such CTE: the statement's text is rewritten to
`WITH c AS (SELECT * FROM name AS _rw_changelog)`, which the planner reads as a Changelog node
over the scan of `name` (sql.plan.Changelog, operators.changelog)."""
from __future__ import annotations

from sqlglot.tokens import TokenType

from ..errors import unsupported

CHANGELOG_ALIAS = "_rw_changelog"
CHANGELOG_IDS_ALIAS = "_rw_changelog_ids"  # the same, with _changelog_row_id
CHANGELOG_OP = "changelog_op"
CHANGELOG_ROW_ID = "_changelog_row_id"


def rewrite(sql: str, tokens: list) -> str | None:
    """The statement with its changelog CTEs written as subqueries, or None when it has none."""
    words = [t.text.upper() for t in tokens]
    found = [i for i in range(1, len(words) - 2)
             if words[i:i + 3] == ["AS", "CHANGELOG", "FROM"] and i >= 2 and words[i - 2] in ("WITH", ",")]
    if not found:
        return None
    if words[0] not in ("CREATE", "EXPLAIN"):
        raise unsupported("the changelog CTE in a batch query (it reads a stream of changes: use it in CREATE "
                          "MATERIALIZED VIEW or CREATE SINK ... AS)", sql)
    # the row ids are numbered (one sort of each step's changes) only where the statement reads them
    alias = CHANGELOG_IDS_ALIAS if "_CHANGELOG_ROW_ID" in words else CHANGELOG_ALIAS
    out, last = [], 0
    for i in found:
        rel = tokens[i + 3]
        if rel.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) or (
                i + 4 < len(tokens) and tokens[i + 4].token_type == TokenType.DOT):
            raise unsupported("a changelog CTE over anything but the name of a table, source or view", sql)
        name = f'"{rel.text}"' if rel.token_type == TokenType.IDENTIFIER else rel.text
        out.append(sql[last:tokens[i].start])
        out.append(f"AS (SELECT * FROM {name} AS {alias})")
        last = rel.end + 1
    out.append(sql[last:])
    return "".join(out)
