"""Window functions in a select list (OverWindow): row_number, rank, dense_rank and the window
aggregates with ROWS frames."""
from __future__ import annotations

from sqlglot import exp

from ..plan import Agg, Col, Node, OrderKey, OverWindow, cname
from ..rewrites.context import Context
from ..syntax import AGG_FUNCS, WINDOW_AGGS, WINDOW_FUNCS, transform_top_down, without_windows
from .scope import Scope


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
        elif type(fn) not in WINDOW_FUNCS:
            raise self.refuse("window functions other than row_number(), rank(), dense_rank(), count(), sum(), "
                              f"avg(), min() and max(): {w.sql(dialect='postgres')}", w)
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
            arg = None
            if type(w.this) in WINDOW_AGGS and not isinstance(w.this.this, exp.Star):
                arg = add(self.bind(w.this.this, scope), w.this.this.sql(dialect="postgres"))
            func = WINDOW_FUNCS.get(type(w.this)) or WINDOW_AGGS[type(w.this)]
            specs.append((func, part, order, arg, window_frame(self, w)))
        extra_pos = [add(e, f"_rw_o{i}") for i, e in enumerate(self.order_exprs_over_input(q, scope, select_items))]
        cur: Node = self.project(node, pre_exprs, pre_names)
        rank_pos: dict[str, int] = {}  # identical window calls share one rank column
        for w, (func, part, order, arg, frame) in zip(windows, specs):
            if w.sql() in rank_pos:
                continue
            rank_pos[w.sql()] = len(cur.columns)
            out_type = "bigint" if arg is None else self.agg_type(Agg(func=func, arg=arg), cur)
            cur = OverWindow(columns=list(cur.columns) + [Col(func, out_type, True)], stream_key=list(cur.stream_key),
                             child=cur, func=func, partition=part, order=order, arg=arg, frame=frame)

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


def window_frame(planner: Context, w: exp.Window) -> str:
    """A window aggregate's frame as SQL: "" for SQL's default (the partition, or with ORDER BY the
    rows up to the current row and its peers), else `ROWS BETWEEN <bound> AND <bound>` with
    UNBOUNDED, n PRECEDING / FOLLOWING or CURRENT ROW. RANGE and GROUPS frames are refused."""
    spec = w.args.get("spec")
    if spec is None:
        return ""
    if (spec.args.get("kind") or "").upper() != "ROWS" or spec.args.get("exclude"):
        raise planner.refuse(f"window frames other than ROWS: {spec.sql(dialect='postgres')}", w)

    def bound(value, side) -> str:
        value = value.sql() if isinstance(value, exp.Expression) else value
        if value is None or str(value).upper() == "CURRENT ROW":
            return "CURRENT ROW"
        side = (side or "").upper()
        if str(value).upper() == "UNBOUNDED" and side in ("PRECEDING", "FOLLOWING"):
            return f"UNBOUNDED {side}"
        if str(value).isdigit() and side in ("PRECEDING", "FOLLOWING"):
            return f"{int(value)} {side}"
        raise planner.refuse(f"the window frame bound {value} {side}".rstrip(), w)

    return (f"ROWS BETWEEN {bound(spec.args.get('start'), spec.args.get('start_side'))} "
            f"AND {bound(spec.args.get('end'), spec.args.get('end_side'))}")
