"""Whether a plan can ever retract a row: the rule behind append-only sinks.

A scan of an APPEND ONLY table (or of a view that is itself append-only) only inserts; filters,
projections, inner joins and UNION ALL of insert-only inputs only insert; aggregations, top-N, ranking
windows, outer joins and ASOF joins (a new right row can take a left row's match) may retract what
they emitted before.
"""
from __future__ import annotations

from .plan import AsofJoin, Join, Map, Node, Scan, TemporalFilter, UnionAll


def is_append_only(node: Node, resolve_object, plan_of) -> bool:
    """`resolve_object(name)` gives a catalog object; `plan_of(obj)` the plan of a materialized view."""
    if isinstance(node, Scan):
        return source_is_append_only(node.source, resolve_object, plan_of)
    inner_join = isinstance(node, Join) and node.kind == "inner" and not isinstance(node, AsofJoin)
    if isinstance(node, (Map, UnionAll)) or inner_join or (
            isinstance(node, TemporalFilter) and not any(b.is_lower for b in node.bounds)):
        # (a temporal filter with upper bounds alone only lets rows in, later)
        return all(is_append_only(c, resolve_object, plan_of) for c in node.children)
    return False


def source_is_append_only(name: str, resolve_object, plan_of) -> bool:
    obj = resolve_object(name)
    if obj is None:
        return False
    if obj.kind == "source":  # a stream (Kafka) only appends
        return True
    if obj.kind == "table":
        return bool(obj.append_only)
    if obj.kind == "materialized_view":
        return is_append_only(plan_of(obj), resolve_object, plan_of)
    return False
