"""TUMBLE and HOP: a relation's rows with window_start and window_end."""
from __future__ import annotations

import sqlglot
from sqlglot import exp

from ...errors import ProgrammingError
from ..plan import Col, Node, UnionAll, cname
from .scope import Entry, Scope


class TimeWindows:
    """Planner methods for TUMBLE and HOP in FROM."""

    def plan_time_window(self, item: exp.Table, group: int) -> tuple[Node, Scope]:
        """TUMBLE(rel, ts, size[, offset]) and HOP(rel, ts, slide, size[, offset]): the relation's rows
        with `window_start` and `window_end` added; HOP repeats each row once per window holding it
        (one branch per window, so the stream key is the branch plus the row's key). An offset
        shifts every window by that much (RisingWave's optional last argument)."""
        fn = item.this
        kind = fn.name.lower()
        args = fn.expressions
        want = 3 if kind == "tumble" else 4
        if len(args) not in (want, want + 1):
            raise self.refuse(f"{kind.upper()} with {len(args)} arguments ({kind.upper()} takes {want} or "
                              f"{want + 1}: " + ("relation, time column, size[, offset])" if kind == "tumble"
                                                  else "relation, time column, slide, size[, offset])"), item)
        rel, ts = args[0], args[1]
        if not isinstance(rel, (exp.Column, exp.Table)) or not isinstance(ts, exp.Column):
            raise self.refuse(f"{kind.upper()} over anything but a named relation and a column", item)
        sizes = [self.interval_micros(a, kind) for a in args[2:want]]
        offset = self.interval_micros(args[want], kind, what="offset") if len(args) > want else 0
        slide, size = (sizes[0], sizes[0]) if kind == "tumble" else (sizes[0], sizes[1])
        if size % slide:
            raise self.refuse("HOP whose size is not a multiple of its slide", item)
        alias = item.alias_or_name or rel.name
        table = exp.to_table(rel.name)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        branches = []
        for k in range(size // slide):
            child, scope = self.plan_item(table.copy())
            entry = scope.resolve(exp.column(ts.name), self)
            ttype = child.columns[entry.index].type
            if ttype not in ("timestamp", "timestamptz"):
                raise self.refuse(f"{kind.upper()} over {ts.name!r} of type {ttype} (it needs a timestamp)", ts)
            start, end = window_bounds(cname(entry.index), ttype, slide, size, k, offset)
            visible = [i for i, c in enumerate(child.columns) if not c.hidden]
            exprs = [exp.column(cname(i)) for i in visible] + [start, end]
            names = [child.columns[i].name for i in visible] + ["window_start", "window_end"]
            hidden = [False] * len(exprs)
            for j in child.stream_key:
                exprs.append(exp.column(cname(j)))
                names.append(f"_rw_k{len(exprs)}")
                hidden.append(True)
            node = self.map(child, exprs, None, names, hidden)
            node.stream_key = list(range(len(visible) + 2, len(exprs)))
            self.window_maps[id(node)] = (entry.index, len(visible), len(visible) + 1, size)
            branches.append((node, len(visible) + 2))
        names = [c.name for c in branches[0][0].columns[:branches[0][1]]]
        entries = [Entry(alias, n, i, group) for i, n in enumerate(names)]
        if len(branches) == 1:
            return branches[0][0], Scope(entries)
        width = branches[0][1]
        first = branches[0][0]
        columns = [Col(c.name, c.type) for c in first.columns[:width]] + [Col("_rw_branch", "integer", True)]
        key = [width]
        for b, (m, _) in enumerate(branches):
            for j in m.stream_key:
                key.append(len(columns))
                columns.append(Col(f"_rw_u{b}_{j - width}", m.columns[j].type, True))
        return UnionAll(columns=columns, stream_key=key, inputs=[m for m, _ in branches], visible=width), \
            Scope(entries)

    def interval_micros(self, e: exp.Expression, kind: str, what: str = "size") -> int:
        """A constant window size (or offset) as microseconds (no months: windows must have a fixed
        length). A size must be positive; an offset may be zero or negative."""
        if not isinstance(e, exp.Interval):
            raise self.refuse(f"a {kind.upper()} {what} that is not an INTERVAL literal", e)
        try:
            value = self.engine.sql(f"SELECT {e.sql(dialect='duckdb')} AS i").column(0)[0].as_py()
        except Exception:
            raise self.refuse(f"the interval {e.sql(dialect='postgres')}", e) from None
        months, days, nanos = value.months, value.days, value.nanoseconds
        if months:
            raise self.refuse(f"a {kind.upper()} {what} in months or years ({e.sql(dialect='postgres')})", e)
        micros = days * 86_400_000_000 + nanos // 1000
        if micros <= 0 and what == "size":
            raise ProgrammingError(f"{kind.upper()} size must be positive: {e.sql(dialect='postgres')}"
                                   f"{self.where(e)}")
        return micros

def window_bounds(column: str, ttype: str, slide: int, size: int, k: int,
                  offset: int = 0) -> tuple[exp.Expression, exp.Expression]:
    """window_start and window_end of the k-th window (counting back) holding a row's time: windows
    start at `offset` plus multiples of `slide` microseconds since 1970-01-01, as RisingWave aligns
    them (window_start = t - (t - offset) mod slide, the modulo taken as nonnegative)."""
    us = f"date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', CAST({column} AS TIMESTAMP))"
    shifted = f"({us}) - ({offset})" if offset else us
    start = f"{us} - ((({shifted}) % {slide}) + {slide}) % {slide} - {k * slide}"
    bounds = [f"make_timestamp({start})", f"make_timestamp({start} + {size})"]
    if ttype == "timestamptz":
        bounds = [f"CAST({b} AS TIMESTAMPTZ)" for b in bounds]
    return tuple(sqlglot.parse_one(b, read="duckdb") for b in bounds)
