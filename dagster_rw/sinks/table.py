"""CREATE SINK ... INTO table: the changes are staged as DML on a dagster-rw table (upserts and
deletes by its primary key), durable when staged and visible at the table's next barrier (FLUSH
cuts that barrier itself: Warehouse.refresh_all)."""
from __future__ import annotations

import pyarrow as pa

from .. import types as sqltypes
from ..engine.duck import quote
from ..errors import Error
from .key_conversion import OP
from .target import Changes, Target, TargetError
from ..runtime.interfaces import SinkWarehouse


class TableTarget(Target):
    def __init__(self, wh: SinkWarehouse, spec, columns):
        self.wh = wh
        self.table = spec.into
        self.description = f"table {self.table!r}"

    def write(self, changes: Changes) -> None:
        try:
            obj = self.wh.get(self.table)
        except Error as e:
            raise TargetError(str(e)) from None
        select = []
        for c in obj.columns:
            if c.hidden:
                continue
            src = quote(c.name) if c.name in changes.columns else "NULL"
            select.append(f"CAST({src} AS {sqltypes.duckdb_type(c.type)}) AS {quote(c.name)}")
        rows = self.wh.engine.sql(f"SELECT {', '.join(select)} FROM rw_c", rw_c=changes.table)
        ops = changes.table.column(OP).cast(pa.int8()).to_pylist()
        try:
            self.wh.stage(self.table, rows, ops, null_keys=True)
        except Error as e:
            raise TargetError(str(e), integrity=type(e).__name__ == "IntegrityError") from None
