"""`SELECT * EXCEPT (column, ...)` and `x.* EXCEPT (...)` (the star's columns but those named, each
name bound in the FROM clause as RisingWave binds it), and the scope of WITH queries (a WITH query
does not see itself: `WITH t AS (SELECT * FROM t ...)` reads the relation t; a WITH query sees the
ones before it). Views against DuckDB (`* EXCLUDE`) on random workloads and on both paths, batch
SELECT against DuckDB, and what is refused by name."""
from __future__ import annotations

import pytest
from both_paths import run_on
from oracle import Oracle, assert_same, to_duckdb
from test_differential import SCHEMA, _values, _workload_test

import dagster_rw
from dagster_rw.errors import ProgrammingError

# (ours, DuckDB's)
STAR_EXCEPT = {
    "star_except": ("SELECT * EXCEPT (v) FROM t1 WHERE k IS NOT NULL",
                    "SELECT * EXCLUDE (v) FROM t1 WHERE k IS NOT NULL"),
    "star_except_qualified": ("SELECT t1.* EXCEPT (s, t1.k), t2.* EXCEPT (t2.id, t2.k) FROM t1 JOIN t2 ON t1.k = t2.k",
                              "SELECT t1.* EXCLUDE (s, k), t2.* EXCLUDE (id, k) FROM t1 JOIN t2 ON t1.k = t2.k"),
    "star_except_join": ("SELECT * EXCEPT (t1.id, t2.id, t2.k, d), t1.id AS id1 FROM t1 LEFT JOIN t2 ON t1.k = t2.k",
                         "SELECT * EXCLUDE (t1.id, t2.id, t2.k, d), t1.id AS id1 FROM t1 LEFT JOIN t2 ON t1.k = t2.k"),
    "star_except_grouped": ("SELECT * EXCEPT (n) FROM (SELECT k, count(*) AS n, sum(v) AS sv FROM t1 GROUP BY k) g",
                            "SELECT * EXCLUDE (n) FROM (SELECT k, count(*) AS n, sum(v) AS sv FROM t1 GROUP BY k) g"),
    "star_except_twice": ("SELECT * EXCEPT (k, s), * EXCEPT (id, v) FROM t1",
                          "SELECT * EXCLUDE (k, s), * EXCLUDE (id, v) FROM t1"),
}
WITH_SCOPE = {
    "with_reads_its_table": ("WITH t1 AS (SELECT * FROM t1 WHERE v > 2) SELECT k, count(*) AS n, sum(v) AS sv "
                             "FROM t1 GROUP BY k",
                             "WITH big AS (SELECT * FROM t1 WHERE v > 2) SELECT k, count(*) AS n, sum(v) AS sv "
                             "FROM big GROUP BY k"),
    "with_reads_earlier_with": ("WITH t1 AS (SELECT id, k, v FROM t1 WHERE v IS NOT NULL), "
                                "t2 AS (SELECT t1.id, t1.v, t2.w FROM t1 JOIN t2 ON t1.k = t2.k) "
                                "SELECT * EXCEPT (w), w * 2 AS w2 FROM t2",
                                "WITH a AS (SELECT id, k, v FROM t1 WHERE v IS NOT NULL), "
                                "b AS (SELECT a.id, a.v, t2.w FROM a JOIN t2 ON a.k = t2.k) "
                                "SELECT * EXCLUDE (w), w * 2 AS w2 FROM b"),
    "with_in_derived_table": ("SELECT x.k, x.n FROM (WITH t3 AS (SELECT k, count(*) AS n FROM t3 GROUP BY k) "
                              "SELECT * FROM t3 WHERE n > 1) x",
                              "SELECT x.k, x.n FROM (SELECT k, count(*) AS n FROM t3 GROUP BY k HAVING count(*) > 1) x"),
}
VIEWS = {**STAR_EXCEPT, **WITH_SCOPE}

test_star_except_and_with_views_match_duckdb = _workload_test(VIEWS)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_star_except_and_with_views_on_both_paths(tmp_path, spark, engine):
    views = {name: VIEWS[name] for name in ("star_except_qualified", "with_reads_earlier_with")}
    run_on(str(tmp_path / engine), spark, engine, views)


def _loaded(warehouse: str):
    conn = dagster_rw.connect(warehouse, engine="duckdb")
    oracle = Oracle()
    rows = {"t1": [(1, 1, 5, "a"), (2, 1, 7, "b"), (3, 2, None, None), (4, 3, 2, "c"), (5, None, 9, "d")],
            "t2": [(1, 1, 3, "1.50"), (2, 2, 9, "2.25"), (4, 3, 1, None)],
            "t3": [(1, 5), (3, 2), (2, 9), (1, 5)]}
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for table, values in rows.items():
        conn.execute(f"INSERT INTO {table} VALUES {_values(values)}")
        oracle.execute(f"INSERT INTO {table} VALUES {_values(values)}")
    conn.execute("FLUSH")
    return conn, oracle


