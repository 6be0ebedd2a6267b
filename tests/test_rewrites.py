"""The rewrite rules (dagster_rw/sql/rewrites), each on its own: a table of input SQL and the SQL
the rule makes of it, the example in each rule's docstring, what each rule refuses, and that the
rules leave alone what they do not apply to and give the same query when applied twice."""
from __future__ import annotations

import inspect

import pytest
import sqlglot

from dagster_rw.errors import ProgrammingError
from dagster_rw.sql import rewrites
from dagster_rw.sql.planner import Planner
from dagster_rw.storage.catalog import CatalogObject, Column


def _table(name, cols, pk):
    return CatalogObject(name=name, kind="TABLE", sql="", columns=[Column(n, t) for n, t in cols], pk=pk,
                         stream_key=pk)


CATALOG = {
    "t": _table("t", [("id", "integer"), ("k", "integer"), ("v", "integer"), ("s", "varchar")], ["id"]),
    "t1": _table("t1", [("id", "integer"), ("k", "integer"), ("v", "integer")], ["id"]),
    "t3": _table("t3", [("k", "integer"), ("v", "integer")], ["k"]),
    "u": _table("u", [("k", "integer"), ("w", "integer")], ["k"]),
    "ev": _table("ev", [("id", "integer"), ("k", "integer"), ("v", "integer"), ("ts", "timestamp")], ["id"]),
}
RULE = {rule.__name__: rule for rule in rewrites.RULES}


def _rewrite(rule, sql: str) -> str:
    context = Planner(CATALOG.get, sql, "v")  # what the planner hands a rule: errors' subject, output names
    return rule(sqlglot.parse_one(sql, read="postgres"), context).sql(dialect="postgres")


