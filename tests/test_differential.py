"""Every view, after every flush, equals DuckDB's answer to the same query over the same base data.

Random workloads (hypothesis) of inserts (including primary-key replacements), updates and deletes,
with random barrier placement, views created before and after the data, views over views, and
views that lag several epochs and catch up in one refresh.
"""
from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw

warnings.filterwarnings("ignore")

SCHEMA = [
    "CREATE TABLE t1 (id INT PRIMARY KEY, k INT, v INT, s VARCHAR)",
    "CREATE TABLE t2 (id INT PRIMARY KEY, k INT, w INT, d NUMERIC(10,2))",
    "CREATE TABLE t3 (k INT, v INT)",
]

LINEAR_AND_AGGREGATES = {
    "filter_project": "SELECT id, v * 2 + 1 AS x, s FROM t1 WHERE v > 3",
    "case_coalesce": "SELECT id, CASE WHEN v > 5 THEN 'hi' WHEN v IS NULL THEN 'none' ELSE 'lo' END AS c, "
                     "COALESCE(s, 'none') AS s2, upper(s) AS up, CAST(v AS DOUBLE PRECISION) / 2 AS half FROM t1",
    "group_agg": "SELECT k, count(*) AS n, sum(v) AS sv, min(v) AS mn, max(v) AS mx, count(v) AS cv, "
                 "avg(v) AS av FROM t1 GROUP BY k",
    "distinct_count_having": "SELECT k, count(DISTINCT v) AS dv, max(s) AS ms FROM t1 GROUP BY k HAVING count(*) > 1",
    "global_agg": "SELECT count(*) AS n, sum(v) AS sv, max(v) AS mx, min(s) AS ms FROM t1",
    "distinct_rows": "SELECT DISTINCT k, s FROM t1",
    "subquery": "SELECT k, total FROM (SELECT k, sum(v) AS total FROM t1 GROUP BY k) sub WHERE total > 5",
    "renamed_subquery": "SELECT a, x.v * 2 AS w, y.b, y.s FROM (SELECT k, v, id FROM t1) AS x (a) "
                        "JOIN t1 AS y (b) ON x.id = y.b",
    "group_expr": "SELECT v % 3 AS m, sum(k) AS sk, count(*) AS n FROM t1 WHERE v IS NOT NULL GROUP BY v % 3",
    "agg_filter": "SELECT k, count(*) FILTER (WHERE v > 3) AS big, sum(v) FILTER (WHERE s IS NOT NULL) AS sv, "
                  "max(v) FILTER (WHERE v < 8) AS mx, count(DISTINCT s) FILTER (WHERE v % 2 = 0) AS ds "
                  "FROM t1 GROUP BY k",
}

JOINS = {
    "inner_join": "SELECT t1.id, t2.id AS id2, t1.v, t2.w FROM t1 JOIN t2 ON t1.k = t2.k",
    "join_agg": "SELECT t2.k, count(*) AS n, max(t1.v) AS mx, sum(t2.d) AS sd FROM t1 JOIN t2 ON t1.k = t2.k "
                "GROUP BY t2.k",
    "left_join": "SELECT t1.id, t2.id AS id2, t2.w FROM t1 LEFT JOIN t2 ON t1.k = t2.k",
    "right_join": "SELECT t1.id, t2.id AS id2 FROM t1 RIGHT JOIN t2 ON t1.k = t2.k",
    "full_join_residual": "SELECT t1.id, t2.id AS id2 FROM t1 FULL JOIN t2 ON t1.k = t2.k AND t1.v < t2.w",
    "comma_join": "SELECT t1.id, t2.w FROM t1, t2 WHERE t1.k = t2.k AND t1.v > t2.w",
    "three_way": "SELECT a.id, b.id AS bid, c.v FROM t1 a JOIN t2 b ON a.k = b.k JOIN t3 c ON c.k = b.k",
    # one table three times, comma-joined (paths of length two through k -> v)
    "three_way_self": "SELECT a.id, b.id AS bid, c.id AS cid, c.s FROM t1 a, t1 b, t1 c WHERE a.v = b.k AND b.v = c.k",
    "left_join_agg": "SELECT t1.k, count(t2.id) AS matches FROM t1 LEFT JOIN t2 ON t1.k = t2.k GROUP BY t1.k",
    "expression_key_join": "SELECT t1.id, t2.id AS id2 FROM t1 LEFT JOIN t2 ON t1.k + 1 = t2.k",
    # a fact joined to a dimension by its primary key (the in-process step gathers these matches)
    "key_join_agg": "SELECT t2.w, count(*) AS n, max(t1.v) AS mx, sum(t1.v) AS sv FROM t1 JOIN t2 ON t1.id = t2.id "
                    "WHERE t1.v IS NOT NULL GROUP BY t2.w",
    # the equality every branch of an OR repeats is the join key (TPC-H q19's shape); NULLs in the
    # branches' other terms keep SQL's three-valued answer
    "or_common_join_key": "SELECT t1.id, t2.id AS id2 FROM t1, t2 WHERE (t1.k = t2.k AND t1.v > 3 AND t2.w < 5) "
                          "OR (t1.k = t2.k AND (t2.w > 6 OR t1.s = 'a')) OR (t1.k = t2.k AND t1.v IS NULL)",
    # WITH r (a, b): the CTE's columns renamed
    "cte_column_list": "WITH per_k (kk, total) AS (SELECT k, sum(v) FROM t1 GROUP BY k) "
                       "SELECT p.kk, p.total, t2.w FROM per_k p JOIN t2 ON p.kk = t2.k WHERE p.total > 2",
}

