"""dagster-rw: incremental, streaming materialized views on Dagster + Spark + S3, with RisingWave semantics."""
from .errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)

__all__ = [
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "NotSupportedError",
    "OperationalError",
    "Options",
    "ProgrammingError",
    "Warning",
    "apilevel",
    "connect",
    "paramstyle",
    "threadsafety",
]
__version__ = "0.1.0"

_DBAPI = {"Connection", "Cursor", "Options", "apilevel", "connect", "paramstyle", "threadsafety"}


def __getattr__(name: str):
    """The DB-API is imported when first used: Spark executors import the storage modules they run
    (`dagster_rw.storage.executor_io`) with nothing but pyarrow, and never load the SQL front end."""
    if name in _DBAPI:
        from . import dbapi

        return getattr(dbapi, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
