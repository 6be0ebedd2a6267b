"""EXCEPT ALL and INTERSECT ALL in views: each row as many times as the left side holds it more
than the right (EXCEPT ALL) or as the lesser of the two counts (INTERSECT ALL), NULLs equal to
NULLs; equal to DuckDB's answer over the same base data, under inserts, updates and deletes, on
both paths (the workload on both paths is test_both_paths')."""
from __future__ import annotations

from test_differential import _workload_test

SET_OPERATIONS_ALL = {
    "except_all": "SELECT k FROM t1 EXCEPT ALL SELECT k FROM t3",
    "intersect_all": "SELECT k, v FROM t1 INTERSECT ALL SELECT k, v FROM t3",
    "except_all_grouped": "SELECT k, count(*) AS n FROM (SELECT k, v FROM t3 EXCEPT ALL SELECT k, w FROM t2) x "
                          "GROUP BY k",
    "intersect_all_union": "SELECT v FROM t1 INTERSECT ALL (SELECT v FROM t3 UNION ALL SELECT w FROM t2)",
}

test_set_operation_all_views_match_duckdb = _workload_test(SET_OPERATIONS_ALL)
