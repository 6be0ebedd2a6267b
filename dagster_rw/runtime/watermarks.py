"""Watermarks of sources and of tables with WATERMARK FOR: how they advance with each step, and
their history per epoch, which views read as of their own target epoch (a view that lags sees the
watermark its inputs had at the epoch it is computing)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..storage.manifest import Manifest

WATERMARK_HISTORY = 256  # epochs of watermark history a source keeps for views that lag


def advance_watermark(column: str | None, delay_us: int, positions: dict, rows: pa.Table, target: int) -> dict:
    """The source's watermark after this step: the largest event time seen minus the delay, never
    moving back; with its history per epoch (microseconds since 1970), which views read as of
    their own target epoch. `column`: the WATERMARK column (None: no watermark)."""
    if not column:
        return {}
    wm = positions.get("watermark")
    if rows.num_rows:
        ts = rows.column(column)
        if ts.null_count < rows.num_rows:
            top = pc.max(ts.cast(pa.timestamp("us", tz=ts.type.tz)).cast(pa.int64())).as_py()
            wm = top - delay_us if wm is None else max(wm, top - delay_us)
    history = [h for h in positions.get("watermarks", []) if h[0] < target]
    if wm is not None:
        history.append([target, wm])
    return {"watermark": wm, "watermarks": history[-WATERMARK_HISTORY:]}


def watermark_at(m: Manifest, epoch: int) -> int | None:
    """A source's watermark as of `epoch` (microseconds since 1970), None before its first event."""
    found = None
    for e, wm in m.positions.get("watermarks", []):
        if e <= epoch:
            found = wm
    return found
