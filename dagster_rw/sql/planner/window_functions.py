"""Window functions in a select list (OverWindow): row_number, rank, dense_rank, lag, lead,
first_value, last_value, nth_value and the window aggregates; frames (ROWS, RANGE) on the value
functions and the aggregates."""
from __future__ import annotations

from sqlglot import exp

from ... import types as sqltypes
from ...errors import ProgrammingError
from ..plan import Agg, Col, Node, OrderKey, OverWindow, cname
from ..rewrites.context import Context
from ..syntax import (
    AGG_FUNCS,
    WINDOW_AGGS,
    WINDOW_FUNCS,
    WINDOW_OFFSETS,
    WINDOW_VALUES,
    transform_top_down,
    without_windows,
)
from .aggregates import INT_TYPES
from .scope import Scope

RANGE_NUMERIC_TYPES = INT_TYPES + ("real", "double precision")  # and numeric(p,s)
RANGE_TIME_TYPES = ("timestamp", "timestamptz")


class WindowFunctions:
    """Planner methods for window functions (OVER) in a select list."""

    def window_calls(self, select_items) -> list[exp.Window]:
        """The window function calls of the select list; refuses what OverWindow cannot maintain."""
        found = []
        for e, _ in select_items:
            for w in e.find_all(exp.Window):
                self.check_window(w)
                found.append(w)
        return found

    def check_window(self, w: exp.Window) -> None:
        fn = w.this
        if type(fn) in WINDOW_AGGS:
            arg = fn.this
            if isinstance(arg, exp.Distinct) or any(v for k, v in fn.args.items() if k not in ("this", "big_int")) \
                    or (isinstance(arg, exp.Star) and type(fn) is not exp.Count) or arg is None:
                raise self.refuse(f"this window aggregate: {w.sql(dialect='postgres')}", w)
            for n in arg.walk():
                if type(n) in AGG_FUNCS or isinstance(n, (exp.AggFunc, exp.Window)):
                    raise self.refuse("an aggregate inside a window aggregate", w)
            window_frame(self, w)
        elif type(fn) in WINDOW_OFFSETS:
            name = WINDOW_OFFSETS[type(fn)]
            offset_of(self, w)
            for part in (fn.this, fn.args.get("default")):
                for n in part.walk() if part is not None else ():
                    if type(n) in AGG_FUNCS or isinstance(n, (exp.AggFunc, exp.Window)):
                        raise self.refuse(f"an aggregate inside {name}()", w)
            if w.args.get("order") is None:
                raise self.refuse(f"{name}() without ORDER BY (the row before or after would be arbitrary)", w)
        elif type(fn) in WINDOW_VALUES:
            name = WINDOW_VALUES[type(fn)]
            arg = fn.this
            if arg is None or isinstance(arg, (exp.Order, exp.Distinct, exp.Star)) or \
                    any(v for k, v in fn.args.items() if k not in ("this", "offset")):
                raise self.refuse(f"this {name}() call: {w.sql(dialect='postgres')}", w)
            for n in arg.walk():
                if type(n) in AGG_FUNCS or isinstance(n, (exp.AggFunc, exp.Window)):
                    raise self.refuse(f"an aggregate inside {name}()", w)
            if type(fn) is exp.NthValue:
                nth_of(self, w)
            if w.args.get("order") is None:
                raise self.refuse(f"{name}() without ORDER BY (which row comes first would be arbitrary)", w)
            window_frame(self, w)
        elif type(fn) not in WINDOW_FUNCS:
            raise self.refuse("window functions other than row_number(), rank(), dense_rank(), count(), sum(), "
                              "avg(), min(), max(), lag(), lead(), first_value(), last_value() and nth_value(): "
                              f"{w.sql(dialect='postgres')}", w)
        elif any(v for v in fn.args.values()):
            raise self.refuse(f"arguments to {WINDOW_FUNCS[type(fn)]}()", w)
        elif w.args.get("spec") is not None:
            raise self.refuse("window frame clauses on ranking functions", w)
        if w.args.get("alias") is not None:
            raise self.refuse("named windows (OVER name)", w)
        if (w.args.get("over") or "OVER").upper() != "OVER" or w.args.get("first") is not None:
            raise self.refuse(f"this window clause: {w.sql(dialect='postgres')}", w)
        if type(fn) is exp.RowNumber and w.args.get("order") is None:
            raise self.refuse("row_number() without ORDER BY (its numbering would be arbitrary)", w)
        defs = list(w.args.get("partition_by") or [])
        if w.args.get("order") is not None:
            defs += [o.this for o in w.args["order"].expressions]
        for d in defs:
            for n in d.walk():
                if type(n) in AGG_FUNCS or isinstance(n, exp.AggFunc):
                    raise self.refuse("window functions together with GROUP BY or aggregates in the same SELECT", w)

    def plan_windows(self, q: exp.Select, node: Node, scope: Scope, select_items, windows):
        """Map (the select list's inputs, each window's partition and order expressions, the stream
        key), then one OverWindow per window call appending its rank, then the final projection."""
        pre_exprs: list[exp.Expression] = []
        pre_names: list[str] = []

        def add(e: exp.Expression, name: str) -> int:
            text = e.sql()
            for i, x in enumerate(pre_exprs):
                if x.sql() == text:
                    return i
            pre_exprs.append(e)
            pre_names.append(name)
            return len(pre_exprs) - 1

        def outside_windows(e: exp.Expression):
            """Column references of `e` that are not inside a window call."""
            if isinstance(e, exp.Window):
                return
            if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
                yield e
                return
            for child in e.iter_expressions():
                yield from outside_windows(child)

        item_pos: list[int | None] = []
        for e, name in select_items:
            if e.find(exp.Window) is None:
                item_pos.append(add(self.bind(e, scope), name))
                continue
            self.bind(without_windows(e), scope)  # refuses what cannot be maintained
            for col in outside_windows(e):
                add(self.bind(col, scope), col.name)
            item_pos.append(None)
        specs = []
        for w in windows:
            part = [add(self.bind(p, scope), p.sql(dialect="postgres")) for p in w.args.get("partition_by") or []]
            order = []
            for o in (w.args["order"].expressions if w.args.get("order") is not None else []):
                desc = bool(o.args.get("desc"))
                nulls_first = o.args.get("nulls_first")
                order.append(OrderKey(add(self.bind(o.this, scope), o.this.sql(dialect="postgres")), desc,
                                      bool(desc if nulls_first is None else nulls_first)))
            arg = default = None
            frame = ""
            if type(w.this) in WINDOW_OFFSETS:
                arg, default = self.offset_arguments(w, node, scope, add)
            elif type(w.this) in WINDOW_AGGS:
                if not isinstance(w.this.this, exp.Star):
                    bound = self.bind(w.this.this, scope)
                    if type(w.this) is exp.Sum:
                        bound = self.sum_argument(node, bound)
                    arg = add(bound, w.this.this.sql(dialect="postgres"))
                frame = window_frame(self, w)
            elif type(w.this) in WINDOW_VALUES:
                arg = add(self.bind(w.this.this, scope), w.this.this.sql(dialect="postgres"))
                frame = window_frame(self, w)
            func = WINDOW_FUNCS.get(type(w.this)) or WINDOW_OFFSETS.get(type(w.this)) or \
                WINDOW_VALUES.get(type(w.this)) or WINDOW_AGGS[type(w.this)]
            n = nth_of(self, w) if type(w.this) is exp.NthValue else offset_of(self, w)
            specs.append((func, part, order, arg, frame, default, n))
        extra_pos = [add(e, f"_rw_o{i}") for i, e in enumerate(self.order_exprs_over_input(q, scope, select_items))]
        cur: Node = self.project(node, pre_exprs, pre_names)
        rank_pos: dict[str, int] = {}  # identical window calls share one rank column
        for w, (func, part, order, arg, frame, default, offset) in zip(windows, specs):
            if w.sql() in rank_pos:
                continue
            rank_pos[w.sql()] = len(cur.columns)
            if frame.startswith("RANGE"):
                frame = range_frame(self, w, frame, [cur.columns[o.column].type for o in order])
            if arg is None:
                out_type = "bigint"
            elif func in ("lag", "lead") or type(w.this) in WINDOW_VALUES:
                out_type = cur.columns[arg].type
            else:
                out_type = self.agg_type(Agg(func=func, arg=arg), cur)
            cur = OverWindow(columns=list(cur.columns) + [Col(func, out_type, True)], stream_key=list(cur.stream_key),
                             child=cur, func=func, partition=part, order=order, arg=arg, frame=frame,
                             offset=offset, default=default)

        def over_ranks(n):
            if isinstance(n, exp.Window):
                return exp.column(cname(rank_pos[n.sql()]))
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                return exp.column(cname(add(self.bind(n, scope), n.name)))
            return n

        exprs = [exp.column(cname(pos)) if pos is not None else transform_top_down(e, over_ranks)
                 for (e, _), pos in zip(select_items, item_pos)]
        names = [n for _, n in select_items]
        extra = [exp.column(cname(p)) for p in extra_pos]
        return self.project(cur, exprs, names, extra=extra), names


    def offset_arguments(self, w: exp.Window, node: Node, scope: Scope, add) -> tuple[int, int | None]:
        """The columns of lag's / lead's value and default in the projection before the windows. With
        a default of another type both are cast to their common type, as PostgreSQL's
        lag(anycompatible, integer, anycompatible) returns it."""
        fn = w.this
        value = self.bind(fn.this, scope)
        default = fn.args.get("default")
        if default is None:
            return add(value, fn.this.sql(dialect="postgres")), None
        default = self.bind(default, scope)
        types = [self.type_of(node, value), self.type_of(node, default)]
        if types[0] != types[1] and not isinstance(fn.args["default"], exp.Null):
            common = self.type_of(node, exp.Coalesce(this=value.copy(), expressions=[default.copy()]))
            value, default = (e if t == common else exp.Cast(this=e, to=exp.DataType.build(
                sqltypes.duckdb_type(common), dialect="duckdb")) for e, t in zip((value, default), types))
        elif types[0] != types[1]:
            default = exp.Cast(this=default, to=exp.DataType.build(sqltypes.duckdb_type(types[0]), dialect="duckdb"))
        return add(value, fn.this.sql(dialect="postgres")), add(default, fn.args["default"].sql(dialect="postgres"))


