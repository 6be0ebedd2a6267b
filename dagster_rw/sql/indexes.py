"""CREATE INDEX, as RisingWave has it: a materialized view of one table or materialized view whose
rows are stored under the index key followed by the base's key (so sorted by the index key), with
the index columns and the INCLUDE columns (by default every column of the base).

    CREATE INDEX [IF NOT EXISTS] name ON object (column [ASC | DESC], ...)
        [INCLUDE (column, ...)] [DISTRIBUTED BY (column, ...)]

The index is maintained like any view (its query is `SELECT <columns> FROM object`); batch queries
keep reading the base. DESC and DISTRIBUTED BY are recorded (SHOW INDEXES shows them): the stored
order is ascending by the key, and a step's work is split by the engine, not by a distribution key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.tokens import TokenType

from ..errors import ProgrammingError, unsupported
from .dialect import _DIALECT, Statement

INDEX_OF = "index_of"  # option of a materialized view that is an index: the object it indexes


@dataclass
class CreateIndex(Statement):
    name: str = ""
    on: str = ""
    key: list[tuple[str, bool]] = field(default_factory=list)  # (column, descending)
    include: list[str] | None = None  # None: every column of the base
    distributed_by: list[str] = field(default_factory=list)  # empty: the key's columns
    if_not_exists: bool = False

    @property
    def query(self) -> exp.Expression:
        """The view that maintains the index: the key's columns and the included ones, from the base."""
        base = exp.Table(this=exp.to_identifier(self.on, quoted=True))
        if self.include is None:
            return exp.select(exp.Star()).from_(base)
        names: list[str] = []
        for n in [k for k, _ in self.key] + self.include:
            if n not in names:
                names.append(n)
        return exp.select(*[exp.column(exp.to_identifier(n, quoted=True)) for n in names]).from_(base)

    def options(self) -> dict:
        return {INDEX_OF: self.on, "index_key": [k for k, _ in self.key],
                "index_desc": [d for _, d in self.key],
                "index_include": self.include, "index_distributed_by": self.distributed_by}


def _column_token(toks, at: int) -> bool:
    """Whether toks[at] names a column: an identifier, or a word the tokenizer reads as a keyword
    (`name`, `date`, `type`: column names in PostgreSQL) followed by what ends a column's entry."""
    tok = toks[at]
    if tok.token_type in (TokenType.IDENTIFIER, TokenType.VAR):
        return True
    follows = toks[at + 1].text.upper() if at + 1 < len(toks) else ""
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", tok.text)) and follows in (",", ")", "ASC", "DESC", "NULLS")


def _name(tok) -> str:
    return tok.text if tok.token_type == TokenType.IDENTIFIER else tok.text.lower()


def parse_create_index(sql: str) -> CreateIndex:
    toks = _DIALECT.tokenize(sql)
    words = [t.text.upper() for t in toks]
    syntax = ProgrammingError("syntax error in CREATE INDEX: expected CREATE INDEX [IF NOT EXISTS] name ON object "
                              "(column [ASC | DESC], ...) [INCLUDE (column, ...)] [DISTRIBUTED BY (column, ...)]")
    i = 2
    if_not_exists = words[i:i + 3] == ["IF", "NOT", "EXISTS"]
    if if_not_exists:
        i += 3
    if i >= len(toks) or words[i] == "ON":
        raise unsupported("CREATE INDEX without a name (name the index)", sql)
    name = _name(toks[i])
    i += 1
    if words[i:i + 1] != ["ON"] or i + 1 >= len(toks):
        raise syntax
    on = _name(toks[i + 1])
    i += 2
    if words[i:i + 1] == ["USING"]:
        raise unsupported(f"CREATE INDEX {name} ... USING (vector indexes)", sql)

    def column_list(at: int, allow_order: bool) -> tuple[list[tuple[str, bool]], int]:
        if at >= len(toks) or toks[at].token_type != TokenType.L_PAREN:
            raise syntax
        out, at = [], at + 1
        while True:
            if at >= len(toks) or not _column_token(toks, at):
                raise unsupported(f"an expression as a column of index {name!r} (name columns of {on!r})", sql)
            col, desc = _name(toks[at]), False
            at += 1
            if allow_order and at < len(toks) and words[at] in ("ASC", "DESC"):
                desc = words[at] == "DESC"
                at += 1
            if at < len(toks) and words[at] == "NULLS":
                raise unsupported(f"NULLS FIRST / LAST in index {name!r}", sql)
            if at >= len(toks):
                raise syntax
            if toks[at].token_type == TokenType.R_PAREN:
                return out + [(col, desc)], at + 1
            if toks[at].token_type != TokenType.COMMA:
                raise unsupported(f"an expression as a column of index {name!r} (name columns of {on!r})", sql)
            out.append((col, desc))
            at += 1

    key, i = column_list(i, True)
    include = None
    distributed: list[str] = []
    if words[i:i + 1] == ["INCLUDE"]:
        cols, i = column_list(i + 1, False)
        include = [c for c, _ in cols]
    if words[i:i + 2] == ["DISTRIBUTED", "BY"]:
        cols, i = column_list(i + 2, False)
        distributed = [c for c, _ in cols]
    if i != len(toks):
        raise unsupported(f"{' '.join(t.text for t in toks[i:])} in CREATE INDEX {name}", sql)
    seen = [k for k, _ in key]
    if len(set(seen)) != len(seen):
        raise ProgrammingError(f"index {name!r} names a column twice in its key")
    if any(c not in seen for c in distributed) or distributed and distributed != seen[:len(distributed)]:
        raise ProgrammingError(f"index {name!r}: DISTRIBUTED BY must be a prefix of the index key")
    return CreateIndex(sql, name=name, on=on, key=key, include=include, distributed_by=distributed,
                       if_not_exists=if_not_exists)


def check_index(index: CreateIndex, base) -> None:
    """Refuse an index whose base cannot carry one or whose columns the base does not have."""
    from ..storage.catalog import MATERIALIZED_VIEW, TABLE

    if base is None:
        raise ProgrammingError(f'relation "{index.on}" does not exist')
    if base.kind not in (TABLE, MATERIALIZED_VIEW) or (base.options or {}).get(INDEX_OF):
        what = "an index" if (base.options or {}).get(INDEX_OF) else f"a {base.kind.replace('_', ' ')}"
        raise ProgrammingError(f"cannot create index {index.name!r} on {index.on!r}: it is {what} (an index is "
                               "built on a table or a materialized view)")
    visible = {c.name: c.type for c in base.visible_columns}
    for c in [k for k, _ in index.key] + (index.include or []):
        if c not in visible:
            raise ProgrammingError(f'column "{c}" of index {index.name!r} does not exist in {index.on!r}')


def shown_row(obj) -> tuple:
    """SHOW INDEXES' row of an index: Name, On, Key, Include, Distributed By."""
    o = obj.options
    key = ", ".join(f"{k} {'DESC' if d else 'ASC'}" for k, d in zip(o["index_key"], o["index_desc"]))
    included = o.get("index_include")
    if included is None:
        included = [c.name for c in obj.visible_columns]
    include = ", ".join(c for c in included if c not in o["index_key"])
    return (obj.name, o[INDEX_OF], key, include, ", ".join(o.get("index_distributed_by") or o["index_key"]))
