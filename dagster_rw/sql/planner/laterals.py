"""LATERAL subqueries in FROM, decorrelated into joins as correlated subqueries of WHERE are.

`FROM t, LATERAL (SELECT w FROM u WHERE u.k = t.k) x` is `FROM t, (SELECT w, u.k AS _rw_lk0 FROM
u) x WHERE x._rw_lk0 = t.k`: the subquery's correlated expressions become its columns, its
correlations the join's conditions (comparisons as well as equalities, when it does not
aggregate). With an aggregate and GROUP BY, the aggregate is grouped by the correlated expressions
too. With aggregates and no GROUP BY it yields one row for every outer row, matched or not: a LEFT
JOIN with the grouped aggregate, a COUNT read as 0 where no row matched. The rest is refused by
name.
"""
from __future__ import annotations

from sqlglot import exp

from ..syntax import and_terms, derived, find_aggs, output_name

LATERAL_KEY = "_rw_lk"  # the names of a LATERAL subquery's correlated expressions, as its columns


class Laterals:
    """Planner methods that turn LATERAL subqueries of FROM into joins."""

    def lateral_joins(self, q: exp.Select, conjuncts: list) -> tuple[exp.Select, list, list]:
        """The query with each LATERAL subquery of its FROM as a derived table, the conjuncts with
        the inner joins' conditions added, and the LEFT JOINs (of LEFT JOIN LATERAL, and of
        aggregates without GROUP BY), which plan_from applies after every FROM item."""
        first = q.args["from_"].this
        if isinstance(first, exp.Lateral):
            raise self.refuse("LATERAL as the first FROM item (nothing before it to correlate with)", first)
        joins = q.args.get("joins") or []
        if not any(isinstance(j.this, exp.Lateral) for j in joins):
            return q, conjuncts, []
        q, conjuncts, late, kept, counts = q.copy(), list(conjuncts), [], [], {}
        for j in q.args["joins"]:
            if not isinstance(j.this, exp.Lateral):
                kept.append(j)
                continue
            item, on, left, names, zero = self.lateral_item(j)
            if left:
                late.append(exp.Join(this=item, side="LEFT", on=exp.and_(*on)))
            else:
                kept.append(exp.Join(this=item))
                conjuncts.extend(on)
            self.expand_lateral_star(q, item.alias, names)
            if zero:
                counts[item.alias] = set(zero)
        q.set("joins", kept)
        if counts:
            q, conjuncts = _counts_as_zero(self, q, conjuncts, counts)
        return q, conjuncts, late

    def expand_lateral_star(self, q: exp.Select, alias: str, names: list[str]) -> None:
        """`x.*` of a LATERAL subquery x as its columns (not its correlated expressions); a bare
        `*` beside one is refused."""
        items = []
        for item in q.expressions:
            if isinstance(item, exp.Star):
                raise self.refuse("SELECT * over a LATERAL subquery (name the columns, or use alias.*)", item)
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star) and item.table == alias:
                if any(item.this.args.get(k) is not None for k in item.this.arg_types):
                    raise self.refuse(f"{alias}.* EXCEPT (...) over a LATERAL subquery (name the columns)", item)
                items.extend(exp.column(n, alias) for n in names)
            else:
                items.append(item)
        q.set("expressions", items)

    def lateral_item(self, j: exp.Join):
        """A LATERAL join as (derived table, join conditions, whether a LEFT JOIN, the subquery's
        column names, the names of its COUNTs that a LEFT JOIN pads with NULL)."""
        lat = j.this
        side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
        if side not in ("", "LEFT") or kind not in ("", "CROSS", "INNER") or j.args.get("using") \
                or j.args.get("method"):
            raise self.refuse(f"{' '.join(x for x in (j.args.get('method'), side, kind) if x)} JOIN LATERAL", j)
        sub = lat.this
        if not (isinstance(sub, exp.Subquery) and isinstance(sub.this, exp.Select)):
            raise self.refuse("LATERAL over anything but a SELECT (a function call, a set operation)", lat)
        alias_arg = lat.args.get("alias")
        if alias_arg is not None and alias_arg.columns:
            raise self.refuse("a column list on a LATERAL subquery's alias (name the columns inside)", lat)
        alias = lat.alias or f"_rw_lateral{self._subquery_counter}"
        self._subquery_counter += 1
        select = sub.this
        on = j.args.get("on")
        extra_on = [] if on is None or on == exp.true() else list(and_terms(on))
        left = side == "LEFT"
        if left and extra_on:
            raise self.refuse("LEFT JOIN LATERAL with a condition other than ON TRUE", on)
        if any(isinstance(x, exp.Star) or (isinstance(x, exp.Column) and isinstance(x.this, exp.Star))
               for x in select.expressions):
            raise self.refuse("SELECT * in a LATERAL subquery (name its columns)", select)
        names = [output_name(x) for x in select.expressions]
        if not self.free_columns(select):  # not correlated: an ordinary derived table
            if left:
                raise self.refuse("LEFT JOIN LATERAL over a subquery that does not refer to the outer query", lat)
            return derived(select.copy(), alias), extra_on, False, names, []
        for key in ("limit", "offset", "order", "distinct", "with"):
            if select.args.get(key):
                raise self.refuse(f"{key.upper()} in a correlated LATERAL subquery", select.args[key])
        if any(select.find_all(exp.Window)):
            raise self.refuse("a window function in a correlated LATERAL subquery", select)
        bare = select.copy()
        bare.set("where", None)
        if self.free_columns(bare):
            raise self.refuse("a LATERAL subquery that refers to the outer query outside its WHERE (in its select "
                              "list, a JOIN's ON, GROUP BY or HAVING)", select)
        grouped = bool(select.args.get("group") or select.args.get("having"))
        aggregates = grouped or any(find_aggs(x) for x in select.expressions)
        residuals: list | None = None if aggregates else []
        own, keys = self.split_correlation(select, lat, residuals)
        if not keys and not residuals:
            raise self.refuse("a LATERAL subquery correlated other than by conditions of its WHERE", select)
        zero: list[str] = []
        if aggregates and not grouped:
            for x, name in zip(select.expressions, names):
                value = x.unalias()
                if not (type(value) in {type(a) for a in find_aggs(value)} and len(find_aggs(value)) == 1):
                    raise self.refuse("a select item of a correlated LATERAL subquery without GROUP BY that is not "
                                      "one aggregate call (its value where no row matches)", x)
                if isinstance(value, exp.Count):
                    zero.append(name)
            left = True  # one row for every outer row, matched or not
        columns = [x.copy() for x in select.expressions]
        on_terms = list(extra_on)
        for i, (inner, outer) in enumerate(keys):
            columns.append(exp.alias_(inner.copy(), f"{LATERAL_KEY}{i}"))
            on_terms.append(exp.EQ(this=outer.copy(), expression=exp.column(f"{LATERAL_KEY}{i}", alias)))
        for c, theirs in residuals or []:
            on_terms.append(_exposed(c, theirs, alias, columns))
        right = exp.select(*columns)
        right.set("from_", select.args["from_"].copy())
        if select.args.get("joins"):
            right.set("joins", [x.copy() for x in select.args["joins"]])
        if own:
            right = right.where(exp.and_(*[c.copy() for c in own]))
        if aggregates:
            group = [g.copy() for g in (select.args["group"].expressions if select.args.get("group") else [])]
            right = right.group_by(*group, *[inner.copy() for inner, _ in keys])
            if select.args.get("having"):
                right.set("having", select.args["having"].copy())
        return derived(right, alias), on_terms, left, names, zero


