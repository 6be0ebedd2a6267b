"""EXPLAIN: the incremental plan of a view, with each operator's stream key and the state it keeps."""
from __future__ import annotations

import datetime

from sqlglot import exp

from .plan import NOW, ORDERED_AGGS, ORDERED_SET_AGGS, Aggregate, AsofJoin, Changelog, agg_text, DynamicFilter, Join, LookupJoin, Map, Node, OverWindow, ProjectSet, Scan, TemporalFilter, TopN, UnionAll, Values, WindowCloseAggregate, WindowCloseFilter, cname


def _named(e: exp.Expression, columns) -> str:
    """An expression over positional columns, shown with the columns' names."""
    names = {cname(i): c.name for i, c in enumerate(columns)}

    def rename(n):
        if isinstance(n, exp.Column) and n.name in names:
            return exp.column(names[n.name], quoted=not names[n.name].isidentifier())
        return n

    return e.copy().transform(rename).sql(dialect="postgres")


def _with_now(bound: exp.Expression) -> str:
    """A temporal filter's bound as written: its now() shown as now()."""
    return bound.transform(lambda n: exp.Anonymous(this="now") if isinstance(n, exp.Column) and n.name == NOW
                           else n).sql(dialect="postgres")


def _names(node: Node, idx: list[int]) -> str:
    return "[" + ", ".join(node.columns[i].name for i in idx) + "]"


def _column_text(node: Node, i: int) -> str:
    """A column by name, or by its expression when a projection computed it as a hidden column."""
    if isinstance(node, Map) and (node.columns[i].hidden or node.columns[i].name.startswith("_rw_")):
        return _named(node.exprs[i], node.child.columns)
    return node.columns[i].name


