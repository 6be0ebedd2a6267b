"""The real PostgreSQL on 127.0.0.1:5432 as a sink target in tests: each test gets its own schema,
dropped afterwards. Tests skip (with the reason) only where no server can be reached."""
from __future__ import annotations

import os
import uuid

import pytest

HOST = os.environ.get("DAGSTER_RW_TEST_PG_HOST", "127.0.0.1")
PORT = int(os.environ.get("DAGSTER_RW_TEST_PG_PORT", "5432"))
USER = os.environ.get("DAGSTER_RW_TEST_PG_USER", "postgres")
DATABASE = os.environ.get("DAGSTER_RW_TEST_PG_DATABASE", "test")


def connect(**overrides):
    import psycopg

    params = {"host": HOST, "port": PORT, "user": USER, "dbname": DATABASE, "autocommit": True,
              "connect_timeout": 5}
    params.update(overrides)
    return psycopg.connect(**params)


class PgSchema:
    """A fresh schema for one test, with helpers to read what a sink wrote."""

    def __init__(self):
        import psycopg

        try:
            self.admin = connect()
        except psycopg.OperationalError as e:
            pytest.skip(f"no PostgreSQL server at {HOST}:{PORT} ({str(e).splitlines()[0]})")
        self.name = f"rw_sink_{uuid.uuid4().hex[:10]}"
        self.admin.execute(f'CREATE SCHEMA "{self.name}"')

    def options(self, table: str, **extra) -> str:
        """The WITH options of a postgres sink writing into `table` of this schema."""
        opts = {"connector": "postgres", "host": HOST, "port": str(PORT), "user": USER, "database": DATABASE,
                "schema": self.name, "table": table, **extra}
        return ", ".join(f"{k} = '{v}'" for k, v in opts.items())

    def rows(self, table: str, columns: str = "*") -> list[tuple]:
        return self.admin.execute(f'SELECT {columns} FROM "{self.name}"."{table}"').fetchall()

    def execute(self, sql: str, params=None):
        return self.admin.execute(sql, params)

    def drop(self):
        self.admin.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')
        self.admin.close()


def pg_schema():
    """The body of a test module's `pg` fixture: a PgSchema, dropped after the test."""
    schema = PgSchema()
    try:
        yield schema
    finally:
        schema.drop()