SETS_TOPN_NOPK = {
    "union_all": "SELECT k, v FROM t1 UNION ALL SELECT k, w FROM t2",
    "top_n": "SELECT id, v FROM t1 ORDER BY v DESC, id LIMIT 3",
    "top_n_offset": "SELECT id, v FROM t1 ORDER BY v, id LIMIT 4 OFFSET 2",
    # the first rows and every row tied with the last of them (DuckDB has no WITH TIES: rank() says it)
    "top_n_ties": ("SELECT id, v FROM t1 ORDER BY v DESC NULLS LAST FETCH FIRST 3 ROWS WITH TIES",
                   "SELECT id, v FROM t1 QUALIFY rank() OVER (ORDER BY v DESC NULLS LAST) <= 3"),
    "top_n_ties_nopk": ("SELECT k, v FROM t3 ORDER BY k NULLS FIRST, v FETCH FIRST 2 ROWS WITH TIES",
                        "SELECT k, v FROM t3 QUALIFY rank() OVER (ORDER BY k NULLS FIRST, v) <= 2"),
    "nopk_agg": "SELECT k, count(*) AS n, sum(v) AS sv FROM t3 GROUP BY k",
    "nopk_filter": "SELECT k, v FROM t3 WHERE v > 2",
    "union_distinct": "SELECT k FROM t1 UNION SELECT k FROM t3",
    "except_rows": "SELECT k, v FROM t1 EXCEPT SELECT k, v FROM t3",
    "intersect_rows": "SELECT k, v % 3 AS m FROM t1 INTERSECT SELECT k, w % 3 FROM t2",
    # (view, the same query for DuckDB, which has no CORRESPONDING)
    "union_corresponding": ("SELECT id, k, v FROM t1 UNION ALL CORRESPONDING SELECT v, k FROM t3",
                            "SELECT k, v FROM t1 UNION ALL SELECT k, v FROM t3"),
    "union_corresponding_by": ("SELECT id, k, v FROM t1 UNION CORRESPONDING BY (v, k) SELECT k, w AS v, id FROM t2",
                               "SELECT v, k FROM t1 UNION SELECT w, k FROM t2"),
}

VIEWS_ON_VIEWS = {
    "base_agg": "SELECT k, sum(v) AS sv, count(*) AS n FROM t1 GROUP BY k",
    "on_view": "SELECT b.k, b.sv, t2.w FROM base_agg b JOIN t2 ON b.k = t2.k WHERE b.n > 0",
    "on_view_agg": "SELECT count(*) AS groups, max(sv) AS top FROM base_agg",
}

WINDOWS = {
    "distinct_on": "SELECT DISTINCT ON (k) k, id, v * 2 AS v2 FROM t1 ORDER BY k, v, id",
    "row_number_top2": "SELECT * FROM (SELECT k, id, v, row_number() OVER (PARTITION BY k ORDER BY v DESC, id) AS rn "
                       "FROM t1) x WHERE rn <= 2",
    "rank_per_k": "SELECT k, id, v, rank() OVER (PARTITION BY k ORDER BY v) AS r FROM t1",
    "dense_rank_global": "SELECT * FROM (SELECT id, v, s, dense_rank() OVER (ORDER BY v DESC) AS rn FROM t1) x "
                         "WHERE rn <= 3",
    "window_over_join": "SELECT * FROM (SELECT t1.id, t2.id AS id2, t2.w, row_number() OVER (PARTITION BY t2.k "
                        "ORDER BY t2.w, t1.id, t2.id) AS rn FROM t1 JOIN t2 ON t1.k = t2.k) x WHERE rn <= 3",
    "null_partition_first": "SELECT * FROM (SELECT id, s, v, row_number() OVER (PARTITION BY s ORDER BY v NULLS "
                            "FIRST, id DESC) AS rn FROM t1) x WHERE rn = 1",
    "window_expressions": "SELECT id, k % 2 AS kk, rank() OVER (PARTITION BY k % 2 ORDER BY v * -1) + 10 AS r, "
                          "dense_rank() OVER (PARTITION BY s ORDER BY k DESC NULLS LAST) AS dr FROM t1",
    "window_no_pk": "SELECT k, v, rank() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST) AS r, "
                    "dense_rank() OVER (PARTITION BY k ORDER BY v) AS dr, "
                    "rank() OVER (PARTITION BY k) AS peers FROM t3",
    "window_then_limit": "SELECT id, v, row_number() OVER (PARTITION BY k ORDER BY v, id) AS rn FROM t1 "
                         "ORDER BY rn, id LIMIT 4",
    "on_window": "SELECT k, count(*) AS n, max(v) AS mx FROM row_number_top2 GROUP BY k",
    # window aggregates: ROWS frames (ordered totally, so both engines agree), the default frame
    # with peers (ties in v), and the whole partition
    "window_aggregates": "SELECT id, k, sum(v) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN 1 PRECEDING AND "
                         "CURRENT ROW) AS s2, max(v) OVER (PARTITION BY k ORDER BY v NULLS FIRST) AS upto, "
                         "avg(v) OVER (PARTITION BY k) AS av, count(s) OVER (PARTITION BY s ORDER BY v DESC, id "
                         "ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS cs, min(v) OVER () AS lo FROM t1",
}

