"""dagster-rw: incremental, streaming materialized views on Dagster + Spark + S3, with RisingWave semantics."""
from .dbapi import Connection, Cursor, apilevel, connect, paramstyle, threadsafety
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
    "ProgrammingError",
    "Warning",
    "apilevel",
    "connect",
    "paramstyle",
    "threadsafety",
]
__version__ = "0.1.0"
