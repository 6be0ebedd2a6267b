"""FROM: its items (tables, views, CTEs, derived tables, TUMBLE/HOP, generate_series) and how
comma-separated items are joined: by the equalities between them, or as a dynamic filter with a
one-row side."""
from __future__ import annotations

from sqlglot import exp

from ... import types as sqltypes
from ...errors import ProgrammingError
from ..changelog import CHANGELOG_ALIAS, CHANGELOG_IDS_ALIAS, CHANGELOG_OP, CHANGELOG_ROW_ID
from ..plan import Changelog, Col, DynamicFilter, Node, Scan
from .scope import AliasOnly, Entry, OneRowSide, Scope, resolves
from .subqueries import at_most_one_row


class FromItems:
    """Planner methods that plan FROM: its items and the joins of comma-separated ones."""

    def natural_as_using(self, left, j: exp.Join, side: str):
        """A NATURAL join as the join USING the columns both sides have by name (PostgreSQL's
        meaning), with the right side planned; (None, right) when they have none in common (a
        cross join)."""
        right = self.plan_item(j.this)
        names = [e.name for e in left[1].entries if not isinstance(e, AliasOnly) and not e.name.startswith("_rw_")]
        theirs = {e.name for e in right[1].entries if not e.name.startswith("_rw_")}
        common = list(dict.fromkeys(n for n in names if n in theirs))
        if not common:
            if side:
                raise self.refuse(f"NATURAL {side} JOIN without a column in common", j)
            return None, right
        using = j.copy()
        using.set("method", None)
        using.set("using", [exp.to_identifier(n) for n in common])
        return using, right

    def plan_from(self, q: exp.Select, conjuncts: list, late: list | tuple = ()) -> tuple[Node, Scope, list]:
        groups: list[tuple[Node, Scope]] = []
        current = self.plan_item(q.args["from_"].this)
        for j in q.args.get("joins") or []:
            kind = (j.args.get("kind") or "").upper()
            side = (j.args.get("side") or "").upper()
            if (j.args.get("method") or "").upper() == "NATURAL":
                j, right = self.natural_as_using(current, j, side)
                if j is None:  # no column in common: a cross join
                    groups.append(current)
                    current = right
                    continue
                current = self.join_explicit(current, right, j, side or "INNER")
                continue
            if (j.args.get("method") or "").upper() == "ASOF":
                current = self.asof_join(current, j, side)
                continue
            if j.args.get("method"):
                raise self.refuse(f"{j.args['method']} joins", j)
            if kind in ("SEMI", "ANTI"):
                raise self.refuse(f"{kind} JOIN", j)
            if j.args.get("on") is None and not j.args.get("using") and not side and kind in ("", "CROSS"):
                groups.append(current)
                current = self.plan_item(j.this)
                continue
            if isinstance(j.this, exp.Table) and j.this.args.get("version") is not None:
                current = self.lookup_join(current, j, side or "INNER")
                continue
            right = self.plan_item(j.this)
            current = self.join_explicit(current, right, j, side or "INNER")
        groups.append(current)
        node, scope = groups[0]
        remaining = groups[1:]
        while remaining:
            placed = False
            for gi, (gnode, gscope) in enumerate(remaining):
                lnode, rnode, expr_keys, pending = self.expression_keys(node, scope, gnode, gscope, conjuncts)
                shifted = gscope.shifted(len(lnode.columns))
                both = Scope(scope.entries + shifted.entries)
                keys, residual, rest = self.split_condition(pending, scope, shifted, both, len(lnode.columns))
                keys = expr_keys + keys
                if keys:
                    node, gnode = lnode, rnode
                    node = self.make_join(node, gnode, "inner", keys, residual, both)
                    scope = both
                    conjuncts = rest
                    remaining.pop(gi)
                    placed = True
                    break
            if not placed:
                found = self.dynamic_filter(node, scope, remaining, conjuncts)
                if found is None:
                    found = self.nested_loop_join(node, scope, remaining, conjuncts)
                node, scope, conjuncts = found
        for j in late:  # anti-joins (subquery_predicates): after every FROM item is joined
            node, scope = self.join_explicit((node, scope), self.plan_item(j.this), j, "LEFT")
        return node, scope, conjuncts

    def dynamic_filter(self, node: Node, scope: Scope, remaining: list, conjuncts: list):
        """A comma join with a relation of at most one row, compared by <, <=, > or >= (a dynamic
        filter, `t, (SELECT max(x) AS m FROM u) s WHERE t.v > s.m`): the planned filter, the scope
        (the one-row side's columns usable in that comparison alone) and the conjuncts left; None
        when no remaining input fits. One of `remaining` is taken out."""
        flips = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
        ops = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
        for gi, (gnode, gscope) in enumerate(remaining):
            sides = []
            if at_most_one_row(gnode):
                sides.append((node, scope, gnode, gscope))
            if at_most_one_row(node):
                sides.append((gnode, gscope, node, scope))
            for big, bscope, small, sscope in sides:
                for c in conjuncts:
                    if type(c) not in ops:
                        continue
                    kind = type(c)
                    if resolves(self, c.this, bscope) and resolves(self, c.expression, sscope):
                        a, b = c.this, c.expression
                    elif resolves(self, c.expression, bscope) and resolves(self, c.this, sscope):
                        a, b, kind = c.expression, c.this, flips[kind]
                    else:
                        continue
                    remaining.pop(gi)
                    rest = [x for x in conjuncts if x is not c]
                    return self.make_dynamic_filter(big, bscope, small, sscope, a, b, ops[kind], c) + (rest,)
        return None

    def nested_loop_join(self, node: Node, scope: Scope, remaining: list, conjuncts: list):
        """The first remaining input joined without a join key (a cross join): the conjuncts over
        both sides (`t.x BETWEEN u.lo AND u.hi`) are its condition. Taken out of `remaining`;
        returns the join, its scope and the conjuncts left."""
        gnode, gscope = remaining.pop(0)
        shifted = gscope.shifted(len(node.columns))
        both = Scope(scope.entries + shifted.entries)
        _, residual, rest = self.split_condition(conjuncts, scope, shifted, both, len(node.columns))
        return self.make_join(node, gnode, "inner", [], residual, both), both, rest

    def make_dynamic_filter(self, big: Node, bscope: Scope, small: Node, sscope: Scope,
                            a: exp.Expression, b: exp.Expression, op: str, cond) -> tuple[Node, Scope]:
        left_expr, right_expr = self.bind(a, bscope), self.bind(b, sscope)
        lt, rt = self.type_of(big, left_expr), self.type_of(small, right_expr)
        common = lt
        if lt != rt:
            try:
                common = sqltypes.from_duckdb(self.engine.describe(
                    f"SELECT CASE WHEN true THEN CAST(NULL AS {sqltypes.duckdb_type(lt)}) "
                    f"ELSE CAST(NULL AS {sqltypes.duckdb_type(rt)}) END AS v")[0][1])
            except ProgrammingError:
                raise self.refuse(f"comparing {lt} with {rt} in a dynamic filter", cond) from None
        if lt == common and isinstance(left_expr, exp.Column):
            left, column = big, int(left_expr.name[1:])
        else:
            cast = left_expr if lt == common else exp.cast(left_expr, sqltypes.duckdb_type(common), dialect="duckdb")
            left, column = self.with_columns(big, [cast]), len(big.columns)
        value = right_expr if rt == common else exp.cast(right_expr, sqltypes.duckdb_type(common), dialect="duckdb")
        right = self.project(small, [value], ["_rw_bound"])
        node = DynamicFilter(columns=[Col(c.name, c.type, c.hidden) for c in left.columns],
                             stream_key=list(left.stream_key), left=left, right=right, column=column, op=op)
        entries = list(bscope.entries) + [OneRowSide(e) for e in sscope.entries]
        return node, Scope(entries)

    def plan_item(self, item: exp.Expression) -> tuple[Node, Scope]:
        self._group_counter += 1
        group = self._group_counter
        if isinstance(item, exp.Table):
            if item.args.get("joins") or item.args.get("laterals"):
                raise self.refuse("this FROM item", item)
            if item.args.get("version") is not None:
                raise self.refuse("FOR SYSTEM_TIME AS OF (temporal joins come with Kafka sources)", item)
            if isinstance(item.this, exp.Anonymous) and item.this.name.lower() in ("tumble", "hop"):
                return self.plan_time_window(item, group)
            if isinstance(item.this, exp.GenerateSeries):
                return self.plan_series_relation(item)
            if isinstance(item.this, exp.GapFill) or (isinstance(item.this, exp.Anonymous)
                                                      and item.this.name.lower() == "gap_fill"):
                return self.plan_gap_fill(item)
            if isinstance(item.this, (exp.Anonymous, exp.Func)):
                fn = item.this.name if isinstance(item.this, exp.Anonymous) else item.this.sql_name()
                raise self.refuse(f"the table function {fn.lower()}() in FROM (TUMBLE, HOP, GAP_FILL and "
                                  "generate_series are the table functions a view can read)", item)
            name = item.name
            alias = item.alias_or_name
            if name in self.ctes and not item.db:
                body, visible = self.ctes[name]
                sub = self.probe()
                sub.ctes = dict(visible)
                node, names = sub.plan_query(body)
                self.inputs.extend(i for i in sub.inputs if i not in self.inputs)
                self.window_maps.update(sub.window_maps)
                return node, self.scope_of(node, names, alias, group)
            obj = self.resolve_object(name)
            if obj is None:
                raise ProgrammingError(f'relation "{name}" does not exist{self.where(item)}')
            if name not in self.inputs:
                self.inputs.append(name)
            columns = [Col(c.name, c.type, c.hidden) for c in obj.columns]
            key = [i for i, c in enumerate(obj.columns) if c.name in obj.stream_key]
            key.sort(key=lambda i: obj.stream_key.index(obj.columns[i].name))
            node = Scan(columns=columns, stream_key=key, source=name)
            col_alias = item.args.get("alias")
            names = [c.name for c in obj.columns]
            if col_alias is not None and col_alias.columns:
                vis = [i for i, c in enumerate(obj.columns) if not c.hidden]
                self.check_column_aliases(item, len(vis))
                for j, ident in enumerate(col_alias.columns):
                    names[vis[j]] = ident.name
            entries = [Entry(alias, n, i, group) for i, n in enumerate(names) if not obj.columns[i].hidden]
            if alias in (CHANGELOG_ALIAS, CHANGELOG_IDS_ALIAS):  # WITH c AS CHANGELOG FROM name (sql.changelog)
                n, ids = len(columns), alias == CHANGELOG_IDS_ALIAS
                last = Col(CHANGELOG_ROW_ID, "bigint") if ids else Col("_rw_epoch", "bigint", True)
                node = Changelog(columns=columns + [Col(CHANGELOG_OP, "smallint"), last],
                                 stream_key=key + [n, n + 1], child=node, row_ids=ids)
                entries.append(Entry(alias, CHANGELOG_OP, n, group))
                if ids:
                    entries.append(Entry(alias, CHANGELOG_ROW_ID, n + 1, group))
            return node, Scope(entries)
        if isinstance(item, exp.Subquery):
            sub = self.probe()
            node, names = sub.plan_query(item.this)
            self.inputs.extend(i for i in sub.inputs if i not in self.inputs)
            self.window_maps.update(sub.window_maps)
            alias = item.alias_or_name or None
            col_alias = item.args.get("alias")
            if col_alias is not None and col_alias.columns:  # AS x (a, b): the first outputs renamed
                self.check_column_aliases(item, len(names))
                names = [i.name for i in col_alias.columns] + list(names[len(col_alias.columns):])
            return node, self.scope_of(node, names, alias, group)
        if isinstance(item, (exp.Unnest, exp.Lateral)):
            raise self.refuse(type(item).__name__.upper(), item)
        raise self.refuse(f"{item.sql(dialect='postgres')} in FROM", item)