small = st.integers(0, 4)
value = st.one_of(st.none(), st.integers(-3, 9))
text = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))


@st.composite
def t1_rows(draw):
    ids = draw(st.lists(st.integers(0, 12), min_size=1, max_size=5, unique=True))
    return [(i, draw(small), draw(value), draw(text)) for i in ids]


@st.composite
def t2_rows(draw):
    ids = draw(st.lists(st.integers(0, 8), min_size=1, max_size=4, unique=True))
    return [(i, draw(small), draw(value), draw(st.one_of(st.none(), st.decimals(-50, 50, places=2)))) for i in ids]


@st.composite
def t3_rows(draw):
    return draw(st.lists(st.tuples(small, value), min_size=1, max_size=4))


def _lit(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def _values(rows) -> str:
    return ", ".join("(" + ", ".join(_lit(v) for v in r) + ")" for r in rows)


operations = st.one_of(
    st.tuples(st.just("insert"), st.just("t1"), t1_rows()),
    st.tuples(st.just("insert"), st.just("t2"), t2_rows()),
    st.tuples(st.just("insert"), st.just("t3"), t3_rows()),
    st.tuples(st.just("sql"), st.sampled_from([
        "UPDATE t1 SET v = v + 1 WHERE k = {n}", "UPDATE t1 SET k = {n} WHERE id = {m}",
        "UPDATE t1 SET s = 'c', v = NULL WHERE id = {m}", "DELETE FROM t1 WHERE id = {m}",
        "DELETE FROM t1 WHERE v > {n}", "UPDATE t2 SET w = w - 2 WHERE k = {n}",
        "UPDATE t2 SET k = {n} WHERE id = {m}", "DELETE FROM t2 WHERE id = {m}",
        "UPDATE t3 SET v = v * 2 WHERE k = {n}", "DELETE FROM t3 WHERE v = {n}",
    ]), st.tuples(small, st.integers(0, 12))),
    st.just(("flush",)),
    st.just(("flush",)),
)


def _apply(conn, oracle, op):
    kind = op[0]
    if kind == "insert":
        _, table, rows = op
        conn.execute(f"INSERT INTO {table} VALUES {_values(rows)}")
        if table == "t3":
            oracle.execute(f"INSERT INTO {table} VALUES {_values(rows)}")
        else:
            oracle.upsert(table, _values(rows))
    elif kind == "sql":
        _, template, (n, m) = op
        sql = template.format(n=n, m=m)
        conn.execute(sql)
        oracle.execute(sql)
    elif kind == "flush":
        conn.execute("FLUSH")


def _check(conn, oracle, created):
    for name in created:
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)


def run_workload(warehouse, views: dict, ops, create_at, engine="duckdb", setup=()):
    """`setup`: (statement, the oracle's statement) pairs run after the tables are created."""
    conn = dagster_rw.connect(warehouse, engine=engine)
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for ours, theirs in setup:
        conn.execute(ours)
        oracle.execute(theirs)
    names = list(views)
    created: list[str] = []

    def create_upto(i):
        for name, at in zip(names, create_at):
            query, oracle_query = (views[name], views[name]) if isinstance(views[name], str) else views[name]
            if at <= i and name not in created and all(
                    dep in created for dep in names if dep != name and dep in query.split()):
                conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
                oracle.execute(f"CREATE VIEW {name} AS {oracle_query}")
                created.append(name)

    for i, op in enumerate(ops):
        create_upto(i)
        _apply(conn, oracle, op)
        if op[0] == "flush":
            _check(conn, oracle, created)
    create_upto(len(ops) + 1)
    conn.execute("FLUSH")
    _check(conn, oracle, created)
    conn.close()


