"""Great Expectations 1.x, run on a snapshot in an ephemeral context (imported only when needed:
GX takes seconds to import, and projects without expectations should not pay for it)."""
from __future__ import annotations

_CONTEXT = None
_DEFINITIONS: dict = {}  # object name -> GX batch definition over a whole DataFrame


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        import great_expectations as gx

        _CONTEXT = gx.get_context(mode="ephemeral")
        _CONTEXT.variables.progress_bars = {"globally": False, "metric_calculations": False}
    return _CONTEXT


def expectation_class(etype: str):
    import great_expectations as gx

    cls_name = "".join(part.capitalize() for part in etype.split("_"))
    cls = getattr(gx.expectations, cls_name, None)
    if cls is None:
        raise ValueError(f"Great Expectations has no expectation {etype!r} (looked for gx.expectations.{cls_name})")
    return cls


def validate(name: str, frame, etype: str, kwargs: dict, index_columns: list[str] | None = None,
             sample_rows: int = 10) -> dict:
    """Validate one expectation on a pandas DataFrame; returns GX's result as a plain dict. With
    `index_columns`, the result names up to `sample_rows` offending rows by those columns
    (`partial_unexpected_index_list`: one dict per row, the index columns and the checked values)."""
    definition = _DEFINITIONS.get(name)
    if definition is None:
        source = _context().data_sources.add_or_update_pandas(f"dagster_rw_{name}")
        definition = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("snapshot")
        _DEFINITIONS[name] = definition
    batch = definition.get_batch(batch_parameters={"dataframe": frame})
    result_format = {"result_format": "SUMMARY", "partial_unexpected_count": sample_rows}
    if index_columns:
        result_format["unexpected_index_column_names"] = list(index_columns)
    result = batch.validate(expectation_class(etype)(**kwargs), result_format=result_format)
    doc = result.to_json_dict()
    exception = (doc.get("exception_info") or {}).get("exception_message")
    return {"success": bool(doc.get("success")), "result": doc.get("result") or {}, "exception": exception}