def _exposed(c: exp.Expression, theirs: list, alias: str, columns: list) -> exp.Expression:
    """A comparison between the subquery's columns and the outer query's, with each of the
    subquery's columns made a column of its own (appended to `columns`) and read from `alias`."""
    outer_ids = {id(col) for col in theirs}
    copy = c.copy()
    for original, col in zip(list(c.find_all(exp.Column)), list(copy.find_all(exp.Column))):
        if id(original) in outer_ids:
            continue
        name = f"{LATERAL_KEY}{len(columns)}"
        columns.append(exp.alias_(original.copy(), name))
        col.replace(exp.column(name, alias))
    return copy


def _counts_as_zero(planner, q: exp.Select, conjuncts: list, counts: dict) -> tuple[exp.Select, list]:
    """References to the COUNTs of LATERAL aggregates (alias -> names) read as 0 where the LEFT
    JOIN found no row: coalesce(x.n, 0). An unqualified name is the LATERAL subquery's when no
    other FROM item brings it."""
    owners: dict[str, list[str]] = {}
    for alias, names in counts.items():
        for n in names:
            owners.setdefault(n, []).append(alias)

    def zero(n: exp.Expression) -> exp.Expression:
        if not isinstance(n, exp.Column) or isinstance(n.this, exp.Star):
            return n
        if n.table in counts and n.name in counts[n.table]:
            alias = n.table
        elif not n.table and len(owners.get(n.name, [])) == 1:
            alias = owners[n.name][0]
        else:
            return n
        return exp.func("coalesce", exp.column(n.name, alias), exp.Literal.number(0))

    def rewrite(e: exp.Expression) -> exp.Expression:
        # not inside the query's own subqueries: their names are theirs
        if isinstance(e, exp.Query):
            return e
        return e.transform(lambda n: zero(n) if not any(isinstance(a, exp.Query) for a in _up_to(n, e)) else n)

    q = q.copy()
    q.set("expressions", [_keep_name(x, rewrite) for x in q.expressions])
    for key in ("group", "having", "order"):
        if q.args.get(key):
            q.set(key, rewrite(q.args[key]))
    return q, [rewrite(c) for c in conjuncts]


def _keep_name(item: exp.Expression, rewrite) -> exp.Expression:
    """A select item rewritten, keeping the name it had (a bare count column stays `n`)."""
    new = rewrite(item)
    if new.sql() != item.sql() and not isinstance(item, exp.Alias):
        return exp.alias_(new, output_name(item))
    return new


def _up_to(n: exp.Expression, top: exp.Expression):
    """The ancestors of `n` strictly below `top`."""
    a = n.parent
    while a is not None and a is not top:
        yield a
        a = a.parent