def _workload_test(views, setup=(), examples: int = 12):
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(ops=st.lists(operations, min_size=3, max_size=14),
           create_at=st.lists(st.integers(0, 14), min_size=len(views), max_size=len(views)))
    def check(tmp_path_factory, ops, create_at):
        run_workload(str(tmp_path_factory.mktemp("wh")), views, ops, create_at, setup=setup)

    return check


# aggregates whose result depends on the order of their input: each ORDER BY is total (ends with
# the primary key, or orders values whose ties are equal strings), so both engines have one answer.
# (view, the same query for DuckDB, which calls FIRST_VALUE/LAST_VALUE first/last)
ORDERED_AGGREGATES = {
    "string_agg_groups": (
        "SELECT k, string_agg(s, ',' ORDER BY v DESC NULLS FIRST, id) AS ss, "
        "first_value(v ORDER BY s NULLS FIRST, id) AS fv, last_value(s ORDER BY v NULLS LAST, id DESC) AS lv, "
        "string_agg(DISTINCT s, '|' ORDER BY s) AS ds, count(*) AS n FROM t1 GROUP BY k",
        "SELECT k, string_agg(s, ',' ORDER BY v DESC NULLS FIRST, id) AS ss, "
        "first(v ORDER BY s NULLS FIRST, id) AS fv, last(s ORDER BY v NULLS LAST, id DESC) AS lv, "
        "string_agg(DISTINCT s, '|' ORDER BY s) AS ds, count(*) AS n FROM t1 GROUP BY k"),
    "string_agg_global": (
        "SELECT string_agg(s, ';' ORDER BY id DESC) AS ss, last_value(v ORDER BY id) AS lv, "
        "string_agg(s, '-') FILTER (WHERE v > 3) AS big FROM t1",
        "SELECT string_agg(s, ';' ORDER BY id DESC) AS ss, last(v ORDER BY id) AS lv, "
        "string_agg(s, '-' ORDER BY s) FILTER (WHERE v > 3) AS big FROM t1"),
    # ARRAY_AGG keeps NULLs; without ORDER BY its order is the engine's (here: values ascending)
    "array_agg_groups": (
        "SELECT k, array_agg(v ORDER BY id DESC) AS av, array_agg(s ORDER BY v NULLS FIRST, id) AS sv, "
        "array_agg(id) AS ids FROM t1 GROUP BY k",
        "SELECT k, array_agg(v ORDER BY id DESC) AS av, array_agg(s ORDER BY v NULLS FIRST, id) AS sv, "
        "array_agg(id ORDER BY id) AS ids FROM t1 GROUP BY k"),
    "array_agg_global": "SELECT array_agg(s ORDER BY id) AS ss, count(*) AS n FROM t1",
    # a table without a key: equal rows are counted, and each copy appears in the string
    "string_agg_nopk": "SELECT k, string_agg(CAST(v AS VARCHAR), '+' ORDER BY v NULLS FIRST) AS vs FROM t3 GROUP BY k",
}

# a comparison with a relation of at most one row (dynamic filters): rows cross the threshold
# whenever the other table's aggregate moves, and back
DYNAMIC_FILTERS = {
    "df_scalar_max": "SELECT id, v FROM t1 WHERE v > (SELECT max(w) FROM t2)",
    "df_comma_min": "SELECT t1.id, t1.s FROM t1, (SELECT min(w) AS m FROM t2) b WHERE t1.v <= b.m AND t1.k > 0",
    "df_top1_expression": "SELECT id, k FROM t1 WHERE k + v >= (SELECT w FROM t2 ORDER BY w DESC NULLS LAST, id LIMIT 1)",
    "df_double_agg": "SELECT k, count(*) AS n FROM t1 WHERE v < (SELECT avg(d) FROM t2) GROUP BY k",
    "df_numeric": "SELECT id FROM t1 WHERE (SELECT sum(d) FROM t2) > v",  # NUMERIC: the state is read by SQL
    "df_nopk_count": "SELECT k, v FROM t3 WHERE v >= (SELECT count(*) FROM t1)",
    # a side without FROM: one constant row, emitted once
    "df_constant": "SELECT t1.id, t1.s FROM t1, (SELECT 3 AS lim) c WHERE t1.v > c.lim",
    # a subquery in HAVING: the groups filtered by a moving value (with a plain HAVING term beside it)
    "df_having": "SELECT k, sum(v) AS sv, count(*) AS n FROM t1 GROUP BY k "
                 "HAVING sum(v) > (SELECT avg(w) FROM t2) AND count(*) > 0",
}

