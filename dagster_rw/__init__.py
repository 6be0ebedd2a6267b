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
    "connect", "Connection", "Cursor", "apilevel", "paramstyle", "threadsafety",
    "Error", "Warning", "InterfaceError", "DatabaseError", "DataError", "IntegrityError",
    "NotSupportedError", "OperationalError", "ProgrammingError",
]
__version__ = "0.1.0"