# rule -> [(input, the rule's output)]
CASES = {
    "set_returning_in_from_as_select_list": [
        # two columns: the struct taken apart; `e.key` reads the relation's new column
        ("SELECT id, e.key, e.value FROM t CROSS JOIN LATERAL jsonb_each(t.s) AS e",
         'SELECT id, t.key, t.value FROM (SELECT t."id", t."k", t."v", t."s", (_rw_srf).key AS "key", '
         '(_rw_srf).value AS "value" FROM (SELECT t."id", t."k", t."v", t."s", JSONB_EACH(t.s) AS _rw_srf FROM t) '
         'AS t) AS t'),
        # JOIN LATERAL ... ON true, a column list naming the column
        ("SELECT * FROM t JOIN LATERAL generate_series(1, t.k) AS g(n) ON true",
         'SELECT * FROM (SELECT t."id", t."k", t."v", t."s", GENERATE_SERIES(1, t.k) AS "n" FROM t) AS t'),
        # alias.*: each side's own columns; no alias: the column is named by the function
        ("SELECT x.*, t.* FROM t, unnest(ARRAY[t.k]) x",
         'SELECT t."x", t."id", t."k", t."v", t."s" FROM (SELECT t."id", t."k", t."v", t."s", UNNEST(ARRAY[t.k]) '
         'AS "x" FROM t) AS t'),
        ("SELECT k FROM t, jsonb_array_elements_text(t.s)",
         'SELECT k FROM (SELECT t."id", t."k", t."v", t."s", JSONB_ARRAY_ELEMENTS_TEXT(t.s) AS '
         '"jsonb_array_elements_text" FROM t) AS t'),
    ],
    "hop_aggregates_over_slices": [
        # min/max/sum per slide, combined per window; HAVING's aggregates too; the WHERE goes to the slides;
        # an offset shifts the slides as it shifts the windows
        ("SELECT w.window_end, max(w.v) - min(w.v) AS spread, sum(w.v) AS s FROM HOP(ev, ts, INTERVAL '1' MINUTE, "
         "INTERVAL '2' MINUTE, INTERVAL '30' SECOND) AS w WHERE w.k > 0 GROUP BY w.window_end HAVING count(*) > 1",
         "SELECT w.window_end, MAX(_rw_a1) - MIN(_rw_a2) AS spread, CAST(SUM(_rw_a3) AS BIGINT) AS s FROM (SELECT *, "
         "window_start + INTERVAL '120000000 MICROSECONDS' AS window_end FROM (SELECT GENERATE_SERIES(_rw_slice - "
         "INTERVAL '60000000 MICROSECONDS', _rw_slice, INTERVAL '60000000 MICROSECONDS') AS window_start, _rw_a0, "
         "_rw_a1, _rw_a2, _rw_a3 FROM (SELECT window_start AS _rw_slice, COUNT(*) AS _rw_a0, MAX(w.v) AS _rw_a1, "
         "MIN(w.v) AS _rw_a2, SUM(w.v) AS _rw_a3 FROM TUMBLE(ev, ts, INTERVAL '1 MINUTE', INTERVAL '30 SECOND') AS w "
         "WHERE w.k > 0 GROUP BY window_start) AS _rw_slices) AS _rw_windows) AS w GROUP BY w.window_end "
         "HAVING CAST(SUM(_rw_a0) AS BIGINT) > 1"),
        # left alone: avg, DISTINCT, a window read in WHERE, HOP without GROUP BY
        ("SELECT window_start, avg(v) AS a FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE) GROUP BY window_start",
         "SELECT window_start, AVG(v) AS a FROM HOP(t, ts, INTERVAL '1 MINUTE', INTERVAL '2 MINUTE') GROUP BY window_start"),
        ("SELECT window_start, count(DISTINCT v) AS a FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE) "
         "GROUP BY window_start",
         "SELECT window_start, COUNT(DISTINCT v) AS a FROM HOP(t, ts, INTERVAL '1 MINUTE', INTERVAL '2 MINUTE') "
         "GROUP BY window_start"),
        ("SELECT window_start, count(*) AS n FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE) "
         "WHERE window_end > ts GROUP BY window_start",
         "SELECT window_start, COUNT(*) AS n FROM HOP(t, ts, INTERVAL '1 MINUTE', INTERVAL '2 MINUTE') "
         "WHERE window_end > ts GROUP BY window_start"),
        ("SELECT k, id FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)",
         "SELECT k, id FROM HOP(t, ts, INTERVAL '1 MINUTE', INTERVAL '2 MINUTE')"),
    ],
    "jsonb_functions_as_calls": [
        # a built object inside an aggregate: the inner call is rewritten too
        ("SELECT jsonb_agg(jsonb_build_object('id', id) ORDER BY id) AS a FROM t",
         "SELECT RW_JSONB_ARRAY(ARRAY_AGG(RW_TO_JSONB(RW_JSONB_OBJECT(ARRAY[CAST('id' AS TEXT)], "
         "ARRAY[RW_TO_JSONB(id)])) ORDER BY id)) AS a FROM t"),
        # jsonb_object_agg: one array_agg of members; in a subquery too
        ("SELECT k FROM t WHERE k IN (SELECT k FROM (SELECT k, jsonb_object_agg(s, v) AS m FROM t GROUP BY k) AS q)",
         "SELECT k FROM t WHERE k IN (SELECT k FROM (SELECT k, RW_JSONB_OBJECT_OF_PAIRS(ARRAY_AGG(RW_JSONB_PAIR("
         "CAST(s AS TEXT), RW_TO_JSONB(v)))) AS m FROM t GROUP BY k) AS q)"),
        # no arguments: an empty object
        ("SELECT jsonb_build_object() AS o FROM t", "SELECT RW_JSONB_OBJECT(ARRAY[], ARRAY[]) AS o FROM t"),
        # jsonb_array_elements: unnest of the elements, named as the call
        ("SELECT id, jsonb_array_elements(s::jsonb) FROM t",
         "SELECT id, UNNEST(RW_JSONB_ELEMENTS(CAST(s AS JSONB))) AS jsonb_array_elements FROM t"),
        # jsonb_object_keys: unnest of the keys, named as the call
        ("SELECT id, jsonb_object_keys(s::jsonb) FROM t",
         "SELECT id, UNNEST(RW_JSONB_OBJECT_KEYS(CAST(s AS JSONB))) AS jsonb_object_keys FROM t"),
    ],
    "grouping_sets_as_union_all": [
        # plain keys crossed with CUBE; grouping() in HAVING; a qualified key matched by name
        ("SELECT t.k, s, sum(v) FROM t GROUP BY t.k, CUBE (s, v % 2) HAVING grouping(s) = 0",
         "SELECT t.k, s, SUM(v) FROM t GROUP BY t.k, s, v % 2 HAVING 0 = 0 UNION ALL SELECT t.k, s, SUM(v) FROM t "
         "GROUP BY t.k, s HAVING 0 = 0 UNION ALL SELECT t.k, CAST(NULL AS VARCHAR) AS s, SUM(v) FROM t "
         "GROUP BY t.k, v % 2 HAVING 1 = 0 UNION ALL SELECT t.k, CAST(NULL AS VARCHAR) AS s, SUM(v) FROM t "
         "GROUP BY t.k HAVING 1 = 0"),
        # SELECT DISTINCT: UNION; a set listed twice is grouped twice
        ("SELECT DISTINCT k, count(*) AS n FROM t GROUP BY GROUPING SETS ((k), (), (k))",
         "SELECT k, COUNT(*) AS n FROM t GROUP BY k UNION SELECT CAST(NULL AS INT) AS k, COUNT(*) AS n FROM t "
         "HAVING COUNT(*) >= 0 UNION SELECT k, COUNT(*) AS n FROM t GROUP BY k"),
        # an output alias as the key; the NULL takes the expression's type
        ("SELECT k % 2 AS m, count(*) AS n FROM t GROUP BY ROLLUP (m)",
         "SELECT k % 2 AS m, COUNT(*) AS n FROM t GROUP BY k % 2 UNION ALL SELECT CAST(NULL AS INT) AS m, "
         "COUNT(*) AS n FROM t HAVING COUNT(*) >= 0"),
        # ROLLUP nested in GROUPING SETS, over a CTE
        ("WITH x AS (SELECT k, w FROM u) SELECT k, sum(w) AS sw FROM x GROUP BY GROUPING SETS (k, ROLLUP (w))",
         "WITH x AS (SELECT k, w FROM u) SELECT k, SUM(w) AS sw FROM x GROUP BY k UNION ALL SELECT CAST(NULL AS INT) "
         "AS k, SUM(w) AS sw FROM x GROUP BY w UNION ALL SELECT CAST(NULL AS INT) AS k, SUM(w) AS sw FROM x "
         "HAVING COUNT(*) >= 0"),
        # grouping() over a plain GROUP BY is 0
        ("SELECT k, grouping(k) AS g FROM t GROUP BY k", "SELECT k, 0 AS g FROM t GROUP BY k"),
    ],
    "aggregate_filters_as_case": [
        ("SELECT sum(v) FILTER (WHERE s IS NOT NULL) AS sv, count(DISTINCT s) FILTER (WHERE v % 2 = 0) AS ds FROM t",
         "SELECT SUM(CASE WHEN s IS NOT NULL THEN v END) AS sv, COUNT(DISTINCT CASE WHEN v % 2 = 0 THEN s END) AS ds "
         "FROM t"),
        ("SELECT string_agg(s, ',' ORDER BY s) FILTER (WHERE v > 1) AS x FROM t",
         "SELECT STRING_AGG(CASE WHEN v > 1 THEN s END, ',' ORDER BY s) AS x FROM t"),
        ("SELECT k FROM (SELECT k, max(v) FILTER (WHERE v < 8) AS m FROM t GROUP BY k) AS x",
         "SELECT k FROM (SELECT k, MAX(CASE WHEN v < 8 THEN v END) AS m FROM t GROUP BY k) AS x"),
    ],
    "bool_aggregates_as_counts": [
        ("SELECT bool_or(v > 1), every(v < 3) FROM t",
         "SELECT CASE WHEN COUNT(v > 1) > 0 THEN COUNT(CASE WHEN (v > 1) THEN 1 END) > 0 END AS bool_or, "
         "CASE WHEN COUNT(v < 3) > 0 THEN COUNT(CASE WHEN NOT (v < 3) THEN 1 END) = 0 END AS every FROM t"),
        ("SELECT k FROM t GROUP BY k HAVING bool_and(DISTINCT s = 'a')",
         "SELECT k FROM t GROUP BY k HAVING CASE WHEN COUNT(s = 'a') > 0 THEN "
         "COUNT(CASE WHEN NOT (s = 'a') THEN 1 END) = 0 END"),
        ("SELECT k, bool_or(v > 2) FILTER (WHERE s IS NOT NULL) AS o FROM t GROUP BY k",
         "SELECT k, CASE WHEN COUNT(CASE WHEN s IS NOT NULL THEN v > 2 END) > 0 THEN "
         "COUNT(CASE WHEN (CASE WHEN s IS NOT NULL THEN v > 2 END) THEN 1 END) > 0 END AS o FROM t GROUP BY k"),
    ],
    "distinct_on_as_row_number": [
        ("SELECT DISTINCT ON (k, s) k, s, id * 2 AS d FROM t",
         "SELECT _rw_d0 AS k, _rw_d1 AS s, _rw_d2 AS d FROM (SELECT k AS _rw_d0, s AS _rw_d1, id * 2 AS _rw_d2, "
         "ROW_NUMBER() OVER (PARTITION BY k, s) AS _rw_rn FROM t) AS _rw_distinct_on WHERE _rw_rn = 1"),
        ("SELECT DISTINCT k FROM t", "SELECT DISTINCT k FROM t"),
    ],
    "cte_column_lists_as_aliases": [
        ("WITH a AS (SELECT k FROM t), b (x) AS (SELECT v, k FROM t) SELECT * FROM a, b",
         "WITH a AS (SELECT k FROM t), b AS (SELECT * FROM (SELECT v, k FROM t) AS b(x)) SELECT * FROM a, b"),
    ],
    "corresponding_as_select_lists": [
        ("SELECT id, k, v FROM t1 UNION CORRESPONDING BY (v, k) SELECT k, w AS v, 1 AS id FROM u ORDER BY k LIMIT 3",
         'SELECT "_rw_a"."v", "_rw_a"."k" FROM (SELECT id, k, v FROM t1) AS _rw_a UNION SELECT "_rw_b"."v", '
         '"_rw_b"."k" FROM (SELECT k, w AS v, 1 AS id FROM u) AS _rw_b ORDER BY k LIMIT 3'),
        # the sides' output names are learnt with the union's CTEs in sight, and the CTEs stay
        ("WITH c AS (SELECT k, v FROM t) SELECT k, v FROM c UNION ALL CORRESPONDING SELECT k, w AS v FROM u",
         'WITH c AS (SELECT k, v FROM t) SELECT "_rw_a"."k", "_rw_a"."v" FROM (SELECT k, v FROM c) AS _rw_a '
         'UNION ALL SELECT "_rw_b"."k", "_rw_b"."v" FROM (SELECT k, w AS v FROM u) AS _rw_b'),
    ],
    "set_difference_as_group_by": [
        ("SELECT k, v FROM t1 INTERSECT ALL SELECT k, v FROM t3",
         'SELECT "k", "v" FROM (SELECT "k", "v", GENERATE_SERIES(1, _rw_n) AS _rw_i FROM (SELECT "k", "v", '
         'CAST(LEAST(SUM(_rw_l), SUM(_rw_r)) AS INT) AS _rw_n FROM (SELECT "_rw_a"."k" AS "k", "_rw_a"."v" AS "v", '
         '1 AS _rw_l, 0 AS _rw_r FROM (SELECT k, v FROM t1) AS _rw_a UNION ALL SELECT "_rw_b"."k" AS "k", '
         '"_rw_b"."v" AS "v", 0 AS _rw_l, 1 AS _rw_r FROM (SELECT k, v FROM t3) AS _rw_b) AS _rw_set GROUP BY "k", "v" '
         'HAVING LEAST(SUM(_rw_l), SUM(_rw_r)) > 0) AS _rw_counts) AS _rw_copies'),
        ("SELECT k, v % 3 AS m FROM t1 INTERSECT SELECT k, w % 3 FROM u",
         'SELECT "k", "m" FROM (SELECT "_rw_a"."k" AS "k", "_rw_a"."m" AS "m", 1 AS _rw_l, 0 AS _rw_r FROM '
         '(SELECT k, v % 3 AS m FROM t1) AS _rw_a UNION ALL SELECT "_rw_b"."k" AS "k", "_rw_b"."?column?" AS "m", '
         '0 AS _rw_l, 1 AS _rw_r FROM (SELECT k, w % 3 FROM u) AS _rw_b) AS _rw_set GROUP BY "k", "m" '
         "HAVING SUM(_rw_l) > 0 AND SUM(_rw_r) > 0"),
    ],
    "having_subqueries_as_where": [
        ("SELECT k FROM t GROUP BY k HAVING count(*) > 1 AND max(v) < (SELECT max(w) FROM u) ORDER BY k LIMIT 2",
         'SELECT "_rw_sqhaving"."_rw_sqo0" AS "k" FROM (SELECT k AS "_rw_sqo0", COUNT(*) AS "_rw_sqh0", '
         'MAX(v) AS "_rw_sqh1" FROM t GROUP BY k) AS _rw_sqhaving WHERE "_rw_sqhaving"."_rw_sqh0" > 1 AND '
         '"_rw_sqhaving"."_rw_sqh1" < (SELECT MAX(w) FROM u) ORDER BY k LIMIT 2'),
        ("SELECT k FROM t GROUP BY k HAVING count(*) > 1", "SELECT k FROM t GROUP BY k HAVING COUNT(*) > 1"),
    ],
    "common_terms_out_of_or": [
        # a branch of the common terms alone: the OR goes
        ("SELECT * FROM t JOIN u ON (t.k = u.k AND t.v = 1) OR t.k = u.k", "SELECT * FROM t JOIN u ON t.k = u.k"),
        ("SELECT * FROM t WHERE (k = 1 AND v = 2) OR (s = 'a')", "SELECT * FROM t WHERE (k = 1 AND v = 2) OR (s = 'a')"),
        # nested queries' conditions too (a subquery's correlation becomes an equality)
        ("SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE (u.k = t.k AND u.w > 1) OR (u.k = t.k AND u.w < 0))",
         "SELECT * FROM t WHERE EXISTS(SELECT 1 FROM u WHERE u.k = t.k AND (u.w > 1 OR u.w < 0))"),
    ],
    "not_in_as_anti_join": [
        ("SELECT id FROM t WHERE v > 1 AND k NOT IN (SELECT w FROM u WHERE w > 0)",
         "SELECT id FROM t WHERE v > 1 AND NOT EXISTS(SELECT 1 FROM (SELECT w FROM u WHERE w > 0) AS _rw_ni(_rw_v) "
         "WHERE _rw_ni._rw_v = k) AND (CASE WHEN k IS NULL THEN 1 ELSE 2 END) >= (SELECT CASE WHEN COUNT(*) = 0 "
         "THEN 0 WHEN COUNT(*) > COUNT(_rw_nn._rw_v) THEN 3 ELSE 2 END FROM (SELECT w FROM u WHERE w > 0) "
         "AS _rw_nn(_rw_v))"),
        ("SELECT 1 WHERE 1 NOT IN (SELECT k FROM u)", "SELECT 1 WHERE NOT 1 IN (SELECT k FROM u)"),  # no FROM
    ],
}