def offset_of(planner: Context, w: exp.Window) -> int:
    """lag's / lead's offset: a constant number of rows (1 when not given)."""
    offset = w.this.args.get("offset")
    if offset is None:
        return 1
    if not (isinstance(offset, exp.Literal) and not offset.is_string and str(offset.this).isdigit()):
        raise planner.refuse(f"a {WINDOW_OFFSETS[type(w.this)]}() offset that is not a non-negative integer "
                             f"constant: {offset.sql(dialect='postgres')}", w)
    return int(offset.this)


def nth_of(planner: Context, w: exp.Window) -> int:
    """nth_value's n: a positive integer constant."""
    n = w.this.args.get("offset")
    sign, lit = (-1, n.this) if isinstance(n, exp.Neg) else (1, n)
    if not (isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit()):
        raise planner.refuse(f"an nth_value() position that is not an integer constant: "
                             f"{n.sql(dialect='postgres') if n is not None else '(none)'}", w)
    if sign * int(lit.this) <= 0:
        raise ProgrammingError(f"in {planner.obj!r}: argument of nth_value must be greater than zero"
                               f"{planner.where(w)}")
    return int(lit.this)


# the order of frame bounds: a frame's start may not come after its end
_BOUND_RANK = {"UNBOUNDED PRECEDING": 0, "PRECEDING": 1, "CURRENT ROW": 2, "FOLLOWING": 3, "UNBOUNDED FOLLOWING": 4}


