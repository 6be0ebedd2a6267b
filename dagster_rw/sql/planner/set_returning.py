"""Set-returning functions in a select list (ProjectSet): unnest(array) and generate_series over
integers or timestamps."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError
from ..plan import Col, Node, ProjectSet, cname
from .scope import Scope


# the set-returning functions a select list may hold (sqlglot parses PostgreSQL's unnest as Explode)
SET_RETURNING = (exp.Unnest, exp.Explode, exp.GenerateSeries)


class SetReturning:
    """Planner methods for a select list with a set-returning function."""

    def plan_project_set(self, q: exp.Select, node: Node, scope: Scope, select_items) -> tuple[Node, list[str]]:
        """A select list with one set-returning function as a whole item: `unnest(array)` or
        `generate_series(start, stop[, step])` over integers or timestamps with a constant step
        (ProjectSet)."""
        calls = [(i, e) for i, (e, _) in enumerate(select_items) if any(e.find_all(*SET_RETURNING))]
        for _, e in calls:
            inner = next(e.find_all(*SET_RETURNING))
            if inner is not e or any(next(a.find_all(*SET_RETURNING), None) for a in e.iter_expressions()):
                raise self.refuse(f"the set-returning function {inner.sql(dialect='postgres')} inside an expression "
                                  "(it can be a whole select item)", inner)
        if len(calls) > 1:
            raise self.refuse("more than one set-returning function in a select list", calls[1][1])
        pos, call = calls[0]
        if self.order_exprs_over_input(q, scope, select_items):
            raise self.refuse("ORDER BY an expression that is not in the select list, beside a set-returning "
                              "function", q.args["order"])
        exprs = [self.bind(e, scope) if i != pos else None for i, (e, _) in enumerate(select_items)]
        names = [n for _, n in select_items]
        step = 1
        if isinstance(call, exp.GenerateSeries):
            kind = "series"
            exprs[pos] = self.bind(call.args["start"], scope)
            extra = [self.bind(call.args["end"], scope)]
        else:
            kind = "unnest"
            args = [call.this] + list(call.expressions) if isinstance(call, exp.Explode) else list(call.expressions)
            if len(args) != 1:
                raise self.refuse("unnest with more than one argument", call)
            exprs[pos] = self.bind(args[0], scope)
            extra = []
        # the input's stream key, from the select list where it passes a key column through, else carried
        key_at, carried = [], []
        for k in node.stream_key:
            at = next((i for i, e in enumerate(exprs) if i != pos and isinstance(e, exp.Column)
                       and e.name == cname(k) and not e.table), None)
            if at is None:
                at = len(exprs) + len(carried)
                carried.append(k)
            key_at.append(at)
        keys = [exp.column(cname(k)) for k in carried]
        hidden = [False] * len(exprs) + [True] * (len(extra) + len(keys))
        inner_names = names + [f"_rw_stop{i}" for i in range(len(extra))] + [node.columns[k].name for k in carried]
        child = self.map(node, exprs + extra + keys, None, inner_names, hidden)
        types = [c.type for c in child.columns]
        if kind == "unnest":
            if not types[pos].endswith("[]"):
                raise self.refuse(f"unnest of a {types[pos]} (not an array)", call)
            value_type = types[pos][:-2]
        else:
            value_type, step = self.series_type_and_step(call, types[pos], types[len(exprs)])
        n, width = len(exprs), len(exprs) + len(extra)
        columns = [Col(c.name, value_type if i == pos else c.type) for i, c in enumerate(child.columns[:n])]
        columns += [Col(c.name, c.type, True) for c in child.columns[width:]] + [Col("_rw_ordinal", "bigint", True)]
        return ProjectSet(columns=columns, stream_key=key_at + [len(columns) - 1], child=child, kind=kind,
                          position=pos, width=n, step=step), names

    def series_type_and_step(self, call: exp.GenerateSeries, start: str, stop: str) -> tuple[str, int]:
        """The type of generate_series' values and its step: over integers an integer constant
        (1 by default); over timestamps (both of one type) a constant INTERVAL without months, as
        microseconds (a fixed length)."""
        raw = call.args.get("step")
        ints = ("smallint", "integer", "bigint")
        if start in ints and stop in ints:
            step = 1
            if raw is not None:
                negative = isinstance(raw, exp.Neg)
                literal = raw.this if negative else raw
                if not (isinstance(literal, exp.Literal) and not literal.is_string and literal.name.isdigit()):
                    raise self.refuse("a step of generate_series that is not an integer constant", raw)
                step = -int(literal.name) if negative else int(literal.name)
            value_type = "bigint" if "bigint" in (start, stop) else "integer"
        elif start == stop and start in ("timestamp", "timestamptz"):
            if raw is None:
                raise ProgrammingError(f"generate_series over {start} needs an INTERVAL step (in {self.obj!r})"
                                       f"{self.where(call)}")
            step = self.interval_micros(raw, "generate_series", what="step")
            value_type = start
        else:
            raise self.refuse(f"generate_series over {start} and {stop} (integers, or timestamps of one type "
                              "with an INTERVAL step)", call)
        if step == 0:
            raise ProgrammingError(f"step size cannot equal zero (generate_series in {self.obj!r}){self.where(call)}")
        return value_type, step

    def plan_series_relation(self, item: exp.Table) -> tuple[Node, Scope]:
        """generate_series(start, stop[, step]) in FROM, its arguments constants: a constant relation,
        planned as `(SELECT generate_series(...) AS x) g` (the series over the one row of a SELECT
        without FROM, emitted when the view is created). Its column is named by the column alias,
        else the table alias, else generate_series, as in PostgreSQL."""
        call = item.this
        if next(call.find_all(exp.Column, exp.Select), None) is not None:
            raise self.refuse("generate_series() in FROM over columns or subqueries (a lateral series: "
                              "generate_series in the select list can read a row's columns)", item)
        if item.args.get("ordinality"):
            raise self.refuse("WITH ORDINALITY", item)
        alias = item.args.get("alias")
        columns = list(alias.columns) if alias is not None else []
        if len(columns) > 1:
            raise ProgrammingError(f"generate_series() in FROM returns one column, {len(columns)} aliases given "
                                   f"(in {self.obj!r}){self.where(item)}")
        table = alias.name if alias is not None and alias.name else "generate_series"
        series = exp.GenerateSeries(**{k: v.copy() for k, v in call.args.items() if v is not None})
        name = columns[0] if columns else exp.to_identifier(table)
        sub = exp.Subquery(this=exp.select(exp.alias_(series, name.copy())),
                           alias=exp.TableAlias(this=exp.to_identifier(table)))
        return self.plan_item(sub)
