"""Join forms, equal to DuckDB's answer over the same base data on both paths (the workload on both
paths is test_both_paths').

NATURAL joins: the join USING every column both sides have by name (PostgreSQL's meaning), and a
cross join (with the WHERE's equalities as keys) when they have none; in NATURAL RIGHT / FULL joins
the merged columns are COALESCE(left, right). IS NOT DISTINCT FROM as a join key: NULL matches NULL."""
from __future__ import annotations

import pytest
from test_differential import SCHEMA, _workload_test

import dagster_rw

NATURAL_JOINS = {
    "natural_inner": "SELECT id, k, v, s FROM t1 NATURAL JOIN t3",            # USING (k, v)
    "natural_left": "SELECT t1.id, k, t2.w, t2.d FROM t1 NATURAL LEFT JOIN t2",  # USING (id, k)
    "natural_agg": "SELECT k, count(*) AS n, sum(w) AS sw FROM t1 NATURAL JOIN t2 GROUP BY k",
    "natural_full": "SELECT * FROM (SELECT id, k, v FROM t1) AS a NATURAL FULL JOIN (SELECT id, k, w FROM t2) AS b",
    "natural_right": "SELECT k, v, a.k AS ak FROM t3 AS a NATURAL RIGHT JOIN (SELECT k, w AS v FROM t2) AS b",
    "natural_chain": "SELECT id, k, v FROM t1 NATURAL JOIN t3 NATURAL JOIN (SELECT k, w FROM t2) AS x",
    # nothing in common: a cross join, keyed by the WHERE's equality (DuckDB wants CROSS JOIN)
    "natural_no_common": ("SELECT t1.id, x.y FROM t1 NATURAL JOIN (SELECT k AS y FROM t3) AS x WHERE t1.k = x.y",
                          "SELECT t1.id, x.y FROM t1 CROSS JOIN (SELECT k AS y FROM t3) AS x WHERE t1.k = x.y"),
    # NULL keys match: v of t1 against v of t3 and w of t2, NULL on many rows
    "null_safe_inner": "SELECT t1.id, t3.k AS k3 FROM t1 JOIN t3 ON t1.v IS NOT DISTINCT FROM t3.v",
    "null_safe_left_two_keys": "SELECT t1.id, t2.id AS id2 FROM t1 LEFT JOIN t2 ON t1.k IS NOT DISTINCT FROM t2.k "
                               "AND t1.v IS NOT DISTINCT FROM t2.w",
    "null_safe_where_expr": "SELECT t1.id, t2.d FROM t1, t2 WHERE t1.v + 1 IS NOT DISTINCT FROM t2.w",
    "null_safe_strings_agg": "SELECT t1.s, count(*) AS n FROM t1 JOIN t1 AS u ON t1.s IS NOT DISTINCT FROM u.s "
                             "GROUP BY t1.s",
}

test_natural_and_null_safe_join_views_match_duckdb = _workload_test(NATURAL_JOINS)


@pytest.mark.parametrize("sql, construct", [
    ("SELECT t1.id FROM t1 NATURAL LEFT JOIN (SELECT w FROM t2) x", "NATURAL LEFT JOIN without a column in common"),
    ("SELECT a.id FROM t1 a JOIN (SELECT id, ARRAY[k] AS ks FROM t1) b ON ARRAY[a.k] IS NOT DISTINCT FROM b.ks",
     "IS NOT DISTINCT FROM between integer\\[\\] values"),
])
def test_join_forms_the_engine_cannot_keep_are_refused_by_name(conn, sql, construct):
    for ddl in SCHEMA:
        conn.execute(ddl)
    with pytest.raises(dagster_rw.Error, match=construct):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {sql}")