def _describe(node: Node) -> tuple[str, str]:
    if isinstance(node, Scan):
        return f"StreamScan {{ source: {node.source} }}", "none (reads the source's change log)"
    if isinstance(node, Values):
        return "StreamValues { rows: 1 }", "none (its row is emitted once, when the view is created)"
    if isinstance(node, Map):
        what = "StreamFilter+Project" if node.where is not None else "StreamProject"
        exprs = ", ".join(_named(e, node.child.columns) for e in node.exprs)
        cond = f", where: {_named(node.where, node.child.columns)}" if node.where is not None else ""
        return f"{what} {{ exprs: [{exprs}]{cond} }}", "none"
    if isinstance(node, Changelog):
        return "StreamChangeLog { need_op: true }", "none"
    if isinstance(node, ProjectSet):
        args = [_named(node.child.exprs[i], node.child.child.columns)
                for i in [node.position] + list(range(node.width, node.width + node.extra))]
        if node.kind == "unnest":
            call = f"unnest({args[0]})"
        else:
            step = f", {node.step}" if node.step != 1 else ""
            if node.columns[node.position].type in ("timestamp", "timestamptz"):
                step = f", INTERVAL '{datetime.timedelta(microseconds=node.step)}'"
            call = f"generate_series({args[0]}, {args[1]}{step})"
        return f"StreamProjectSet {{ {node.columns[node.position].name}: {call} }}", "none"
    if isinstance(node, LookupJoin):
        lk = _names(node.left, node.left_keys)
        rk = _names(node.right, node.right_keys)
        looks = f"looks up {node.dimension}'s committed rows by {rk}"
        state = (f"the row emitted for each stream row, by {_names(node, node.stream_key)} (the stream "
                 f"retracts rows); {looks}") if node.memo else f"none ({looks})"
        return f"StreamTemporalJoin {{ type: {node.kind}, on: {lk} = {rk}, dimension: {node.dimension} }}", state
    if isinstance(node, AsofJoin):
        lk = _names(node.left, node.left_keys)
        rk = _names(node.right, node.right_keys)
        lt = _column_text(node.left, node.asof_left)
        rt = _column_text(node.right, node.asof_right)
        return (f"StreamAsOfJoin {{ type: {node.kind}, on: {lk} = {rk}, asof: {lt} {node.asof_op} {rt} }}",
                f"left rows by {lk} + stream key, right rows by {rk} + stream key; a change recomputes "
                "the matches of its join key")
    if isinstance(node, DynamicFilter):
        col = _column_text(node.left, node.column)
        return (f"StreamDynamicFilter {{ condition: {col} {node.op} {_column_text(node.right, 0)} }}",
                f"left rows by [{col}] + stream key; the right side's current row")
    if isinstance(node, Join):
        lk = _names(node.left, node.left_keys)
        rk = _names(node.right, node.right_keys)
        cond = f", residual: {_named(node.residual, node.columns)}" if node.residual is not None else ""
        unused = node.unused if node.kind == "inner" else []
        pruned = f" (without {_names(node, unused)}: read by nothing above)" if unused else ""
        if not node.left_keys:  # no equality between the sides: each change meets the other side whole
            cond = f", condition: {_named(node.residual, node.columns)}" if node.residual is not None else ""
            return (f"StreamNestedLoopJoin {{ type: {node.kind}{cond} }}",
                    f"left rows by stream key, right rows by stream key{pruned}; a change of one side "
                    "is joined with all of the other side's rows")
        return (f"StreamHashJoin {{ type: {node.kind}, on: {lk} = {rk}{cond} }}",
                f"left rows by {lk} + stream key, right rows by {rk} + stream key{pruned}")
    if isinstance(node, WindowCloseAggregate):
        group = _names(node.child, node.group)
        return (f"StreamEowcAggregate {{ group: {group}, window: {node.child.columns[node.window].name}, "
                f"watermark of: {node.source} }}",
                "the rows of open windows (dropped when the window is emitted) and the open windows")
    if isinstance(node, WindowCloseFilter):
        return (f"StreamEowcSort {{ event time: {node.child.columns[node.column].name}, watermark of: {node.source} }}",
                "the rows the watermark has not passed yet, by event time (dropped when emitted)")
    if isinstance(node, TemporalFilter):
        col = _column_text(node.child, node.column)
        cond = " AND ".join(f"{col} {b.op} {_with_now(b.bound)}" for b in node.bounds)
        lower = any(b.is_lower for b in node.bounds)
        return (f"StreamTemporalFilter {{ condition: {cond}, now: the barrier time of each epoch }}",
                f"input rows by [{col}] + stream key, "
                + ("until a lower bound expires them" if lower else "until they pass every bound")
                + "; now() of the last step")
    if isinstance(node, Aggregate):
        group = _names(node.child, node.group)
        aggs = ", ".join(agg_text(node.child, a) for a in node.aggs)
        kind = "StreamSimpleAgg" if node.is_global else "StreamHashAgg"
        state = f"per-group accumulators by {group}"
        if any(a.func in ("min", "max") or a.distinct for a in node.aggs if a.func not in ORDERED_AGGS):
            state += "; value counts per (group, value) for MIN/MAX/COUNT DISTINCT"
        if any(a.func in ORDERED_AGGS and a.func not in ORDERED_SET_AGGS for a in node.aggs):
            state += "; row counts per (group, order key, arguments) for STRING_AGG/FIRST_VALUE/LAST_VALUE"
        if any(a.func in ORDERED_SET_AGGS for a in node.aggs):
            state += "; value counts per (group, ORDER BY value) for PERCENTILE_CONT/PERCENTILE_DISC/MODE/APPROX_PERCENTILE"
        return f"{kind} {{ group: {group}, aggs: [{aggs}] }}", state
    if isinstance(node, UnionAll):
        return f"StreamUnion {{ inputs: {len(node.inputs)}, all: true }}", "none"
    if isinstance(node, TopN):
        order = ", ".join(f"{node.columns[o.column].name} {'DESC' if o.desc else 'ASC'}" for o in node.order)
        ties = ", with_ties: true" if node.with_ties else ""
        return (f"StreamTopN {{ order: [{order}], limit: {node.limit}, offset: {node.offset}{ties} }}",
                "input rows sorted by the order key; the current first limit+offset rows"
                + (" and the rows tied with the last of them" if node.with_ties else ""))
    if isinstance(node, OverWindow):
        child = node.child
        part = _names(child, node.partition)
        order = ", ".join(f"{child.columns[o.column].name} {'DESC' if o.desc else 'ASC'}"
                          + (f" NULLS {'FIRST' if o.nulls_first else 'LAST'}" if o.nulls_first != o.desc else "")
                          for o in node.order)
        key = _names(child, child.stream_key)
        if node.partition:
            state = f"input rows by {part} + stream key {key}; a step re-ranks the partitions it touches"
        else:
            state = f"input rows by stream key {key}; no PARTITION BY: a step re-ranks the whole input"
        arg = child.columns[node.arg].name if node.arg is not None else ("*" if node.func == "count" else "")
        if node.func in ("lag", "lead"):
            arg += f", {node.offset}" + (f", {child.columns[node.default].name}" if node.default is not None else "")
        if node.func == "nth_value":
            arg += f", {node.offset}"
        frame = f", frame: {node.frame}" if node.frame else ""
        return (f"StreamOverWindow {{ function: {node.func}({arg}), partition: {part}, order: [{order}]{frame} }}",
                state)
    return type(node).__name__, "?"


def explain(root: Node, broadcast_rows: int | None = None) -> list[str]:
    """The plan, one operator per line with its stream key and state; with `broadcast_rows`, how
    a Spark step joins a change with the state of each join (by the change's size)."""
    lines: list[str] = []

    def visit(node: Node, depth: int):
        head, state = _describe(node)
        pad = "  " * depth
        lines.append(f"{pad}{head}")
        lines.append(f"{pad}  stream key: {_names(node, node.stream_key)}")
        lines.append(f"{pad}  state: {state}")
        if broadcast_rows is not None and isinstance(node, Join) and not isinstance(node, LookupJoin) \
                and node.left_keys:
            lines.append(f"{pad}  on Spark: a change of at most {broadcast_rows:,} rows is broadcast to the tasks "
                         f"reading the other side's state; a larger one is shuffled with that state by the join key")
        for c in node.children:
            visit(c, depth + 1)

    visit(root, 0)
    return lines
