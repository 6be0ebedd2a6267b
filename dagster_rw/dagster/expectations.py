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


def validate(name: str, frame, etype: str, kwargs: dict) -> dict:
    """Validate one expectation on a pandas DataFrame; returns GX's result as a plain dict."""
    definition = _DEFINITIONS.get(name)
    if definition is None:
        source = _context().data_sources.add_or_update_pandas(f"dagster_rw_{name}")
        definition = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("snapshot")
        _DEFINITIONS[name] = definition
    batch = definition.get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(expectation_class(etype)(**kwargs))
    doc = result.to_json_dict()
    exception = (doc.get("exception_info") or {}).get("exception_message")
    return {"success": bool(doc.get("success")), "result": doc.get("result") or {}, "exception": exception}
