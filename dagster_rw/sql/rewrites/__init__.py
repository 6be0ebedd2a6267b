"""The rewrite rules: AST-to-AST rewrites that turn a query into one the planner maintains.

Each rule is a function `rule(query, context) -> query` in a module of its own, with an example
in its docstring (input SQL -> output SQL) and its cases in tests/test_rewrites.py. The planner
applies RULES, in this order, to every query it plans: the view's query and each nested one (CTE
bodies, derived tables, subqueries, the sides of set operations) as it reaches it. A rule leaves
a query it does not apply to as it is, and applying the rules twice gives what applying them once
gives. `context` (rewrites.context.Context) names the statement for errors and gives the output
names of a query; the rules that refuse a shape refuse it by name.

Translations of single expressions into the engines' dialects (PostgreSQL's integer division,
regexp_match(...)[n]) are not rules: sql/semantics.py applies them where expressions are bound.
"""
from __future__ import annotations

from sqlglot import exp

from .aggregate_filters import aggregate_filters_as_case
from .bool_aggregates import bool_aggregates_as_counts
from .cte_column_lists import cte_column_lists_as_aliases
from .distinct_on import distinct_on_as_row_number
from .grouping_sets import grouping_sets_as_union_all
from .having_subqueries import having_subqueries_as_where
from .hop_slices import hop_aggregates_over_slices
from .jsonb_functions import jsonb_functions_as_calls
from .lateral_set_returning import set_returning_in_from_as_select_list
from .not_in import not_in_as_anti_join
from .or_common_terms import common_terms_out_of_or
from .set_operations import corresponding_as_select_lists, set_difference_as_group_by

RULES = (
    set_returning_in_from_as_select_list,  # FROM t, unnest(t.a) AS x    -> FROM (SELECT t.*, unnest(t.a) AS x FROM t) t
    jsonb_functions_as_calls,       # jsonb_agg(x), jsonb_build_object(k, v) -> functions over array_agg, arrays
    grouping_sets_as_union_all,     # GROUP BY ROLLUP (a, b)      -> UNION ALL of GROUP BY a, b / a / ()
    aggregate_filters_as_case,      # agg(x) FILTER (WHERE c)     -> agg(CASE WHEN c THEN x END)
    bool_aggregates_as_counts,      # bool_and(x) / bool_or(x)    -> counts of false / true values of x
    hop_aggregates_over_slices,     # count(*) FROM HOP(t, ...)   -> sum of counts per slide, over the slides of a window
    distinct_on_as_row_number,      # SELECT DISTINCT ON (k) ...  -> row_number() OVER (PARTITION BY k ...) = 1
    cte_column_lists_as_aliases,    # WITH r (a, b) AS (q)        -> WITH r AS (SELECT * FROM (q) AS r (a, b))
    corresponding_as_select_lists,  # UNION CORRESPONDING         -> UNION of the columns picked by name
    set_difference_as_group_by,     # EXCEPT / INTERSECT          -> GROUP BY over a tagged UNION ALL
    having_subqueries_as_where,     # HAVING ... (subquery)       -> WHERE over the grouped query in FROM
    common_terms_out_of_or,         # (a AND b) OR (a AND c)      -> a AND (b OR c)
    not_in_as_anti_join,            # x NOT IN (subquery)         -> NOT EXISTS (...) AND a one-row comparison
)


def apply(query: exp.Expression, context) -> exp.Expression:
    """`query` with every rule of RULES applied, in order."""
    for rule in RULES:
        query = rule(query, context)
    return query