# the one-row sides move often: t2's values change by small steps, up and down, and rows of t2
# come and go (an empty t2 lets no row through); the views exist before most changes
threshold_moves = st.one_of(
    st.tuples(st.just("insert"), st.just("t1"), t1_rows()),
    st.tuples(st.just("insert"), st.just("t2"), t2_rows()),
    st.tuples(st.just("insert"), st.just("t3"), t3_rows()),
    st.tuples(st.just("sql"), st.sampled_from([
        "UPDATE t2 SET w = w + {n} - 2 WHERE id = {m}", "UPDATE t2 SET d = d - {n} WHERE k = {n}",
        "DELETE FROM t2 WHERE id = {m}", "DELETE FROM t2 WHERE w > {n}", "UPDATE t1 SET v = v - 1 WHERE k = {n}",
        "DELETE FROM t1 WHERE id = {m}", "DELETE FROM t3 WHERE v = {n}",
    ]), st.tuples(small, st.integers(0, 12))),
    st.just(("flush",)),
    st.just(("flush",)),
)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(threshold_moves, min_size=4, max_size=16),
       create_at=st.lists(st.sampled_from([0, 0, 0, 3, 8]), min_size=len(DYNAMIC_FILTERS),
                          max_size=len(DYNAMIC_FILTERS)))
def test_dynamic_filter_views_match_duckdb(tmp_path_factory, ops, create_at):
    run_workload(str(tmp_path_factory.mktemp("wh")), DYNAMIC_FILTERS, ops, create_at)


test_linear_and_aggregate_views_match_duckdb = _workload_test(LINEAR_AND_AGGREGATES)
test_ordered_aggregate_views_match_duckdb = _workload_test(ORDERED_AGGREGATES)
test_join_views_match_duckdb = _workload_test(JOINS)

# USING merges its columns: unqualified, a USING column is COALESCE(left, right) (the right side's
# value on a right or full join's rows without a left match); qualified, each side's own
USING_JOINS = {
    "full_using_star": "SELECT * FROM t1 FULL JOIN (SELECT id, w, d FROM t2) AS r USING (id)",
    "right_using_sides": "SELECT id, t1.id AS lid, t2.id AS rid, v, w FROM t1 RIGHT JOIN t2 USING (id)",
    "full_using_many": "SELECT k, t1.id AS lid, t1.v, w FROM t1 FULL JOIN t2 USING (k) WHERE k IS NULL OR k > 1",
    "full_using_grouped": "SELECT k, count(*) AS n, sum(w) AS sw FROM t1 FULL OUTER JOIN t2 USING (k) GROUP BY k",
}
test_using_join_views_match_duckdb = _workload_test(USING_JOINS, examples=8)
test_union_top_n_and_tables_without_key_match_duckdb = _workload_test(SETS_TOPN_NOPK)
test_views_over_views_match_duckdb = _workload_test(VIEWS_ON_VIEWS)
test_window_views_match_duckdb = _workload_test(WINDOWS)

# SQL functions (CREATE FUNCTION ... LANGUAGE SQL), inlined into the views that call them; the
# oracle defines the same functions as DuckDB macros. Parameters by name and by position, a body
# given as $$...$$, as a string and as RETURN, a function calling another, casts to the declared
# types (integer division truncates)
FUNCTIONS_SETUP = [
    ("CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE SQL AS "
     "$$SELECT length(s) - length(replace(s, c, ''))$$",
     "CREATE MACRO count_char(s, c) AS CAST(length(s) - length(replace(s, c, '')) AS INT)"),
    ("CREATE FUNCTION clamp(int, int, int) RETURNS int LANGUAGE SQL AS 'SELECT least(greatest($1, $2), $3)'",
     "CREATE MACRO clamp(a, lo, hi) AS CAST(least(greatest(a, lo), hi) AS INT)"),
    ("CREATE FUNCTION halve(x int) RETURNS int RETURN clamp(x, -3, 20) / 2",
     "CREATE MACRO halve(x) AS CAST(clamp(x, -3, 20) // 2 AS INT)"),
]
SQL_FUNCTIONS = {
    "fn_project": "SELECT id, count_char(s, 'a') AS ca, halve(v) AS h FROM t1 WHERE clamp(v, 0, 5) > 1",
    "fn_group": "SELECT halve(k) AS hk, sum(clamp(v, 0, 5)) AS sc, max(count_char(s || s, 'b')) AS mb, "
                "count(*) AS n FROM t1 GROUP BY halve(k)",
    "fn_join": "SELECT t1.id, t2.id AS id2, halve(t1.v + t2.w) AS h FROM t1 JOIN t2 ON clamp(t1.k, 0, 3) = t2.k",
}
test_sql_function_views_match_duckdb = _workload_test(SQL_FUNCTIONS, setup=FUNCTIONS_SETUP)


