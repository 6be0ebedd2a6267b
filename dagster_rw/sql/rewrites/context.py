"""What a rewrite rule may ask of the planner that applies it."""
from __future__ import annotations

from typing import Protocol

from sqlglot import exp

from ...errors import ProgrammingError


class Context(Protocol):
    """The statement being planned (for errors that name the object and point into its SQL) and
    the output column names and types of a query over the catalog (planned on the side)."""

    sql: str
    obj: str | None

    def where(self, node) -> str:
        """` (line l, column c)` of the node in the statement's SQL, or ''."""

    def refuse(self, construct: str, node=None) -> ProgrammingError:
        """The error refusing `construct`, by name."""

    def output_names(self, query: exp.Expression) -> list[str]:
        """The output column names of `query`."""

    def output_types(self, query: exp.Expression) -> list[str]:
        """The SQL types (dagster_rw.types names) of the output columns of `query`."""

    def interval_micros(self, e: exp.Expression, kind: str) -> int:
        """A constant INTERVAL literal as microseconds (refused when it has months)."""

    # True while the planner plans a view that emits on window close
    window_close: bool
