"""ORDER BY with LIMIT / OFFSET / FETCH FIRST (TopN); ORDER BY alone does not shape a view."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError
from ..plan import Node, OrderKey, TopN
from ..rewrites.context import Context


class OrderLimit:
    """Planner methods for ORDER BY with LIMIT, OFFSET or FETCH FIRST."""

    def order_exprs_over_input(self, q, scope, select_items) -> list[exp.Expression]:
        if not q.args.get("order") or q.args.get("limit") is None:
            return []
        out = []
        for o in q.args["order"].expressions:
            if order_target(o.this, select_items) is None:
                out.append(self.bind(o.this, scope))
        return out

    def order_limit(self, node: Node, names, q, select_items) -> tuple[Node, list[str]]:
        limit = q.args.get("limit")
        offset = q.args.get("offset")
        if limit is None:
            if offset is not None:
                raise self.refuse("OFFSET without LIMIT", offset)
            return node, names  # ORDER BY alone does not shape a materialized view
        with_ties = False
        if isinstance(limit, exp.Fetch):  # FETCH FIRST n ROWS ONLY | WITH TIES
            options = limit.args.get("limit_options")
            if options is not None and options.args.get("percent"):
                raise self.refuse("FETCH FIRST n PERCENT", limit)
            with_ties = bool(options is not None and options.args.get("with_ties"))
            count = limit.args.get("count")
            lim = 1 if count is None else _int_literal(self, count, "FETCH FIRST count")
            if with_ties and not q.args.get("order"):
                raise ProgrammingError(f"WITH TIES cannot be specified without ORDER BY clause{self.where(limit)}")
            if with_ties and offset is not None:
                raise self.refuse("OFFSET with FETCH FIRST ... WITH TIES", offset)
        else:
            lim = _int_literal(self, limit.expression if isinstance(limit, exp.Limit) else limit, "LIMIT")
        off = _int_literal(self, offset.expression, "OFFSET") if offset is not None else 0
        order = []
        extra_pos = [i for i, c in enumerate(node.columns) if c.hidden and c.name.startswith("_rw_o")]
        if q.args.get("order"):
            for o in q.args["order"].expressions:
                target = order_target(o.this, select_items) if select_items is not None else None
                if target is None and select_items is None:
                    target = _union_order_target(o.this, names)
                if target is None:
                    if not extra_pos:
                        raise self.refuse("ORDER BY an expression that is not in the select list", o)
                    target = extra_pos.pop(0)
                desc = bool(o.args.get("desc"))
                nulls_first = o.args.get("nulls_first")
                if nulls_first is None:
                    nulls_first = desc  # PostgreSQL: NULLs sort as the largest value
                order.append(OrderKey(target, desc, bool(nulls_first)))
        top = TopN(columns=list(node.columns), stream_key=list(node.stream_key), child=node, order=order,
                   limit=lim, offset=off, with_ties=with_ties)
        return top, names


def order_target(o: exp.Expression, select_items) -> int | None:
    if select_items is None:
        return None
    if isinstance(o, exp.Literal) and not o.is_string:
        return int(o.name) - 1
    if isinstance(o, exp.Column) and not o.table:
        for i, (_, n) in enumerate(select_items):
            if n == o.name:
                return i
    for i, (e, _) in enumerate(select_items):
        if e == o:
            return i
    return None


def _union_order_target(o: exp.Expression, names) -> int | None:
    if isinstance(o, exp.Literal) and not o.is_string:
        return int(o.name) - 1
    if isinstance(o, exp.Column) and o.name in names:
        return names.index(o.name)
    return None


def _int_literal(planner: Context, e, what: str) -> int:
    if isinstance(e, exp.Literal) and not e.is_string:
        return int(e.name)
    raise planner.refuse(f"a non-constant {what}", e)