# set-returning functions in the select list (ProjectSet): each row becomes one row per element of
# an array or per value of an integer series; NULL arrays, NULL bounds and empty ranges give no rows.
# (sqlglot writes generate_series in a select list as DuckDB's UNNEST(GENERATE_SERIES(...)))
SET_RETURNING = {
    "srf_unnest": "SELECT id, unnest(ARRAY[k, v, k + v]) AS u, s FROM t1 WHERE id % 2 = 0 OR v > 3",
    "srf_series": "SELECT k, generate_series(k, v) AS g FROM t1",
    "srf_series_down": "SELECT generate_series(v, k - 1, -2) AS g, v FROM t3",
    # above: a GROUP BY over the expanded rows, and DISTINCT
    "srf_grouped": "SELECT g, count(*) AS n, sum(w) AS sw FROM (SELECT w, generate_series(0, k) AS g FROM t2) x "
                   "GROUP BY g",
    "srf_distinct": "SELECT DISTINCT unnest(ARRAY[k, w]) AS x FROM t2",
}
test_set_returning_views_match_duckdb = _workload_test(SET_RETURNING)


def test_view_lagging_several_epochs_catches_up_in_one_refresh(warehouse):
    conn = dagster_rw.connect(warehouse)
    oracle = Oracle()
    for ddl in SCHEMA[:2]:
        conn.execute(ddl)
        oracle.execute(ddl)
    view = JOINS["join_agg"]
    conn.execute(f"CREATE MATERIALIZED VIEW lagging AS {view}")
    oracle.execute(f"CREATE VIEW lagging AS {view}")
    batches = [
        ("t1", [(1, 1, 5, "a"), (2, 1, 7, "b"), (3, 2, 1, None)]),
        ("t2", [(1, 1, 3, "1.50"), (2, 2, 4, "2.25")]),
        ("t1", [(2, 2, 9, "c")]),
    ]
    epochs = []
    for table, rows in batches:
        values = _values(rows)
        conn.execute(f"INSERT INTO {table} VALUES {values}")
        oracle.upsert(table, values)
        epochs.append(conn.barrier())
        conn.refresh("t1")
        conn.refresh("t2")
    conn.execute("DELETE FROM t1 WHERE id = 3")
    oracle.execute("DELETE FROM t1 WHERE id = 3")
    epochs.append(conn.barrier())
    conn.refresh("t1")
    conn.refresh("t2")
    before = {s["name"]: s for s in conn.status()}
    assert before["lagging"]["lag_epochs"] == 4
    committed = conn.refresh("lagging")
    assert committed == epochs[-1]
    after = {s["name"]: s for s in conn.status()}
    assert after["lagging"]["lag_epochs"] == 0
    assert after["lagging"]["epochs_processed"] == 4
    assert_same(conn.execute("SELECT * FROM lagging").fetchall(), oracle.rows("SELECT * FROM lagging"), "lagging")


@pytest.mark.parametrize("name", sorted(LINEAR_AND_AGGREGATES))
def test_view_created_over_existing_data_starts_from_snapshot(warehouse, name):
    conn = dagster_rw.connect(warehouse)
    oracle = Oracle()
    conn.execute(SCHEMA[0])
    oracle.execute(SCHEMA[0])
    rows = [(i, i % 3, (i * 7) % 11 - 2, "abc"[i % 3] if i % 4 else None) for i in range(20)]
    conn.execute(f"INSERT INTO t1 VALUES {_values(rows)}")
    oracle.upsert("t1", _values(rows))
    conn.execute("FLUSH")
    conn.execute(f"CREATE MATERIALIZED VIEW v AS {LINEAR_AND_AGGREGATES[name]}")
    oracle.execute(f"CREATE VIEW v AS {LINEAR_AND_AGGREGATES[name]}")
    assert_same(conn.execute("SELECT * FROM v").fetchall(), oracle.rows("SELECT * FROM v"), name)
    conn.execute("UPDATE t1 SET v = v + 3 WHERE k = 1")
    oracle.execute("UPDATE t1 SET v = v + 3 WHERE k = 1")
    conn.execute("FLUSH")
    assert_same(conn.execute("SELECT * FROM v").fetchall(), oracle.rows("SELECT * FROM v"), name)


# top-N over more rows than a step reads: when deletions leave the window short, the operator reads
# the input just past the old window, a few rows per file, and reads further while the window could
# reach past them (NULLs sort first or last, ties, text keys)
TOP_N_REFILL = {
    "refill_desc": ("SELECT id, v FROM r ORDER BY v DESC, id LIMIT 5",
                    "SELECT id, v FROM r ORDER BY v DESC NULLS FIRST, id LIMIT 5"),
    "refill_ties": ("SELECT id, v FROM r ORDER BY v FETCH FIRST 4 ROWS WITH TIES",
                    "SELECT id, v FROM r QUALIFY rank() OVER (ORDER BY v) <= 4"),
    "refill_offset": "SELECT id, v FROM r ORDER BY v NULLS FIRST, id LIMIT 3 OFFSET 2",
    "refill_nulls_last": "SELECT id, v FROM r ORDER BY v DESC NULLS LAST, id LIMIT 4",
    "refill_text": "SELECT id, s FROM r ORDER BY s, id LIMIT 3",
}


