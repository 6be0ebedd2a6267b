"""The sink connectors by name: which Target class delivers a sink's changes. Each connector is
imported when a sink first uses it, so a deployment needs only the client libraries of the
connectors it uses (psycopg for PostgreSQL, kafka-python for Kafka)."""
from __future__ import annotations

from .target import Target


def _postgres(wh, spec, columns) -> Target:
    from .postgres import PostgresTarget

    return PostgresTarget(spec, columns)


def _kafka(wh, spec, columns) -> Target:
    from .kafka import KafkaTarget

    return KafkaTarget(spec, columns)


def _file(wh, spec, columns) -> Target:
    from .file import FileTarget

    return FileTarget(spec, columns)


def _table(wh, spec, columns) -> Target:
    from .table import TableTarget

    return TableTarget(wh, spec, columns)


CONNECTORS = {"postgres": _postgres, "kafka": _kafka, "file": _file, "table": _table}


def open_target(wh, spec, obj) -> Target:
    """The connector of a sink, by name (a sink INTO a table: the table connector)."""
    return CONNECTORS.get(spec.connector, _table)(wh, spec, obj.columns)
