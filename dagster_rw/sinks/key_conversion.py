"""Converting change-log rows (addressed by the input's stream key) into one change per sink key.

Each change file of the input is one consolidated step: per stream key at most a delete and an
insert. Per file, group by the sink's primary key: a key with an inserted row gets an upsert of that
row; a key with only deleted rows gets a delete (docs/architecture.md, "Converting to another key").
Over several files the newest file's change for a key wins, which is what applying the files one
after another would leave; a delivery that is re-done over a different range of files converges the
same way.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import IntegrityError
from ..operators.base import W, col_list

OP = "_op"  # +1: insert or upsert the row; -1: delete the row with this key
FILE = "_f"  # the file a change-log row came from, oldest first
UPSERT_OP, DELETE_OP = 1, -1


def upsert_changes(engine, log: pa.Table, columns: list[str], key: list[str], what: str) -> pa.Table:
    """One change per sink key (`columns` + `_op`). `what` names the sink for errors."""
    part = col_list(key)
    chosen = engine.sql(
        f"SELECT {col_list(columns)}, CAST(CASE WHEN {W} > 0 THEN {UPSERT_OP} ELSE {DELETE_OP} END AS TINYINT) "
        f"AS {OP}, rw_inserts FROM (SELECT *, "
        f"row_number() OVER (PARTITION BY {part} ORDER BY {FILE} DESC, {W} DESC) AS rw_rn, "
        f"count(*) FILTER (WHERE {W} > 0) OVER (PARTITION BY {part}, {FILE}) AS rw_inserts "
        f"FROM rw_log) rw_r WHERE rw_rn = 1 ORDER BY {OP}, {part}", rw_log=log)
    inserts = chosen.column("rw_inserts")
    if chosen.num_rows and pc.max(inserts).as_py() > 1:
        row = chosen.filter(pc.greater(inserts, 1)).slice(0, 1).to_pylist()[0]
        shown = ", ".join(f"{k}={row[k]!r}" for k in key)
        raise IntegrityError(
            f"{what}: the primary key ({', '.join(key)}) is not unique in its input: {row['rw_inserts']} rows "
            f"have {shown} at the same epoch, so the target cannot hold them all; choose a primary_key "
            "that is unique in the input")
    return chosen.drop_columns(["rw_inserts"])


def append_changes(engine, log: pa.Table, columns: list[str], force: bool, what: str) -> pa.Table:
    """Inserted rows in file order (`columns` + `_op`); deletes are dropped only when forced."""
    if not force:
        bad = engine.sql(f"SELECT count(*) AS n FROM rw_log WHERE {W} < 0", rw_log=log).column(0)[0].as_py()
        if bad:
            raise IntegrityError(f"{what}: the input deleted {bad} rows, which an append-only sink cannot "
                                 "deliver (use force_append_only = 'true' or an upsert sink)")
    # a weight above one is a row inserted that many times (tables without a key)
    return engine.sql(
        f"SELECT {col_list(columns, 'rw_l.')}, CAST({UPSERT_OP} AS TINYINT) AS {OP} "
        f"FROM rw_log rw_l, range(rw_l.{W}) WHERE rw_l.{W} > 0 ORDER BY rw_l.{FILE}", rw_log=log)


__all__ = ["DELETE_OP", "FILE", "OP", "UPSERT_OP", "append_changes", "upsert_changes"]