REFILLING = [(16 - i, i, i, i) for i in range(12)]  # the top and the bottom values go, step by step


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.tuples(st.integers(0, 16), st.integers(0, 16), st.integers(0, 49), st.integers(0, 12)),
                      min_size=4, max_size=8))
@example(steps=REFILLING)
def test_top_n_refills_from_the_rows_past_the_window(tmp_path_factory, steps):
    from dagster_rw.operators import top_n

    refills = []
    original = top_n.TopNOp.refill
    top_n.TopNOp.refill = lambda self, *a: refills.append(original(self, *a)) or refills[-1]
    try:
        _top_n_refill_workload(str(tmp_path_factory.mktemp("wh")), steps)
    finally:
        top_n.TopNOp.refill = original
    if steps == REFILLING:  # windows ran short, and the partial read served
        assert any(r is not None for r in refills)


def _top_n_refill_workload(warehouse: str, steps) -> None:
    conn = dagster_rw.connect(warehouse, compact_max_files=4)
    oracle = Oracle()
    for db in (conn, oracle):
        db.execute("CREATE TABLE r (id INT PRIMARY KEY, v INT, s VARCHAR)")
        db.execute("INSERT INTO r SELECT i, i % 17, 's' || (i % 13) FROM generate_series(1, 300) t(i)")
    for name, q in TOP_N_REFILL.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q if isinstance(q, str) else q[0]}")
    conn.execute("FLUSH")
    for i, (high, low, nulled, text) in enumerate(steps):
        for stmt in [f"DELETE FROM r WHERE v = {high}", f"DELETE FROM r WHERE v = {low}",
                     f"UPDATE r SET v = NULL WHERE id % 50 = {nulled}", f"DELETE FROM r WHERE s = 's{text}'"]:
            conn.execute(stmt)
            oracle.execute(stmt)
        conn.execute(f"INSERT INTO r VALUES ({1000 + i}, {low % 5}, 's{text}')")
        oracle.upsert("r", f"({1000 + i}, {low % 5}, 's{text}')")
        conn.execute("FLUSH")
        for name, q in TOP_N_REFILL.items():
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(),
                        oracle.rows(q if isinstance(q, str) else q[1]), name)


# EXISTS / NOT EXISTS / IN (subquery) in WHERE: semi- and anti-joins with the subquery's distinct
# correlated values; outer rows with NULL keys, several matches per key, matches coming and going;
# and scalar subqueries correlated by equalities
SUBQUERY_PREDICATES = {
    "exists_correlated": "SELECT id, v FROM t1 WHERE EXISTS (SELECT * FROM t2 WHERE t2.k = t1.k AND t2.w > 2)",
    "not_exists": "SELECT id, k, s FROM t1 WHERE NOT EXISTS (SELECT 1 FROM t2 WHERE k = t1.k AND w < 8)",
    "in_subquery": "SELECT id FROM t1 WHERE v > 1 AND k IN (SELECT k FROM t3 WHERE v IS NOT NULL)",
    "in_grouped": "SELECT k, count(*) AS n FROM t1 WHERE k IN (SELECT k FROM t2 GROUP BY k HAVING count(*) > 1) "
                  "GROUP BY k",
    "exists_two_keys": "SELECT a.id FROM t1 a WHERE EXISTS (SELECT 1 FROM t3 b WHERE b.k = a.k AND b.v = a.v) "
                       "AND NOT EXISTS (SELECT 1 FROM t2 c WHERE c.id = a.id)",
    # correlated with both sides of a comma join (the anti-join comes after the join)
    "anti_after_join": "SELECT a.id, b.id AS bid FROM t1 a, t2 b WHERE a.k = b.k "
                       "AND NOT EXISTS (SELECT 1 FROM t3 c WHERE c.k = a.k AND c.v = b.w)",
    # correlated scalar subqueries: an aggregate per outer row (a join with it grouped by the key)
    "scalar_correlated_avg": "SELECT id, v FROM t1 WHERE v > (SELECT avg(w) FROM t2 WHERE t2.k = t1.k)",
    # COUNT is 0 where no row matches (and for a NULL key): those rows pass `< 2`
    "scalar_correlated_count": "SELECT id, k FROM t1 WHERE (SELECT count(*) FROM t3 WHERE t3.k = t1.k) < 2",
    "scalar_correlated_expr": "SELECT a.id FROM t1 a WHERE a.v = (SELECT max(b.w) - 1 FROM t2 b "
                              "WHERE b.k = a.k AND b.id > 1)",
    # NOT IN with SQL's NULLs: an empty subquery lets every row through, a NULL among its values none
    "not_in": "SELECT id, k FROM t1 WHERE v NOT IN (SELECT v FROM t3 WHERE k > 1)",
    "not_in_grouped": "SELECT id FROM t1 WHERE v NOT IN (SELECT w FROM t2 GROUP BY w HAVING count(*) > 1) "
                      "AND id > 0",
    # subqueries nested in a subquery's conditions, correlated with that subquery (TPC-H q20's shape):
    # planned with it, each against its own enclosing query
    "nested_correlated": "SELECT id, s FROM t1 WHERE k IN (SELECT t2.k FROM t2 WHERE t2.id IN "
                         "(SELECT t3.k FROM t3 WHERE t3.v > 0) AND t2.w > (SELECT count(*) FROM t3 WHERE t3.k = t2.k))",
    "nested_exists": "SELECT id FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.k = t1.k AND NOT EXISTS "
                     "(SELECT 1 FROM t3 WHERE t3.k = t2.id AND t3.v = t2.w))",
    # correlations other than equalities (TPC-H q21's shape): over the domain of the outer values
    # they read; NULLs on either side make a comparison unknown
    "exists_residual": "SELECT id, v FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.k = t1.k AND t2.w <> t1.v)",
    "not_exists_residual": "SELECT a.id FROM t1 a WHERE NOT EXISTS (SELECT 1 FROM t2 b WHERE b.k = a.k "
                           "AND b.w > a.v AND b.id <> a.id)",
    "in_residual": "SELECT id FROM t1 WHERE k IN (SELECT t3.k FROM t3 WHERE t3.v < t1.v)",
    "exists_residual_join": "SELECT a.id, b.id AS bid FROM t1 a, t2 b WHERE a.k = b.k AND EXISTS "
                            "(SELECT 1 FROM t1 c WHERE c.k = a.k AND c.id <> a.id) AND NOT EXISTS "
                            "(SELECT 1 FROM t1 d WHERE d.k = a.k AND d.id <> a.id AND d.v > a.v + 5)",
}
test_subquery_predicate_views_match_duckdb = _workload_test(SUBQUERY_PREDICATES)


