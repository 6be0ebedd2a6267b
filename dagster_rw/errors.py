"""Every user-facing error of dagster-rw, with DB-API (PEP 249) names where they fit."""


class Error(Exception):
    """Base class of all dagster-rw errors."""


class Warning(Exception):
    pass


class InterfaceError(Error):
    """The connection or cursor was used wrongly (for example after close)."""


class DatabaseError(Error):
    pass


class ProgrammingError(DatabaseError):
    """Bad or unsupported SQL, unknown objects, wrong arguments."""


class IntegrityError(DatabaseError):
    """A constraint was violated (a duplicate primary key, a dependent object)."""


class DataError(DatabaseError):
    """A value does not fit its column."""


class OperationalError(DatabaseError):
    """The warehouse or the compute engine failed."""


class NotSupportedError(DatabaseError):
    pass


class CommitConflict(OperationalError):
    """Another process committed the same version first; this step's work was discarded."""


def unsupported(construct: str, sql: str | None = None, node=None, obj: str | None = None) -> ProgrammingError:
    """A ProgrammingError naming the unsupported construct, the object and where it is in the SQL."""
    where = _position(sql, node)
    subject = f" in {obj!r}" if obj else ""
    return ProgrammingError(f"not supported{subject}: {construct}{where}")


def _position(sql: str | None, node) -> str:
    if not sql or node is None:
        return ""
    meta = getattr(node, "meta", None) or {}
    start = meta.get("start")
    if start is None:
        for child in node.walk() if hasattr(node, "walk") else ():
            start = (getattr(child, "meta", None) or {}).get("start")
            if start is not None:
                break
    if start is None:
        return ""
    line = sql.count("\n", 0, start) + 1
    col = start - (sql.rfind("\n", 0, start) + 1) + 1
    return f" (line {line}, column {col})"


class BrokenObject(OperationalError):
    """Objects could not advance (a file one needs is missing or corrupt); the others did.
    `broken`: object -> cause; `skipped`: objects downstream of them, left where they were."""

    def __init__(self, message: str, broken: dict[str, str] | None = None, skipped: list[str] | None = None):
        super().__init__(message)
        self.broken = dict(broken or {})
        self.skipped = list(skipped or [])
