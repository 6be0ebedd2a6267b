"""EMIT ON WINDOW CLOSE: an aggregation per TUMBLE/HOP window emitted once the watermark passes
the window's end, rows emitted once the watermark passes their event time, or window functions
ordered by event time, computed over the rows as the watermark passes them."""
from __future__ import annotations

from sqlglot import exp

from ..plan import (
    ORDERED_AGGS,
    Aggregate,
    Join,
    Map,
    Node,
    OverWindow,
    ProjectSet,
    Scan,
    UnionAll,
    WindowCloseAggregate,
    WindowCloseFilter,
)


class WindowClose:
    """Planner methods for EMIT ON WINDOW CLOSE."""

    def emit_on_window_close(self, root: Node, query) -> Node:
        """Replace the view's aggregation by one that emits each window once, when it closes."""
        chain, node = [], root
        while isinstance(node, Map):
            chain.append(node)
            node = node.child
        if isinstance(node, OverWindow):
            self.window_functions_on_close(node, query)
            return root
        if not isinstance(node, Aggregate):
            eowc = self.window_close_filter(node, query)
            if not chain:
                return eowc
            chain[-1].child = eowc
            return root
        if node.is_global:
            raise self.refuse("EMIT ON WINDOW CLOSE on anything but GROUP BY a TUMBLE/HOP window "
                              "(filters and projections above it are fine)", query)
        bad = [a for a in node.aggs if a.distinct and a.func != "count"]
        if bad:
            raise self.refuse(f"{bad[0].func}(DISTINCT ...) with EMIT ON WINDOW CLOSE", query)
        bad = [a for a in node.aggs if a.func in ORDERED_AGGS]
        if bad:
            raise self.refuse(f"{bad[0].func.upper()}(...) with EMIT ON WINDOW CLOSE", query)
        for g in node.group:
            origin = self.window_origin(node.child, g)
            if origin is not None:
                source, size, is_start = origin
                break
        else:
            raise self.refuse("EMIT ON WINDOW CLOSE without window_start or window_end of a TUMBLE/HOP over "
                              "a source's WATERMARK column in GROUP BY", query)
        eowc = WindowCloseAggregate(columns=node.columns, stream_key=node.stream_key, child=node.child,
                                    group=node.group, aggs=node.aggs, window=g, window_is_start=is_start,
                                    size_us=size, source=source)
        if not chain:
            return eowc
        chain[-1].child = eowc
        return root

    def window_functions_on_close(self, top: OverWindow, query) -> None:
        """EMIT ON WINDOW CLOSE over window functions ordered by a WATERMARK column: the rows reach
        the window functions once the watermark passes their event time (a WindowCloseFilter
        under the lowest one), in event-time order across steps (later rows are later in time;
        late ones are dropped), so a row's value, over itself and the rows before it, is final
        when it is computed and is never retracted. Functions that look past the current row
        (lead, frames reaching FOLLOWING rows) would have to wait for rows the watermark has not
        passed: refused."""
        windows, node = [], top
        while isinstance(node, OverWindow):
            windows.append(node)
            node = node.child
        col = windows[-1].order[0].column if windows[-1].order else None
        for w in windows:
            if not w.order or w.order[0].column != col or w.order[0].desc:
                raise self.refuse("EMIT ON WINDOW CLOSE over a window function whose ORDER BY does not start "
                                  "with the event time (a WATERMARK column), ascending", query)
            if w.func == "lead":
                raise self.refuse("lead(...) with EMIT ON WINDOW CLOSE (it waits for later rows)", query)
            if "FOLLOWING" in w.frame.upper():
                raise self.refuse(f"the window frame {w.frame} with EMIT ON WINDOW CLOSE (it waits for later "
                                  "rows)", query)
        source = self.watermark_source(node, col)
        if source is None:
            raise self.refuse("EMIT ON WINDOW CLOSE over a window function whose ORDER BY does not start "
                              "with the event time (a WATERMARK column), ascending", query)
        if not self.append_only(node):
            raise self.refuse("EMIT ON WINDOW CLOSE over rows that may be updated or deleted (an APPEND ONLY "
                              "table or a source can be used)", query)
        windows[-1].child = WindowCloseFilter(columns=list(node.columns), stream_key=list(node.stream_key),
                                              child=node, column=col, source=source)

    def window_close_filter(self, node: Node, query) -> WindowCloseFilter:
        """EMIT ON WINDOW CLOSE without GROUP BY: the rows, each emitted once the watermark passes
        the event time it carries (a WATERMARK column of a table or source, passed through)."""
        found = [(i, self.watermark_source(node, i)) for i in range(len(node.columns))]
        found = [(i, src) for i, src in found if src]
        if not found:
            raise self.refuse("EMIT ON WINDOW CLOSE over rows without the WATERMARK column of a table or "
                              "source (or without GROUP BY a TUMBLE/HOP window)", query)
        if not self.append_only(node):
            raise self.refuse("EMIT ON WINDOW CLOSE over rows that may be updated or deleted (an APPEND ONLY "
                              "table or a source can be used)", query)
        col, source = found[0]
        return WindowCloseFilter(columns=list(node.columns), stream_key=list(node.stream_key), child=node,
                                 column=col, source=source)

    def window_origin(self, node: Node, col: int):
        """(source, window size, is window_start) when column `col` of `node` is the start or end of
        a TUMBLE/HOP window over a source's watermark column, passed through filters, projections,
        unions of HOP branches and joins; None otherwise."""
        if isinstance(node, Map):
            info = self.window_maps.get(id(node))
            if info is not None and col in (info[1], info[2]):
                source = self.watermark_source(node.child, info[0])
                return (source, info[3], col == info[1]) if source else None
            e = node.exprs[col]
            if isinstance(e, exp.Column) and not e.table and e.name.startswith("c"):
                return self.window_origin(node.child, int(e.name[1:]))
            return None
        if isinstance(node, UnionAll):
            if col >= node.visible:
                return None
            found = {self.window_origin(i, col) for i in node.inputs}
            return found.pop() if len(found) == 1 else None
        if isinstance(node, Join):
            n = len(node.left.columns)
            return self.window_origin(node.left, col) if col < n else self.window_origin(node.right, col - n)
        return None

    def watermark_source(self, node: Node, col: int) -> str | None:
        """The source whose WATERMARK column `col` of `node` is (through filters, projections, joins)."""
        if isinstance(node, Scan):
            obj = self.resolve_object(node.source)
            wm = (obj.options or {}).get("watermark_column") if obj is not None else None
            return node.source if wm and node.columns[col].name == wm else None
        if isinstance(node, Map):
            e = node.exprs[col]
            if isinstance(e, exp.Column) and not e.table and e.name.startswith("c"):
                return self.watermark_source(node.child, int(e.name[1:]))
            return None
        if isinstance(node, Join):
            n = len(node.left.columns)
            return self.watermark_source(node.left, col) if col < n else self.watermark_source(node.right, col - n)
        if isinstance(node, ProjectSet):  # the select list's other columns pass through
            return self.watermark_source(node.child, col) if col < node.width and col != node.position else None
        return None
