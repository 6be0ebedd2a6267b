"""Asset checks: key, batch equality, and declared expectations, evaluated on an object's committed
data, in the step that materializes it or, selected alone, without materializing anything.

- `key_unique_not_null`: the primary key (or the view's stream key) is unique and not null.
- `matches_batch_query` (views): the view equals its query recomputed in batch (fully up to the
  resource's `check_full_max_rows`, on a sample of keys above).
- one check per expectation declared in the project's `expectations.yaml`, evaluated by Great
  Expectations 1.x in an ephemeral context; GX's result details become the check's metadata, and a
  failing one names its offending rows by the object's key (primary key, else stream key, else every
  column): the first of them in the description, up to ten in `unexpected_rows` (a markdown table).
"""
from __future__ import annotations

import math
import re

import dagster as dg

from ..runtime import verify
from .project import RwObject

KEY_CHECK = "key_unique_not_null"
BATCH_CHECK = "matches_batch_query"
SINK_CHECK = "sink_not_stuck"
UNEXPECTED_ROWS = 10  # offending rows a failing expectation shows


def expectation_check_name(obj: RwObject, index: int) -> str:
    """A stable check name per declared expectation: its type and column, numbered when repeated."""
    names = []
    for item in obj.expectations[:index + 1]:
        column = item["kwargs"].get("column") or "_".join(item["kwargs"].get("column_list", []) or [])
        name = re.sub(r"[^A-Za-z0-9_]", "_", f"{item['type']}__{column}" if column else item["type"])
        names.append(name if name not in names else f"{name}_{len(names)}")
    return names[index]


def check_specs_for(obj: RwObject, asset_key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    specs = []
    if obj.kind == "sink":
        return [dg.AssetCheckSpec(SINK_CHECK, asset=asset_key,
                                  description="the sink has not been failing to deliver for longer than the "
                                              "resource's sink_stuck_after_seconds")]
    key = obj.primary_key or obj.stream_key
    if key:
        specs.append(dg.AssetCheckSpec(KEY_CHECK, asset=asset_key,
                                       description=f"({', '.join(key)}) is unique and never null"))
    if obj.kind == "materialized_view":
        specs.append(dg.AssetCheckSpec(BATCH_CHECK, asset=asset_key,
                                       description="the view equals its query recomputed in batch"))
    for i, item in enumerate(obj.expectations):
        specs.append(dg.AssetCheckSpec(
            expectation_check_name(obj, i), asset=asset_key,
            description=f"Great Expectations: {item['type']}({_kwargs_text(item['kwargs'])})"))
    return specs


def _kwargs_text(kwargs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def evaluate(resource, conn, obj: RwObject, check_key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    """The check's result on the object's committed data; `dagster_rw/epoch` says which epoch that is."""
    manifest = conn.wh.manifest(obj.name)
    epoch = {"dagster_rw/epoch": manifest.epoch} if manifest.exists else {}
    name = check_key.name
    if name == KEY_CHECK:
        r = verify.key_check(conn, obj.name)
        return dg.AssetCheckResult(
            asset_key=check_key.asset_key, check_name=name, passed=r["passed"],
            metadata={**epoch, "key": r["key"], "rows": r["rows"] or 0, "duplicate_keys": r["duplicate_keys"],
                      "null_keys": r["null_keys"], "duplicate_sample": dg.MetadataValue.json(r["duplicate_sample"])})
    if name == SINK_CHECK:
        (row,) = conn.wh.status([obj.name])
        stuck = float(row.get("stuck_seconds") or 0.0)
        limit = float(resource.sink_stuck_after_seconds)
        return dg.AssetCheckResult(
            asset_key=check_key.asset_key, check_name=name, passed=stuck <= limit,
            metadata={**epoch, "stuck_seconds": stuck, "limit_seconds": limit,
                      "retries": int(row.get("retries") or 0), "last_error": str(row.get("last_error") or "")})
    if name == BATCH_CHECK:
        r = verify.batch_check(conn, obj.name, resource.check_full_max_rows, resource.check_sample_keys)
        metadata = {**epoch, **{k: v for k, v in r.items() if k not in ("passed", "difference_sample")}}
        if "difference_sample" in r:
            metadata["difference_sample"] = dg.MetadataValue.json(r["difference_sample"])
        return dg.AssetCheckResult(asset_key=check_key.asset_key, check_name=name, passed=r["passed"],
                                   metadata=metadata, description=r.get("note"))
    for i, _ in enumerate(obj.expectations):
        if expectation_check_name(obj, i) == name:
            return _expectation_result(conn, obj, i, check_key, epoch)
    raise dg.DagsterInvariantViolationError(f"unknown check {name!r} on {obj.name!r}")


def _expectation_result(conn, obj: RwObject, index: int, check_key: dg.AssetCheckKey,
                        metadata: dict) -> dg.AssetCheckResult:
    from . import expectations

    item = obj.expectations[index]
    frame = verify.snapshot_arrow(conn, obj.name).to_pandas()
    key = list(obj.primary_key or obj.stream_key) or [c.name for c in obj.columns]
    outcome = expectations.validate(obj.name, frame, item["type"], item["kwargs"], index_columns=key,
                                    sample_rows=UNEXPECTED_ROWS)
    result = outcome.get("result") or {}
    metadata = {**metadata, "expectation": item["type"], "kwargs": dg.MetadataValue.json(_jsonable(item["kwargs"]))}
    for k, v in result.items():
        metadata[f"gx/{k}"] = dg.MetadataValue.json(_jsonable(v)) if isinstance(v, (list, dict)) else _jsonable(v)
    description = None
    if outcome.get("exception"):
        metadata["gx/exception"] = outcome["exception"]
    rows = [r for r in result.get("partial_unexpected_index_list") or [] if isinstance(r, dict)]
    if rows and not outcome["success"]:
        rows = [{c: _jsonable(r.get(c)) for c in [*key, *(c for c in r if c not in key)]} for r in rows]
        metadata["unexpected_rows"] = dg.MetadataValue.md(_markdown_table(rows))
        count, total = result.get("unexpected_count"), result.get("element_count")
        shown = "; ".join(", ".join(f"{c} = {_shown(r[c])}" for c in key) for r in rows[:3])
        description = (f"{count} of {total} rows unexpected" if count is not None and total is not None
                       else "unexpected rows") + f", e.g. {shown}" + ("; ..." if len(rows) > 3 else "")
    return dg.AssetCheckResult(asset_key=check_key.asset_key, check_name=check_key.name,
                               passed=bool(outcome["success"]), metadata=metadata, description=description)


def _shown(v) -> str:
    return "NULL" if v is None else str(v)


def _markdown_table(rows: list[dict]) -> str:
    """Rows as a markdown table (values escaped so that each stays in its cell)."""
    def cell(v) -> str:
        return _shown(v).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    columns = list(rows[0])
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return None  # NaN (how pandas shows a NULL)
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)