def window_frame(planner: Context, w: exp.Window) -> str:
    """A window aggregate's frame as SQL: "" for SQL's default (the partition, or with ORDER BY the
    rows up to the current row and its peers), else `ROWS | RANGE BETWEEN <bound> AND <bound>` with
    UNBOUNDED, n PRECEDING / FOLLOWING or CURRENT ROW (a RANGE offset is a number or an INTERVAL,
    checked against the ORDER BY key by range_frame). GROUPS frames and EXCLUDE are refused."""
    spec = w.args.get("spec")
    if spec is None:
        return ""
    kind = (spec.args.get("kind") or "").upper()
    if kind not in ("ROWS", "RANGE") or spec.args.get("exclude"):
        raise planner.refuse(f"window frames other than ROWS and RANGE: {spec.sql(dialect='postgres')}", w)

    def bound(value, side) -> tuple[str, str]:
        """(the bound's SQL, its kind in _BOUND_RANK)"""
        side = (side or "").upper()
        text = value.sql() if isinstance(value, exp.Expression) else value
        if value is None or str(text).upper() == "CURRENT ROW":
            return "CURRENT ROW", "CURRENT ROW"
        if str(text).upper() == "UNBOUNDED" and side in ("PRECEDING", "FOLLOWING"):
            return f"UNBOUNDED {side}", f"UNBOUNDED {side}"
        if side in ("PRECEDING", "FOLLOWING"):
            if str(text).isdigit() and (kind == "ROWS" or isinstance(value, exp.Literal)):
                return f"{int(text)} {side}", side
            if kind == "RANGE" and isinstance(value, exp.Literal) and not value.is_string:
                try:
                    if float(value.this) >= 0:
                        return f"{value.this} {side}", side
                except ValueError:
                    pass
            if kind == "RANGE" and isinstance(value, exp.Interval):
                return f"{range_interval(planner, value, w)} {side}", side
        raise planner.refuse(f"the window frame bound {text} {side}".rstrip(), w)

    (start, start_kind), (end, end_kind) = (bound(spec.args.get("start"), spec.args.get("start_side")),
                                            bound(spec.args.get("end"), spec.args.get("end_side")))
    if start_kind == "UNBOUNDED FOLLOWING":
        raise ProgrammingError(f"in {planner.obj!r}: frame start cannot be UNBOUNDED FOLLOWING{planner.where(w)}")
    if end_kind == "UNBOUNDED PRECEDING":
        raise ProgrammingError(f"in {planner.obj!r}: frame end cannot be UNBOUNDED PRECEDING{planner.where(w)}")
    if _BOUND_RANK[start_kind] > _BOUND_RANK[end_kind]:
        which = "current row" if start_kind == "CURRENT ROW" else "following row"
        raise ProgrammingError(f"in {planner.obj!r}: frame starting from {which} cannot have preceding rows"
                               f"{planner.where(w)}")
    return f"{kind} BETWEEN {start} AND {end}"