@pytest.mark.parametrize("name", list(VIEWS))
def test_batch_select_matches_duckdb(warehouse, name):
    conn, oracle = _loaded(warehouse)
    ours, theirs = VIEWS[name]
    cur = conn.execute(ours)
    expected = oracle.rows(theirs)
    assert_same(cur.fetchall(), expected, name)
    assert [d[0] for d in cur.description] == [d[0] for d in oracle.db.sql(to_duckdb(theirs)).description]


def test_view_columns_leave_out_the_excepted(warehouse):
    conn, _ = _loaded(warehouse)
    conn.execute("CREATE MATERIALIZED VIEW v AS SELECT * EXCEPT (v, s) FROM t1")
    conn.execute("CREATE MATERIALIZED VIEW w AS SELECT t2.* EXCEPT (t2.k), t1.* EXCEPT (t1.id, t1.k) "
                 "FROM t1 JOIN t2 ON t1.id = t2.id")
    assert [d[0] for d in conn.execute("SELECT * FROM v").description] == ["id", "k"]
    assert [d[0] for d in conn.execute("SELECT * FROM w").description] == ["id", "w", "d", "v", "s"]
    assert sorted(conn.execute("SELECT * FROM v").fetchall()) == [(1, 1), (2, 1), (3, 2), (4, 3), (5, None)]
    conn.execute("DELETE FROM t1 WHERE id = 2")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM v").fetchall()) == [(1, 1), (3, 2), (4, 3), (5, None)]
    # a USING column, unqualified: the merged column (the right side's stays reachable by its alias)
    conn.execute("CREATE MATERIALIZED VIEW u AS SELECT * EXCEPT (id, t1.k, t2.k, s) FROM t1 JOIN t2 USING (id)")
    conn.execute("FLUSH")
    assert [d[0] for d in conn.execute("SELECT * FROM u").description] == ["v", "w", "d"]
    assert sorted(conn.execute("SELECT * FROM u").fetchall(), key=str) == sorted(
        conn.execute("SELECT v, w, d FROM t1 JOIN t2 USING (id)").fetchall(), key=str)


@pytest.mark.parametrize("query, error", [
    ("SELECT * EXCEPT (nope) FROM t1", 'column "nope" does not exist'),
    ("SELECT * EXCEPT (t9.id) FROM t1", 'missing FROM-clause entry for table "t9"'),
    ("SELECT * EXCEPT (k) FROM t1 JOIN t2 ON t1.id = t2.id", 'column reference "k" is ambiguous'),
    ("SELECT * EXCEPT (v, v) FROM t1", 'duplicate column "v" in the EXCEPT list of *'),
    ("SELECT * EXCEPT (v + 1) FROM t1", "only column names can be in the EXCEPT list of *"),
    ("SELECT * REPLACE (v + 1 AS v) FROM t1", "* REPLACE is not supported"),
    ("SELECT t1.* RENAME (v AS x) FROM t1", "* RENAME is not supported"),
    ("SELECT * ILIKE 'v%' FROM t1", "* ILIKE is not supported"),
])
def test_what_a_view_refuses_by_name(conn, query, error):
    for ddl in SCHEMA:
        conn.execute(ddl)
    with pytest.raises(ProgrammingError, match=error.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")):
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {query}")


@pytest.mark.parametrize("query, error", [
    ("SELECT * REPLACE (v + 1 AS v) FROM t1", "* REPLACE is not supported"),
    ("SELECT * EXCEPT (v + 1) FROM t1", "only column names can be in the EXCEPT list of *"),
    ("SELECT * EXCEPT (nope) FROM t1", "nope"),
])
def test_what_batch_select_refuses(conn, query, error):
    for ddl in SCHEMA:
        conn.execute(ddl)
    with pytest.raises(ProgrammingError, match=error.replace("*", r"\*")):
        conn.execute(query)


def test_a_with_query_reads_the_relation_it_is_named_after_in_insert_select(warehouse):
    conn, oracle = _loaded(warehouse)
    conn.execute("INSERT INTO t3 WITH t3 AS (SELECT k, v + 100 AS v FROM t3 WHERE v > 4) SELECT * FROM t3")
    conn.execute("FLUSH")
    assert sorted(conn.execute("SELECT * FROM t3").fetchall()) == sorted(
        [(1, 5), (3, 2), (2, 9), (1, 5), (1, 105), (2, 109), (1, 105)])


def test_a_project_reads_the_relation_a_with_query_is_named_after():
    from dagster_rw.dagster.project import references
    from dagster_rw.sql.statements import parse

    statement = parse("CREATE MATERIALIZED VIEW v AS WITH t1 AS (SELECT * FROM t1 WHERE v > 2), "
                      "x AS (SELECT * FROM t1) SELECT * FROM x JOIN t2 ON x.k = t2.k")
    assert sorted(references(statement)) == ["t1", "t2"]
