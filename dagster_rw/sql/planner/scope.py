"""Names in scope: the columns each FROM item brings, by alias and name, and their positions in
the plan's rows."""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ...errors import ProgrammingError
from ..rewrites.context import Context
from ..syntax import find_aggs


@dataclass
class Entry:
    alias: str | None
    name: str
    index: int
    group: int  # which FROM group the column came from (for comma-join planning)


class Scope:
    def __init__(self, entries: list[Entry]):
        self.entries = entries

    def shifted(self, by: int) -> Scope:
        return Scope([e if isinstance(e, OneRowSide) else Entry(e.alias, e.name, e.index + by, e.group)
                      for e in self.entries])

    def resolve(self, col: exp.Column, ctx: Context) -> Entry:
        name = col.name
        table = col.table
        if table:
            found = [e for e in self.entries if e.alias == table and e.name == name]
            if not found and not any(e.alias == table for e in self.entries):
                raise ProgrammingError(f'missing FROM-clause entry for table "{table}"{ctx.where(col)}')
        else:
            found = [e for e in self.entries if e.name == name and not isinstance(e, AliasOnly)]
        if not found:
            label = f"{table}.{name}" if table else name
            raise ProgrammingError(f'column "{label}" does not exist{ctx.where(col)}')
        if len(found) > 1:
            raise ProgrammingError(f'column reference "{name}" is ambiguous{ctx.where(col)}')
        if isinstance(found[0], OneRowSide):
            raise ctx.refuse(f'the column "{name}" of the one-row side of a dynamic filter outside its '
                             "comparison (a change of that row would change every output row)", col)
        return found[0]


class AliasOnly(Entry):
    """A column reachable only when qualified by its table alias (the right side of USING)."""

    def __init__(self, e: Entry):
        super().__init__(e.alias, e.name, e.index, e.group)


class OneRowSide(Entry):
    """A column of the one-row side of a dynamic filter: usable in the filter's comparison only."""

    def __init__(self, e: Entry):
        super().__init__(e.alias, e.name, -1, e.group)


def resolves(planner: Context, e: exp.Expression, scope: Scope) -> bool:
    """Whether every column of `e` resolves in `scope` (and there is at least one)."""
    cols = list(e.find_all(exp.Column))
    if not cols or find_aggs(e):
        return False
    try:
        for c in cols:
            scope.resolve(c, planner)
    except ProgrammingError:
        return False
    return True
