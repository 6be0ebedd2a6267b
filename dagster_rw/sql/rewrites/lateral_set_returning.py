"""A set-returning function in FROM beside one relation, as the same function in a select list."""
from __future__ import annotations

from sqlglot import exp


# the set-returning functions FROM may hold beside a relation, and the columns each gives (None:
# one column, named by the alias, else by the function)
SET_RETURNING = {"unnest": None, "generate_series": None, "jsonb_array_elements": None,
                 "jsonb_array_elements_text": None, "jsonb_object_keys": None,
                 "jsonb_each": ["key", "value"], "jsonb_each_text": ["key", "value"]}
MEMBERS = "_rw_srf"  # the struct of a set-returning function of several columns, before they are taken apart


def set_returning_in_from_as_select_list(query: exp.Expression, context=None) -> exp.Expression:
    """`FROM rel, f(rel's columns) [AS] a [(c, ...)]` (also CROSS JOIN [LATERAL] and JOIN LATERAL
    ... ON true; f over constants is left to the planner, as a constant relation) as rel with f in
    its select list: a row of rel per value f gives for it, as
    PostgreSQL's lateral call. The relation keeps its name; f's columns join its columns, and
    `a.c` reads them. For jsonb_each[_text], whose rows have two columns (key, value), the select
    list's struct is taken apart in a second query: `FROM t, jsonb_each(t.j) AS e` reads from
    `(SELECT ..., (_rw_srf).key AS key, (_rw_srf).value AS value FROM (SELECT ..., JSONB_EACH(t.j)
    AS _rw_srf FROM t) AS t) AS t`. Refused by name: WITH ORDINALITY, LEFT JOIN LATERAL, a column
    of the function named as one of the relation's.

        SELECT t.id, x FROM t, unnest(ARRAY[t.k, t.v]) AS x
        -> SELECT t.id, x FROM (SELECT t."id", t."k", t."v", t."s", UNNEST(ARRAY[t.k, t.v]) AS "x" FROM t) AS t
    """
    if not isinstance(query, exp.Select) or len(query.args.get("joins") or []) != 1:
        return query
    join = query.args["joins"][0]
    found = _call(join.this)
    if found is None:
        return query
    call, alias, ordinality = found
    if next(call.find_all(exp.Column), None) is None:
        return query  # over constants: a constant relation, joined as any FROM item (the planner's)
    name = call.name.lower() if isinstance(call, exp.Anonymous) else \
        "unnest" if isinstance(call, exp.Explode) else "generate_series"
    shown = f"{name}() in FROM"
    if ordinality:
        raise context.refuse(f"WITH ORDINALITY of {shown}", join)
    on = join.args.get("on")
    if join.side or join.args.get("using") or (on is not None and not (isinstance(on, exp.Boolean) and on.this)):
        raise context.refuse(f"{join.side or 'a'} join with {shown} (it joins as a cross join: FROM t, f(...))", join)
    base = query.args["from_"].this
    if not (isinstance(base, exp.Subquery) or isinstance(base, exp.Table) and isinstance(base.this, exp.Identifier)):
        return query  # (a table function beside it: the planner's refusal)
    rel = base.alias_or_name
    names = context.output_names(exp.select("*").from_(base.copy()))
    many = SET_RETURNING[name]
    given = [c.name for c in alias.columns] if alias is not None and alias.columns else []
    outputs = given or many or [alias.name if alias is not None and alias.name else name]
    if len(outputs) != len(many or [name]):
        raise context.refuse(f"{len(outputs)} column names for {shown}, which gives {len(many or [name])}", join)
    taken = [c for c in outputs if c in names]
    if taken:
        raise context.refuse(f"{shown} whose column {taken[0]!r} has the name of a column of {rel!r} (give it "
                             "another with AS a (name, ...))", join)
    kept = [exp.column(exp.to_identifier(n, quoted=True), table=exp.to_identifier(rel)) for n in names]
    if many is None:
        derived = exp.select(*kept, exp.Alias(this=call.copy(), alias=exp.to_identifier(outputs[0], quoted=True))
                             ).from_(base.copy())
    else:
        inner = exp.select(*kept, exp.Alias(this=call.copy(), alias=exp.to_identifier(MEMBERS))).from_(base.copy())
        fields = [exp.alias_(exp.Dot(this=exp.Paren(this=exp.column(MEMBERS)), expression=exp.to_identifier(f)),
                             exp.to_identifier(out, quoted=True)) for f, out in zip(many, outputs)]
        derived = exp.select(*[k.copy() for k in kept], *fields).from_(
            exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(rel))))
    srf_alias = alias.name if alias is not None and alias.name else None
    out = query.copy()
    out.set("joins", None)
    out.set("from_", exp.From(this=exp.Subquery(this=derived, alias=exp.TableAlias(this=exp.to_identifier(rel)))))
    items = []  # rel.* and a.*: each side's own columns
    for item in out.expressions:
        if isinstance(item, exp.Column) and isinstance(item.this, exp.Star) and item.table in (rel, srf_alias):
            if any(item.this.args.get(k) is not None for k in item.this.arg_types):
                raise context.refuse(f"{item.table}.* EXCEPT (...) beside {shown} (name the columns)", item)
            items.extend(exp.column(exp.to_identifier(c, quoted=True), table=exp.to_identifier(rel))
                         for c in (names if item.table == rel else outputs))
        else:
            items.append(item)
    out.set("expressions", items)
    for column in out.find_all(exp.Column):  # a.c: the relation's new column c
        if srf_alias is not None and column.table == srf_alias and _scope_of(column) is out:
            column.set("table", exp.to_identifier(rel))
    return out


def _call(item: exp.Expression):
    """(the call, its alias, WITH ORDINALITY) of a set-returning function as a FROM item, or None."""
    alias = item.args.get("alias")
    ordinality = bool(item.args.get("ordinality"))
    if isinstance(item, exp.Lateral):
        item = item.this
        if isinstance(item, (exp.Subquery, exp.Select)):
            return None
    if isinstance(item, exp.Table) and isinstance(item.this, (exp.Anonymous, exp.Func)):
        alias = alias or item.args.get("alias")
        ordinality = ordinality or bool(item.args.get("ordinality"))
        item = item.this
    if isinstance(item, exp.Unnest):
        alias = alias or item.args.get("alias")
        if len(item.expressions) != 1:
            return None
        call = exp.Explode(this=item.expressions[0].copy())  # as the parser reads unnest(x) in a select list
        return call, alias, ordinality or bool(item.args.get("offset"))
    if isinstance(item, exp.GenerateSeries):
        return item, alias, ordinality
    if isinstance(item, exp.Anonymous) and item.name.lower() in SET_RETURNING:
        return item, alias, ordinality
    return None


def _scope_of(node: exp.Expression) -> exp.Expression | None:
    """The SELECT a node belongs to (the nearest enclosing one)."""
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        parent = parent.parent
    return parent
