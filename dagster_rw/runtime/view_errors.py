"""The values views could not compute: the `rw_view_errors` relation.

A view's expressions are evaluated non-strictly (sql.non_strict): an integer overflow, a bad cast
or a division by zero gives NULL and the row goes on. Each Map operator counts those failures in
its `errors` state table, one row per failing expression and step, committed with the step; this
relation reads them all back, named by their view.
"""
from __future__ import annotations

import pyarrow as pa

from ..operators.map import ERROR_KEY, ERROR_SCHEMA, ERRORS
from ..storage.catalog import MATERIALIZED_VIEW, SINK
from ..storage.state_table import StateTable
from .interfaces import StepWarehouse

RELATION = "rw_view_errors"
SCHEMA = pa.schema([("view", pa.string())] + [f for f in ERROR_SCHEMA if f.name != "check"])


def view_errors(wh: StepWarehouse) -> pa.Table:
    """Every view's (and sink's) failed values: view, epoch, expression, error, count, example."""
    parts = []
    for obj in wh.catalog().objects.values():
        if obj.kind not in (MATERIALIZED_VIEW, SINK):
            continue
        for name, files in wh.manifest(obj.name).state.items():
            if not (files and name.startswith("op") and name.endswith(f".{ERRORS}")):
                continue
            table = StateTable(wh.store, wh.engine, f"objects/{obj.key_folder}/state/{name}", ERROR_KEY,
                               ERROR_SCHEMA, files)
            rows = wh.engine.to_arrow(table.read_all()).select(ERROR_SCHEMA.names).cast(ERROR_SCHEMA)
            rows = rows.drop_columns(["check"]).add_column(0, "view", pa.array([obj.name] * rows.num_rows, pa.string()))
            parts.append(rows)
    return pa.concat_tables(parts).cast(SCHEMA) if parts else SCHEMA.empty_table()

