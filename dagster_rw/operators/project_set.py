"""ProjectSet: each row becomes one row per element of an array (unnest) or per value of a series
of integers or timestamps (generate_series). Stateless and linear: a row's change is the change of
its rows.

In-process the rows are expanded with Arrow and numpy (a repeat of each row, the elements beside
it); on Spark by POSEXPLODE in the select list, whose position is the element's ordinal. A series of
timestamps is a series of microseconds since 1970 (its step is a fixed number of them), turned back
into timestamps."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W


class ProjectSetOp(Operator):
    def apply(self, inputs):
        (d,) = inputs
        if isinstance(d, pa.Table):
            return self._in_arrow(d)
        return self._in_sql(d)

    def _layout(self):
        node = self.node
        n, width = node.width, node.width + node.extra
        keys = list(range(width, len(node.child.columns)))
        return n, width, keys

    def _in_arrow(self, d: pa.Table) -> pa.Table:
        node = self.node
        n, width, keys = self._layout()
        pos = node.position
        if node.kind == "unnest":
            arrays = d.column(cname(pos)).combine_chunks()
            counts = pc.fill_null(pc.list_value_length(arrays), 0).to_numpy().astype(np.int64)
            values = pc.list_flatten(arrays)  # NULL lists and empty lists give no elements
        else:
            start, stop = (_micros_or_ints(d.column(cname(i))) for i in (pos, width - 1))
            valid = np.asarray(pc.and_(pc.is_valid(start), pc.is_valid(stop)))
            lo = pc.fill_null(start, 0).to_numpy().astype(np.int64)
            hi = pc.fill_null(stop, 0).to_numpy().astype(np.int64)
            step = node.step
            span = (hi - lo) if step > 0 else (lo - hi)
            counts = np.where(valid & (span >= 0), span // abs(step) + 1, 0).astype(np.int64)
            values = None
        rows = np.repeat(np.arange(d.num_rows, dtype=np.int64), counts)
        firsts = np.cumsum(counts) - counts
        ordinal = np.arange(len(rows), dtype=np.int64) - np.repeat(firsts, counts)
        if values is None:
            values = pa.array(lo[rows] + ordinal * node.step)
        out_type = sqltypes.arrow_type(node.columns[pos].type)
        taken = d.take(pa.array(rows))
        columns, names = [], []
        for i in range(n):
            columns.append(values.cast(out_type) if i == pos else taken.column(cname(i)))
            names.append(cname(i))
        for j, k in enumerate(keys):
            columns.append(taken.column(cname(k)))
            names.append(cname(n + j))
        columns += [pa.array(ordinal), taken.column(W)]
        names += [cname(n + len(keys)), W]
        return pa.Table.from_arrays(columns, names=names)

    def _in_sql(self, d):
        """On Spark: POSEXPLODE in the select list (written in DuckDB's dialect, translated)."""
        node = self.node
        n, width, keys = self._layout()
        pos = node.position
        out_type = sqltypes.duckdb_type(node.columns[pos].type)
        if node.kind == "unnest":
            array = quote(cname(pos))
        else:
            lo, hi = (_as_bigint(quote(cname(i)), node.columns[pos].type) for i in (pos, width - 1))
            nonempty = f"{lo} <= {hi}" if node.step > 0 else f"{lo} >= {hi}"
            array = (f"CASE WHEN {nonempty} THEN CAST(generate_series({lo}, {hi}, {node.step}) AS BIGINT[]) "
                     f"ELSE CAST([] AS BIGINT[]) END")
        carried = [i for i in range(n) if i != pos] + keys
        inner = ", ".join(quote(cname(i)) for i in carried)
        value = "make_timestamp(rw_x.col)" if _is_time(node) else "rw_x.col"
        outer = [f"CAST({value} AS {out_type}) AS {quote(cname(i))}" if i == pos else f"rw_x.{quote(cname(i))}"
                 for i in range(n)]
        outer += [f"rw_x.{quote(cname(k))} AS {quote(cname(n + j))}" for j, k in enumerate(keys)]
        outer += [f"CAST(rw_x.pos AS BIGINT) AS {quote(cname(n + len(keys)))}", f"rw_x.{W}"]
        return self.sql(f"SELECT {', '.join(outer)} FROM (SELECT {inner + ', ' if inner else ''}{W}, "
                        f"POSEXPLODE({array}) FROM d) rw_x", d=d)


def _is_time(node) -> bool:
    return node.kind == "series" and node.columns[node.position].type in ("timestamp", "timestamptz")


def _as_bigint(column: str, value_type: str) -> str:
    """A series bound as BIGINT: an integer as is, a timestamp as microseconds since 1970."""
    if value_type in ("timestamp", "timestamptz"):
        return f"date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', CAST({column} AS TIMESTAMP))"
    return f"CAST({column} AS BIGINT)"


def _micros_or_ints(column):
    """A series bound as int64: an integer as is, a timestamp as microseconds since 1970."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", tz=column.type.tz))
    return column.cast(pa.int64())