# rows that agree on every key column unless the plan tells them apart: a FULL join's row padded on
# the right and one padded on the left, when both sides are keyed by nothing (global aggregates) or
# by a NULL group and their join keys are NULL; and equal intervals written differently
# (`1 day` = `24 hours`, `1 month` = `30 days` = `720 hours`), which fall in one group
_INTERVAL = ("CASE v % 4 WHEN 0 THEN k * INTERVAL '1 day' WHEN 1 THEN k * INTERVAL '24 hours' "
             "WHEN 2 THEN k * INTERVAL '1 month' ELSE k * INTERVAL '720 hours' END")
EQUAL_KEYS = {
    "full_join_global_aggs": "SELECT a.n AS n1, b.n AS n2, a.mk FROM (SELECT max(k) AS mk, count(*) AS n FROM t1 "
                             "WHERE v > 4) a FULL JOIN (SELECT max(k) AS mk, count(*) AS n FROM t2 WHERE w > 4) b "
                             "ON a.mk = b.mk",
    "full_join_null_groups": "SELECT a.s, a.n, b.n AS n2 FROM (SELECT s, count(*) AS n FROM t1 GROUP BY s) a "
                             "FULL JOIN (SELECT s, count(*) AS n FROM t1 WHERE v > 2 GROUP BY s) b ON a.s = b.s",
    "full_join_self": "SELECT x.m, y.m AS m2 FROM (SELECT max(v) AS m, max(s) AS ms FROM t1) x "
                      "FULL JOIN (SELECT max(v) AS m, max(s) AS ms FROM t1) y ON x.ms = y.ms",
    "group_by_interval": f"SELECT {_INTERVAL} AS iv, count(*) AS n, sum(v) AS sv FROM t1 GROUP BY 1",
    "distinct_interval": f"SELECT DISTINCT {_INTERVAL} AS iv FROM t3",
}
test_equal_key_views_match_duckdb = _workload_test(EQUAL_KEYS)


def test_equal_key_views_from_empty_tables_and_null_keys(tmp_path):
    """The shapes of EQUAL_KEYS on a fixed workload that reaches each case: views created over
    empty tables (two one-row sides joined on NULL), a NULL group on both sides, intervals of one
    value written three ways, then updated and deleted."""
    ops = [("flush",),
           ("insert", "t1", [(1, 0, None, None), (2, 1, 3, "a"), (3, 2, 5, None), (4, 2, 6, "b"), (5, 2, 7, "b")]),
           ("insert", "t3", [(2, 0), (2, 1), (1, 2), (2, 3), (2, 4), (1, 6)]),
           ("flush",),
           ("sql", "UPDATE t1 SET v = v + 1 WHERE k = {n}", (2, 0)),
           ("sql", "DELETE FROM t3 WHERE v = {n}", (0, 0)),
           ("flush",)]
    run_workload(str(tmp_path / "wh"), EQUAL_KEYS, ops, [0] * len(EQUAL_KEYS))
