"""Bringing a warehouse in line with a SQL project: create what is declared but missing.

Objects are never altered in place (RisingWave cannot change a view's query either): an object that
exists with another definition is reported, and the user drops it to declare it anew. The comment
above a statement is no part of its definition: rewording it changes nothing in the warehouse.
"""
from __future__ import annotations

import re

from ..errors import ProgrammingError
from .project import RwProject, statement_body


def _normal(sql: str) -> str:
    """A definition as compared: the comments above it left out, whitespace and case folded."""
    return re.sub(r"\s+", " ", statement_body(sql)).strip().rstrip(";").strip().lower()


def deploy(conn, project: RwProject, names: list[str] | None = None) -> list[str]:
    """Create, in dependency order, the objects `names` need (all of the project's by default) that
    the warehouse lacks; returns the names created."""
    wanted = project.upstream(names) if names is not None else list(project.objects)
    created = []
    catalog = conn.wh.catalog(reload=True)
    for path, statement, written in project.functions():  # the SQL functions first: objects call them
        function = statement.function
        existing = catalog.functions.get(function.name)
        if existing is None:
            conn.execute(written)
            catalog = conn.wh.catalog()
        elif _normal(existing["sql"]) != _normal(function.sql):
            raise ProgrammingError(
                f"the function {function.name} exists in the warehouse with another definition than {path} "
                f"declares; drop it (after what calls it) to declare it anew.\n  warehouse: {existing['sql']}\n"
                f"  project:   {function.sql}")
    for name in wanted:
        obj = project.get(name)
        existing = catalog.get(name)
        if existing is None:
            conn.execute(obj.deploy_sql or obj.sql)
            created.append(name)
            catalog = conn.wh.catalog()
        elif _normal(existing.sql) != _normal(obj.sql):
            raise ProgrammingError(
                f"{name!r} exists in the warehouse with another definition than {obj.path} declares; "
                f"drop it (and what reads it) to declare it anew.\n  warehouse: {existing.sql}\n  project:   {obj.sql}")
    return created
