"""Subqueries in WHERE: scalar subqueries (a dynamic filter, or a join with their aggregate grouped
by the correlated values), EXISTS / NOT EXISTS / IN as joins with the subquery's distinct
correlated values, and correlations other than equalities over the domain of the outer values."""
from __future__ import annotations

from sqlglot import exp

from ...errors import ProgrammingError
from ..plan import Aggregate, Map, Node, TopN, Values, WindowCloseAggregate
from ..syntax import (
    SUBQUERY_ALIAS,
    and_terms,
    columns_only,
    derived,
    find_aggs,
    nested_queries,
    own_columns,
)
from .scope import Scope, resolves


class Subqueries:
    """Planner methods that turn subqueries of WHERE into FROM items and conditions."""

    def scalar_subqueries(self, q: exp.Select, conjuncts: list) -> tuple[exp.Select, list, list]:
        """`x > (SELECT max(y) FROM u)` in WHERE (also >=, <, <=, =): the subquery becomes one
        more FROM item, compared by column, so a dynamic filter (or, for =, a join) maintains it.
        The subquery must return one column and at most one row whatever its input. A subquery
        correlated by equalities with the outer query (`(SELECT avg(y) FROM u WHERE u.k = t.k)`)
        becomes a join with its aggregate grouped by the correlated expressions (correlated_scalar);
        returned third: the LEFT JOINs of those that count, which plan_from applies last."""
        found = False
        out, extra, late = [], [], []
        for c in conjuncts:
            if isinstance(c, (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ)):
                for side in ("this", "expression"):
                    sub = c.args.get(side)
                    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
                        continue
                    if len(sub.this.expressions) != 1 or isinstance(sub.this.expressions[0], exp.Star):
                        raise ProgrammingError(f"subquery must return only one column{self.where(sub)}")
                    correlated = self.correlated_scalar(sub.this, sub)
                    if correlated is not None:  # one value per outer row: a join with the grouped aggregate
                        right, outer_exprs, counts = correlated
                        # no matching row counts 0: a left join, NULL read as 0; other aggregates are
                        # NULL there, which no comparison passes: an inner join
                        q, alias = self.subquery_join(q, right, outer_exprs, extra, late, left=counts)
                        value = exp.column("_rw_v", alias)
                        if counts:
                            value = exp.func("coalesce", value, exp.Literal.number(0))
                        c = c.copy()
                        c.set(side, value)
                        continue
                    if not at_most_one_row(self.probe().plan_query(sub.this)[0]):
                        raise self.refuse("a scalar subquery that may return more than one row (one that "
                                          "aggregates without GROUP BY, or has LIMIT 1, can be maintained)", sub)
                    if not found:
                        q, found = q.copy(), True
                    alias = f"_rw_scalar{len(q.args.get('joins') or [])}"
                    q.append("joins", exp.Join(this=derived(sub.this.copy(), alias, ["value"])))
                    c = c.copy()
                    c.set(side, exp.column("value", alias))
            out.append(c)
        return q, out + extra, late

    def subquery_predicates(self, q: exp.Select, conjuncts: list) -> tuple[exp.Select, list, list]:
        """`EXISTS (subquery)`, `NOT EXISTS (subquery)` and `x IN (subquery)` as conjuncts of WHERE,
        as joins with the subquery's distinct keys: a semi-join is an inner join with the distinct
        values of the subquery's correlated expressions (each outer row matches at most one), an
        anti-join a left join with them keeping the rows that found none. The subquery may be
        correlated by equalities between its own expressions and the outer query's; other
        correlations, NOT IN (whose NULLs make it differ from NOT EXISTS) and subqueries elsewhere
        in an expression are refused. Returns the query with the semi-joins as FROM items, the
        conjuncts (the subqueries replaced by key equalities, or for an anti-join by a test that no
        row matched) and the anti-joins' LEFT JOINs, which plan_from applies last."""
        out, late = [], []
        for c in conjuncts:
            negated = isinstance(c, exp.Not)
            inner = c.this if negated else c
            if isinstance(inner, exp.In) and isinstance(inner.args.get("query"), exp.Subquery):
                if negated:
                    raise self.refuse("NOT IN (subquery) (a NULL among its values makes it differ from NOT "
                                      "EXISTS; write NOT EXISTS)", c)
                sub, pairs = self.in_subquery(inner)
            elif isinstance(inner, exp.Exists) and isinstance(inner.this, exp.Select):
                sub, pairs = inner.this, []
            else:
                out.append(c)
                continue
            right, outer_exprs = self.correlated_keys(sub, pairs, anti=negated, node=c, outer_query=q)
            q, alias = self.subquery_join(q, right, outer_exprs, out, late, left=negated)
            if negated:
                out.append(exp.column("_rw_m", alias).is_(exp.null()))
        return q, out, late

    def subquery_join(self, q: exp.Select, right: exp.Select, outer_exprs: list, conjuncts: list, late: list,
                      left: bool) -> tuple[exp.Select, str]:
        """Join `right` (a subquery whose columns _rw_k0, _rw_k1, ... are keyed by `outer_exprs`) to
        the query under a fresh alias: as one more FROM item with the key equalities added to
        `conjuncts` (an inner join, which plan_from plans with the other FROM items), or with
        `left` as a LEFT JOIN on them put in `late`, which plan_from applies after every FROM item.
        Returns the query (a copy) and the alias."""
        alias = f"{SUBQUERY_ALIAS}{self._subquery_counter}"
        self._subquery_counter += 1
        item = derived(right, alias)
        on = [exp.EQ(this=o.copy(), expression=exp.column(f"_rw_k{i}", alias)) for i, o in enumerate(outer_exprs)]
        q = q.copy()
        if left:
            late.append(exp.Join(this=item, side="LEFT", on=exp.and_(*on)))
        else:
            q.append("joins", exp.Join(this=item))
            conjuncts.extend(on)
        return q, alias

    def in_subquery(self, e: exp.In) -> tuple[exp.Select, list]:
        """`x IN (subquery)` as an EXISTS subquery and its extra correlation (its one column = x)."""
        sub = e.args["query"].this
        if isinstance(sub, exp.Select) and (len(sub.expressions) != 1 or isinstance(sub.expressions[0], exp.Star)):
            raise ProgrammingError(f"subquery has too many columns{self.where(e)}")
        simple = isinstance(sub, exp.Select) and not any(
            sub.args.get(k) for k in ("group", "having", "limit", "offset", "distinct", "with")) and not any(
            find_aggs(x) for x in sub.expressions) and not self.window_calls([(x, None) for x in sub.expressions])
        if not simple:  # a UNION, a grouped or limited SELECT: its rows as they are, matched by value
            sub = exp.select("_rw_v").from_(derived(sub.copy(), "_rw_in", ["_rw_v"]))
        value = sub.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        return sub, [(value, e.this)]

    def from_entries(self, sub: exp.Select) -> tuple:
        """A probe planner and the names the FROM items of `sub` bring (each item on its own: how
        they join is the subquery's affair)."""
        probe = self.probe()
        entries = []
        for item in [sub.args["from_"].this] + [j.this for j in sub.args.get("joins") or []]:
            entries.extend(probe.plan_item(item)[1].entries)
        return probe, entries

    def split_correlation(self, sub: exp.Select, node, residuals: list | None = None) -> tuple[list, list]:
        """A subquery's WHERE conjuncts split into its own conditions (their columns resolve in its
        FROM, the nearer scope, as SQL resolves them) and its correlations: (inner, outer) pairs of
        expressions it equates with the outer query's. With `residuals` (a list), other comparisons
        (=, <>, <, <=, >, >=) between its own columns and the outer query's are put there, each
        with the outer columns it reads: (condition, [outer columns]). Other references to the
        outer query are refused."""
        if not sub.args.get("from_") or not sub.args.get("where"):
            return [], []
        probe, entries = self.from_entries(sub)
        inner_scope = Scope(entries)
        using = any(j.args.get("using") for j in sub.args.get("joins") or [])  # (USING merges its columns)

        def local(e: exp.Expression) -> bool:
            # its own columns, and the references of the subqueries nested in it to enclosing
            # queries, all resolve in the subquery's FROM (a nested subquery correlated with this
            # one is planned with it)
            nested = nested_queries(e)
            if not nested:
                cols = list(e.find_all(exp.Column))
                return not cols or resolves(probe, e, inner_scope)
            own_cols = own_columns(e)
            return (not own_cols or resolves(probe, columns_only(own_cols), inner_scope)) and all(
                resolves(probe, columns_only(free), inner_scope)
                for free in (self.free_columns(n) for n in nested) if free)

        def outer(e: exp.Expression) -> bool:  # none of its columns is a name of the subquery's FROM
            cols = list(e.find_all(exp.Column))
            return bool(cols) and not any(
                entry.name == col.name and (not col.table or entry.alias == col.table)
                for col in cols for entry in entries)

        own, keys = [], []
        for c in and_terms(sub.args["where"].this):
            for col in c.find_all(exp.Column):  # as SQL does: a name two FROM items of the subquery bring
                if not col.table and not using and sum(e.name == col.name for e in entries) > 1:
                    raise ProgrammingError(f'column reference "{col.name}" is ambiguous{self.where(col)}')
            if local(c):
                own.append(c)
            elif isinstance(c, exp.EQ) and local(c.this) and outer(c.expression):
                keys.append((c.this, c.expression))
            elif isinstance(c, exp.EQ) and local(c.expression) and outer(c.this):
                keys.append((c.expression, c.this))
            elif residuals is not None and isinstance(c, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)) \
                    and not nested_queries(c) and not find_aggs(c):
                # a comparison reading both sides: NULL in an outer column makes it unknown, so it
                # matches nothing (what correlated_keys' join on the outer values relies on)
                theirs = [col for col in c.find_all(exp.Column) if not resolves(probe, col, inner_scope)]
                residuals.append((c, theirs))
            else:
                raise self.refuse("a condition of a subquery that refers to the outer query other than as "
                                  "an equality of its own expression with the outer query's, or (in EXISTS "
                                  "and IN) a comparison of them", c)
        for inner, _ in keys:
            if find_aggs(inner):
                raise self.refuse("an aggregate in a subquery's correlation", inner)
        return own, keys

    def free_columns(self, sub: exp.Expression) -> list[exp.Column]:
        """The columns of a subquery (and of those nested in it) that its own FROM does not bring:
        its references to the queries around it."""
        if isinstance(sub, exp.Subquery):
            return self.free_columns(sub.this)
        if not isinstance(sub, exp.Select):  # a UNION: the free columns of each side
            return [c for n in nested_queries(sub) for c in self.free_columns(n)]
        own_cols = own_columns(sub)
        nested = [c for n in nested_queries(sub) for c in self.free_columns(n)]
        if not sub.args.get("from_"):
            return own_cols + nested
        probe, entries = self.from_entries(sub)
        scope = Scope(entries)
        aliases = {e.alias for e in entries if getattr(e, "alias", None)}
        free = []
        for col in own_cols + nested:
            if col.table and col.table not in aliases:
                free.append(col)
                continue
            try:
                scope.resolve(col, probe)
            except ProgrammingError:
                free.append(col)
        return free

    def correlated_keys(self, sub: exp.Select, pairs: list, anti: bool, node,
                        outer_query: exp.Select) -> tuple[exp.Select, list]:
        """The subquery of an EXISTS as the distinct values of the expressions it equates with the
        outer query's (plus `pairs`: (inner, outer) already known), filtered by its own conditions;
        and those outer expressions. Other comparisons with the outer query's columns are planned
        over the domain of the outer values (correlated_over_domain)."""
        for key in ("group", "having", "limit", "offset", "with"):
            if sub.args.get(key):
                raise self.refuse(f"{key.upper()} in an EXISTS subquery", sub.args[key])
        if not sub.args.get("from_"):
            raise self.refuse("an EXISTS subquery without FROM", node)
        residuals: list = []
        own, keys = self.split_correlation(sub, node, residuals)
        keys = list(pairs) + keys
        if not keys and residuals:
            raise self.refuse("a subquery correlated by comparisons alone, without an equality with the outer "
                              "query (its join would be a cross join)", node)
        if not keys:
            raise self.refuse("an uncorrelated EXISTS (no equality with the outer query)", node)
        marker = [exp.alias_(exp.Literal.number(1), "_rw_m")] if anti else []
        if residuals:
            return self.correlated_over_domain(sub, keys, residuals, own, marker, outer_query, node)
        return _keyed(sub, keys, marker, own).distinct(), [o for _, o in keys]

    def correlated_over_domain(self, sub: exp.Select, keys: list, residuals: list, own: list, marker: list,
                               q: exp.Select, node) -> tuple[exp.Select, list]:
        """An EXISTS subquery correlated by comparisons other than equalities (`l2.k = l1.k AND
        l2.s <> l1.s`): the outer values it reads, taken from the one outer FROM item they all come
        from (every distinct value that item holds: its domain), each joined with the subquery's
        rows by the correlation, and the distinct outer values that found a row. The outer query
        then joins those values as it joins equality-correlated keys. The domain join is an
        equi-join on the equalities, the comparisons its residual condition."""
        outer_exprs: list = []
        for e in [o for _, o in keys] + [col for _, cols in residuals for col in cols]:
            if all(e.sql() != x.sql() for x in outer_exprs):
                outer_exprs.append(e)
        item = self.outer_item(q, [col for e in outer_exprs for col in e.find_all(exp.Column)], node)
        domain_alias = "_rw_dom"
        domain = exp.select(*[exp.alias_(e.copy(), f"_rw_o{i}") for i, e in enumerate(outer_exprs)]).from_(
            item.copy()).distinct()
        by_sql = {e.sql(): exp.column(f"_rw_o{i}", domain_alias) for i, e in enumerate(outer_exprs)}

        def to_domain(e: exp.Expression) -> exp.Expression:
            e = e.copy()
            if e.sql() in by_sql:
                return by_sql[e.sql()].copy()
            return e.transform(lambda n: by_sql[n.sql()].copy() if isinstance(n, exp.Column) and n.sql() in by_sql else n)

        conditions = [c.copy() for c in own]
        conditions += [exp.EQ(this=inner.copy(), expression=to_domain(o)) for inner, o in keys]
        conditions += [to_domain(c) for c, _ in residuals]
        right = exp.select(*[exp.alias_(exp.column(f"_rw_o{i}", domain_alias), f"_rw_k{i}")
                             for i in range(len(outer_exprs))], *marker)
        right.set("from_", sub.args["from_"].copy())
        right.set("joins", [j.copy() for j in sub.args.get("joins") or []] + [
            exp.Join(this=derived(domain, domain_alias))])
        return right.where(exp.and_(*conditions)).distinct(), outer_exprs

    def outer_item(self, q: exp.Select, cols: list, node) -> exp.Expression:
        """The one FROM item of the outer query that brings every column of `cols` (by alias, or by
        name when unqualified); refused when they come from several."""
        items = [q.args["from_"].this] + [j.this for j in q.args.get("joins") or []]
        probe = self.probe()
        names: dict[int, set] = {}  # the column names each item brings, planned once when needed

        def brings(i: int, name: str) -> bool:
            if i not in names:
                names[i] = {e.name for e in probe.plan_item(items[i])[1].entries} \
                    if isinstance(items[i], (exp.Table, exp.Subquery)) else set()
            return name in names[i]

        found = set()
        for col in cols:
            owners = [i for i, item in enumerate(items)
                      if (item.alias_or_name == col.table if col.table else brings(i, col.name))]
            if len(owners) != 1:
                raise self.refuse(f'the column "{col.sql(dialect="postgres")}" of a correlation other than an '
                                  "equality (it must come from one table of the outer query's FROM)", col)
            found.add(owners[0])
        if len(found) != 1:
            raise self.refuse("a subquery correlated other than by equalities with columns of more than one "
                              "table of the outer query", node)
        return items[found.pop()]

    def correlated_scalar(self, sub: exp.Select, node) -> tuple[exp.Select, list, bool] | None:
        """A scalar subquery correlated by equalities with the outer query, whose one column
        aggregates (so it yields one value per outer row): the same aggregate grouped by the
        correlated expressions, the outer expressions to join it on, and whether it is a COUNT
        (which is 0, not NULL, for an outer row no subquery row matches). None when uncorrelated."""
        own, keys = self.split_correlation(sub, node)
        if not keys:
            return None
        for key in ("group", "having", "limit", "offset", "distinct", "with"):
            if sub.args.get(key):
                raise self.refuse(f"{key.upper()} in a correlated scalar subquery", sub.args[key])
        value = sub.expressions[0].unalias()
        if not find_aggs(value):
            raise self.refuse("a correlated scalar subquery without an aggregate (it may yield several rows)", node)
        counts = isinstance(value, exp.Count)
        if not counts and any(isinstance(a, exp.Count) for a in value.find_all(exp.Count)):
            raise self.refuse("a COUNT inside an expression of a correlated scalar subquery", value)
        right = _keyed(sub, keys, [exp.alias_(value.copy(), "_rw_v")], own)
        return right.group_by(*[inner.copy() for inner, _ in keys]), [o for _, o in keys], counts


def at_most_one_row(node: Node) -> bool:
    """Whether `node` holds at most one row whatever its input: a global aggregate (exactly one),
    a top-1, or a filter or projection of one of those."""
    if isinstance(node, Map):
        return at_most_one_row(node.child)
    if isinstance(node, Aggregate) and not isinstance(node, WindowCloseAggregate):
        return node.is_global
    if isinstance(node, TopN):
        return node.limit <= 1 and not node.with_ties
    return isinstance(node, Values)


def _keyed(sub: exp.Select, keys: list, extra: list, own: list) -> exp.Select:
    """A SELECT over a subquery's FROM and its own conditions of its correlated expressions (the
    inner side of each (inner, outer) pair, as _rw_k0, _rw_k1, ...) and `extra` columns."""
    right = exp.select(*[exp.alias_(inner.copy(), f"_rw_k{i}") for i, (inner, _) in enumerate(keys)], *extra)
    right.set("from_", sub.args["from_"].copy())
    if sub.args.get("joins"):
        right.set("joins", [j.copy() for j in sub.args["joins"]])
    return right.where(exp.and_(*[c.copy() for c in own])) if own else right
