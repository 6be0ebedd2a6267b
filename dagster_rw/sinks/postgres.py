"""The PostgreSQL connector (psycopg 3): each batch in one transaction, staged by COPY into a
temporary table, then `DELETE ... USING` by key and `INSERT ... ON CONFLICT ... DO UPDATE`.

Identifiers are quoted by psycopg.sql; values travel only as COPY data, never inside SQL text.
"""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.csv as pacsv

from .. import types as sqltypes
from .key_conversion import OP
from .target import Changes, Target, TargetError

_ROW_NO = "_rw_n"


def pg_type(canonical: str) -> str:
    return canonical  # dagster-rw's canonical type names are PostgreSQL's


class PostgresTarget(Target):
    def __init__(self, spec, columns):
        o = spec.options
        self.spec = spec
        self.types = {c.name: c.type for c in columns}
        self.schema_name = o.get("schema", "public")
        self.table_name = o["table"]
        self.auto_create = (o.get("auto_create") or "false").lower() in ("true", "t", "1", "on", "yes")
        self.params = {"host": o.get("host", "127.0.0.1"), "port": int(o.get("port", 5432)),
                       "user": o.get("user", "postgres"), "dbname": o.get("database", "postgres"),
                       "connect_timeout": int(o.get("connect_timeout", 10)), "application_name": "dagster-rw sink"}
        self.password_option = o.get("password")
        self.description = (f'postgres table "{self.schema_name}"."{self.table_name}" at {self.params["user"]}@'
                            f'{self.params["host"]}:{self.params["port"]}/{self.params["dbname"]}')
        self.conn = None
        self.created = False

    # -- connection ----------------------------------------------------------------------------
    def _connect(self):
        import psycopg

        if self.conn is None or self.conn.closed:
            params = dict(self.params)
            if self.password_option:
                params["password"] = self.spec.secret("password")
            try:
                self.conn = psycopg.connect(**params)
            except psycopg.Error as e:
                raise TargetError(f"cannot connect: {_first_line(e)}") from None
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _table(self):
        from psycopg import sql

        return sql.Identifier(self.schema_name, self.table_name)

    def _create_table(self, cur, changes: Changes) -> None:
        from psycopg import sql

        cols = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(pg_type(self.types[c]))) for c in changes.columns]
        if changes.key:
            cols.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, changes.key))))
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._table(), sql.SQL(", ").join(cols)))

    # -- writing -------------------------------------------------------------------------------
    def write(self, changes: Changes) -> None:
        import psycopg

        conn = self._connect()
        try:
            with conn.transaction(), conn.cursor() as cur:
                if self.auto_create and not self.created:
                    self._create_table(cur, changes)
                self._stage(cur, changes)
                self._apply(cur, changes)
            self.created = True
        except psycopg.errors.IntegrityError as e:
            raise TargetError(self._refused_row(changes, e), integrity=True) from None
        except psycopg.Error as e:
            self.close()
            raise TargetError(_first_line(e)) from None

    def _stage(self, cur, changes: Changes) -> None:
        from psycopg import sql

        cols = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(pg_type(self.types[c]))) for c in changes.columns]
        cols += [sql.SQL(f"{OP} smallint"), sql.SQL(f"{_ROW_NO} bigint")]
        cur.execute(sql.SQL("CREATE TEMPORARY TABLE rw_stage ({}) ON COMMIT DROP").format(sql.SQL(", ").join(cols)))
        table = changes.table.append_column(_ROW_NO, pa.array(range(changes.table.num_rows), pa.int64()))
        names = sql.SQL(", ").join(map(sql.Identifier, [*changes.columns, OP, _ROW_NO]))
        if _csv_friendly(table.schema):
            buf = io.BytesIO()
            pacsv.write_csv(table.select([*changes.columns, OP, _ROW_NO]), buf,
                            pacsv.WriteOptions(include_header=False))
            with cur.copy(sql.SQL("COPY rw_stage ({}) FROM STDIN (FORMAT csv)").format(names)) as copy:
                copy.write(buf.getvalue())
        else:  # intervals and binary values: row by row, adapted by psycopg
            with cur.copy(sql.SQL("COPY rw_stage ({}) FROM STDIN").format(names)) as copy:
                for row in table.select([*changes.columns, OP, _ROW_NO]).to_pylist():
                    copy.write_row([_py(v) for v in row.values()])

    def _apply(self, cur, changes: Changes) -> None:
        if changes.upsert:
            self._delete(cur, changes)
        self._insert(cur, changes)

    def _delete(self, cur, changes: Changes) -> None:
        from psycopg import sql

        match = sql.SQL(" AND ").join(
            sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k)) for k in changes.key)
        cur.execute(sql.SQL("DELETE FROM {} t USING rw_stage s WHERE s.{} = -1 AND {}").format(
            self._table(), sql.Identifier(OP), match))

    def _insert(self, cur, changes: Changes, rows: tuple[int, int] | None = None) -> None:
        """Insert (upsert) the staged rows to insert, or those numbered in [rows[0], rows[1])."""
        from psycopg import sql

        cols = sql.SQL(", ").join(map(sql.Identifier, changes.columns))
        where = sql.SQL("{} = 1").format(sql.Identifier(OP))
        if rows is not None:
            where = sql.SQL("{} AND {n} >= {lo} AND {n} < {hi}").format(
                where, n=sql.Identifier(_ROW_NO), lo=sql.Literal(rows[0]), hi=sql.Literal(rows[1]))
        conflict = sql.SQL("")
        if changes.upsert:
            rest = [c for c in changes.columns if c not in changes.key]
            action = sql.SQL("DO NOTHING") if not rest else sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in rest))
            conflict = sql.SQL(" ON CONFLICT ({}) {}").format(
                sql.SQL(", ").join(map(sql.Identifier, changes.key)), action)
        # an append-only batch keeps the input's order; an upsert batch has one row per key
        order = sql.SQL("") if changes.upsert else sql.SQL(" ORDER BY {}").format(sql.Identifier(_ROW_NO))
        cur.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM rw_stage WHERE {}{}{}").format(
            self._table(), cols, cols, where, order, conflict))

    def _refused_row(self, changes: Changes, error) -> str:
        """The first row the target refuses, found by bisection inside a transaction that is rolled back,
        so that the message can name its key."""
        import psycopg

        cause = _first_line(error)
        key = changes.key or changes.columns
        try:
            conn = self._connect()
            with conn.transaction(force_rollback=True), conn.cursor() as cur:
                self._stage(cur, changes)
                if changes.upsert:
                    self._delete(cur, changes)
                # invariant: rows [lo, hi) hold a refused row, given rows [0, lo) applied
                lo, hi = 0, changes.table.num_rows
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    try:
                        with conn.transaction():  # a savepoint; kept when it succeeds
                            self._insert(cur, changes, (lo, mid))
                    except psycopg.errors.IntegrityError:
                        hi = mid
                        continue
                    lo = mid
            row = changes.table.slice(lo, 1).to_pylist()[0]
        except (psycopg.Error, IndexError):
            self.close()
            return f"it refused a row: {cause}"
        shown = ", ".join(str(row[k]) for k in key)
        return f"it refused the row with key ({', '.join(key)})=({shown}): {cause}"


def _csv_friendly(schema: pa.Schema) -> bool:
    return not any(pa.types.is_interval(f.type) or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
                   for f in schema)


def _py(value):
    # pyarrow's MonthDayNano for intervals: psycopg adapts timedelta; months are folded into 30-day units
    if hasattr(value, "months") and hasattr(value, "nanoseconds"):
        import datetime

        return datetime.timedelta(days=value.months * 30 + value.days, microseconds=value.nanoseconds // 1000)
    return value


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


__all__ = ["PostgresTarget", "sqltypes"]