def range_interval(planner: Context, value: exp.Interval, w: exp.Window) -> str:
    """An INTERVAL frame offset as both engines read it: a whole number of seconds or microseconds
    (months have no fixed length, so they are refused, as a negative offset is)."""
    try:
        iv = planner.engine.sql(f"SELECT {value.sql(dialect='duckdb')} AS i").column(0)[0].as_py()
    except Exception:
        raise planner.refuse(f"the interval {value.sql(dialect='postgres')}", w) from None
    micros = iv.days * 86_400_000_000 + iv.nanoseconds // 1000
    if iv.months:
        raise planner.refuse(f"a RANGE frame offset in months or years ({value.sql(dialect='postgres')})", w)
    if micros < 0:
        raise ProgrammingError(f"in {planner.obj!r}: invalid preceding or following size in window function"
                               f"{planner.where(w)}")
    return f"INTERVAL '{micros // 1_000_000}' SECOND" if micros % 1_000_000 == 0 else \
        f"INTERVAL '{micros}' MICROSECOND"


def range_frame(planner: Context, w: exp.Window, frame: str, order_types: list[str]) -> str:
    """A RANGE frame checked against the window's ORDER BY: without ORDER BY every row is a peer of
    every other, so the frame is the whole partition (SQL's default); an offset needs exactly one
    ORDER BY key, numeric for a number, a timestamp for an INTERVAL."""
    offsets = [b for b in frame[len("RANGE BETWEEN "):].split(" AND ")
               if b.endswith(("PRECEDING", "FOLLOWING")) and not b.startswith("UNBOUNDED")]
    if not order_types:
        if offsets:
            raise ProgrammingError(f"in {planner.obj!r}: RANGE with offset PRECEDING/FOLLOWING requires exactly one "
                                   f"ORDER BY column{planner.where(w)}")
        return ""
    if not offsets:
        return frame
    if len(order_types) != 1:
        raise ProgrammingError(f"in {planner.obj!r}: RANGE with offset PRECEDING/FOLLOWING requires exactly one "
                               f"ORDER BY column{planner.where(w)}")
    (t,) = order_types
    interval = any(b.startswith("INTERVAL") for b in offsets)
    numeric = t in RANGE_NUMERIC_TYPES or t.startswith("numeric")
    if (interval and t not in RANGE_TIME_TYPES) or (not interval and not numeric):
        raise planner.refuse(f"a RANGE frame offset of {'an INTERVAL' if interval else 'a number'} over an ORDER "
                             f"BY key of type {t}", w)
    return frame