# rule -> [(input, a piece of the error)]
REFUSED = {
    "set_returning_in_from_as_select_list": [
        ("SELECT * FROM t, unnest(ARRAY[t.k]) WITH ORDINALITY", "WITH ORDINALITY of unnest"),
        ("SELECT * FROM t LEFT JOIN LATERAL unnest(ARRAY[t.k]) AS x ON true", "LEFT join with unnest"),
        ("SELECT * FROM t, unnest(ARRAY[t.k]) AS k", "whose column 'k' has the name of a column of 't'"),
        ("SELECT * FROM t, jsonb_each(t.s) AS e(a)", "1 column names for jsonb_each"),
    ],
    "grouping_sets_as_union_all": [
        ("SELECT k, count(*) FROM t GROUP BY ROLLUP (k) ORDER BY k", "ORDER BY / LIMIT on GROUPING SETS"),
        ("SELECT k, grouping(v) FROM t GROUP BY ROLLUP (k)", "arguments to GROUPING must be grouping expressions"),
    ],
    "distinct_on_as_row_number": [
        ("SELECT DISTINCT ON (k) k, count(*) FROM t GROUP BY k", "DISTINCT ON with GROUP BY"),
        ("SELECT DISTINCT ON (k) * FROM t", "DISTINCT ON with SELECT *"),
        ("SELECT DISTINCT ON (k) k, v FROM t ORDER BY v", "must match initial ORDER BY"),
    ],
    "corresponding_as_select_lists": [
        ("SELECT id FROM t1 UNION CORRESPONDING SELECT w FROM u", "no output column name in common"),
        ("SELECT k, v FROM t1 UNION CORRESPONDING BY (w) SELECT k, w FROM u", "is not an output column of both"),
    ],
    "set_difference_as_group_by": [
        ("SELECT k FROM t1 EXCEPT ALL SELECT k FROM t3 ORDER BY k LIMIT 1", "ORDER BY / LIMIT on EXCEPT ALL"),
        ("SELECT k, v FROM t1 INTERSECT SELECT k FROM t3", "same number of columns"),
    ],
    "having_subqueries_as_where": [
        ("SELECT k FROM t GROUP BY k HAVING max(v) > (SELECT max(w) FROM u WHERE u.k = t.k)",
         "correlated with the grouped query"),
    ],
    "not_in_as_anti_join": [
        ("SELECT id FROM t WHERE k NOT IN (SELECT w FROM u WHERE u.w = t.v)", "correlated with the outer query"),
        ("SELECT id FROM t WHERE k NOT IN (SELECT k, w FROM u)", "subquery has too many columns"),
    ],
}


