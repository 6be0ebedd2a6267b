"""A view's dataflow: its plan's operators, run bottom-up over one step's input deltas."""
from __future__ import annotations

from ..operators.aggregate import AggregateOp
from ..operators.changelog import ChangelogOp
from ..operators.dynamic_filter import DynamicFilterOp
from ..operators.join import InnerJoinOp
from ..operators.asof_join import AsofJoinOp
from ..operators.lookup_join import LookupJoinOp
from ..operators.map import MapOp
from ..operators.outer_join import OuterJoinOp
from ..operators.over_window import OverWindowOp
from ..operators.project_set import ProjectSetOp
from ..operators.scan import ScanOp
from ..operators.temporal_filter import TemporalFilterOp
from ..operators.top_n import TopNOp
from ..operators.union import UnionAllOp
from ..operators.values import ValuesOp
from ..operators.window_close_aggregate import WindowCloseAggregateOp
from ..operators.window_close_filter import WindowCloseFilterOp
from ..sql.plan import (
    Aggregate,
    AsofJoin,
    Changelog,
    DynamicFilter,
    Join,
    LookupJoin,
    Map,
    Node,
    OverWindow,
    ProjectSet,
    Scan,
    TemporalFilter,
    TopN,
    UnionAll,
    Values,
    WindowCloseAggregate,
    WindowCloseFilter,
)


def operator_for(node: Node, ctx):
    if isinstance(node, Scan):
        return ScanOp(node, ctx)
    if isinstance(node, Values):
        return ValuesOp(node, ctx)
    if isinstance(node, Map):
        return MapOp(node, ctx)
    if isinstance(node, ProjectSet):
        return ProjectSetOp(node, ctx)
    if isinstance(node, Changelog):
        return ChangelogOp(node, ctx)
    if isinstance(node, LookupJoin):
        return LookupJoinOp(node, ctx)
    if isinstance(node, AsofJoin):
        return AsofJoinOp(node, ctx)
    if isinstance(node, DynamicFilter):
        return DynamicFilterOp(node, ctx)
    if isinstance(node, Join):
        return InnerJoinOp(node, ctx) if node.kind == "inner" else OuterJoinOp(node, ctx)
    if isinstance(node, WindowCloseAggregate):
        return WindowCloseAggregateOp(node, ctx)
    if isinstance(node, WindowCloseFilter):
        return WindowCloseFilterOp(node, ctx)
    if isinstance(node, TemporalFilter):
        return TemporalFilterOp(node, ctx)
    if isinstance(node, Aggregate):
        return AggregateOp(node, ctx)
    if isinstance(node, UnionAll):
        return UnionAllOp(node, ctx)
    if isinstance(node, TopN):
        return TopNOp(node, ctx)
    if isinstance(node, OverWindow):
        return OverWindowOp(node, ctx)
    raise TypeError(f"no operator for {type(node).__name__}")


def run(root: Node, ctx):
    """Push the step's input deltas through every operator; returns the root's output delta."""
    ctx.unconsolidated = feeding_aggregates(root)
    deltas: dict[int, object] = {}
    for node in root.walk():
        op = operator_for(node, ctx)
        deltas[node.id] = op.apply([deltas[c.id] for c in node.children])
        ctx.operator_done(node.id)
        for child in node.children:
            deltas.pop(child.id, None)
    return deltas[root.id]


def changes_without_input(root: Node) -> bool:
    """Whether a plan's output can change without new input rows: EMIT ON WINDOW CLOSE operators
    emit when a source's watermark passes a window's end, temporal filters as time passes (so such
    a view steps at every epoch, even one that brought its inputs nothing)."""
    return any(isinstance(n, (WindowCloseAggregate, WindowCloseFilter, TemporalFilter)) for n in root.walk())


def reads_the_time(root: Node) -> bool:
    """Whether a plan's output changes as time passes, with no input at all (a temporal filter):
    such a view needs epochs even while its inputs are quiet."""
    return any(isinstance(n, TemporalFilter) for n in root.walk())


def feeding_aggregates(root: Node) -> set[int]:
    """The nodes whose every output row reaches a GROUP BY through stateless maps alone. An
    aggregate adds up weights per group (and per value, for MIN/MAX/COUNT DISTINCT), so a row
    inserted and deleted in one delta adds nothing there: these nodes' deltas need no
    consolidation. (Not an EMIT ON WINDOW CLOSE aggregate, which buffers rows.)"""
    out: set[int] = set()

    def visit(node: Node, feeds: bool) -> None:
        if feeds:
            out.add(node.id)
        for child in node.children:
            visit(child, type(node) is Aggregate or (feeds and isinstance(node, Map)))

    visit(root, False)
    return out


def state_layout(root: Node, ctx) -> dict[str, tuple]:
    """Every state table of the plan: `op<id>.<name>` -> (primary key, schema)."""
    out = {}
    for node in root.walk():
        for name, spec in operator_for(node, ctx).state_tables().items():
            out[f"op{node.id}.{name}"] = spec
    return out