def _docstring_example(rule) -> tuple[str, str]:
    """The example of a rule's docstring: its indented last paragraph, `input -> output`."""
    lines = inspect.getdoc(rule).splitlines()
    start = max(i for i, line in enumerate(lines) if line.strip() == "") + 1
    example = " ".join(line.strip() for line in lines[start:])
    given, _, expected = example.partition(" -> ")
    return given, expected


def test_every_rule_has_cases_and_a_docstring_example():
    assert set(CASES) == set(RULE)
    for rule in rewrites.RULES:
        given, expected = _docstring_example(rule)
        assert given and expected, rule.__name__


@pytest.mark.parametrize("name", sorted(RULE))
def test_docstring_example(name):
    given, expected = _docstring_example(RULE[name])
    assert _rewrite(RULE[name], given) == expected


@pytest.mark.parametrize("name,given,expected", [(n, g, e) for n, cases in CASES.items() for g, e in cases])
def test_rule(name, given, expected):
    assert _rewrite(RULE[name], given) == expected


@pytest.mark.parametrize("name,given,error", [(n, g, e) for n, cases in REFUSED.items() for g, e in cases])
def test_rule_refuses(name, given, error):
    with pytest.raises(ProgrammingError, match=error):
        _rewrite(RULE[name], given)


PLAIN = "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k WHERE t.v > 1 GROUP BY t.k"


@pytest.mark.parametrize("name", sorted(RULE))
def test_rule_leaves_other_queries_alone(name):
    assert _rewrite(RULE[name], PLAIN) == sqlglot.parse_one(PLAIN, read="postgres").sql(dialect="postgres")


@pytest.mark.parametrize("given", [g for cases in CASES.values() for g, _ in cases]
                         + [_docstring_example(r)[0] for r in rewrites.RULES])
def test_rules_applied_twice_give_what_once_gives(given):
    context = Planner(CATALOG.get, given, "v")
    once = rewrites.apply(sqlglot.parse_one(given, read="postgres"), context)
    assert rewrites.apply(once.copy(), context).sql(dialect="postgres") == once.sql(dialect="postgres")
