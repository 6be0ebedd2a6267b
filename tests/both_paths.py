"""A fixed workload over test_differential's schema on one path (in-process or Spark), its views
compared with DuckDB's answer after chosen steps: for the features tested on both paths. Each run
on Spark pays its tables' loads and its steps' fixed jobs: a feature adds its views to an existing
run (test_both_paths, test_spark_engine) rather than starting one of its own."""
from __future__ import annotations

from oracle import Oracle, assert_same
from test_differential import SCHEMA, _values

import dagster_rw

STEPS = [
    ("t1", [(1, 1, 5, "a"), (2, 1, 7, "b"), (3, 2, None, None), (4, 3, 2, "c")]),
    ("t2", [(1, 1, 3, "1.50"), (2, 2, 9, "2.25"), (4, 3, 1, None)]),
    ("t3", [(1, 5), (3, 2), (2, 9), (1, 5)]),
    ("sql", "UPDATE t1 SET v = 9, k = 2 WHERE id = 1"),
    ("sql", "DELETE FROM t2 WHERE id = 2"),
    ("t1", [(5, 3, 2, "a"), (6, None, None, None), (7, 2, None, "b")]),
    ("t3", [(4, None), (3, 2)]),
    ("sql", "DELETE FROM t1 WHERE v > 8"),
]
FLUSH_AFTER = (2, len(STEPS) - 1)  # (each Spark flush costs jobs per view)


def run_on(path: str, spark, engine: str, views: dict, steps=STEPS, flush_after=FLUSH_AFTER, setup=()) -> None:
    """Every view (query, or (query, DuckDB's query); an index: (its CREATE INDEX, DuckDB's query for
    its rows)) equals DuckDB's answer at each flush (after
    the steps numbered `flush_after`), and every object ran on `engine`. `setup`: statements run
    before the views are created, as (ours, DuckDB's)."""
    conn = dagster_rw.connect(path, spark=spark, engine=engine)
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for ours, theirs in setup:
        conn.execute(ours)
        oracle.execute(theirs)
    for name, q in views.items():
        q, oracle_q = (q, q) if isinstance(q, str) else q
        conn.execute(q if q.startswith("CREATE INDEX ") else f"CREATE MATERIALIZED VIEW {name} AS {q}")
        oracle.execute(f"CREATE VIEW {name} AS {oracle_q}")
    for i, (what, arg) in enumerate(steps):
        if what == "sql":
            conn.execute(arg)
            oracle.execute(arg)
        elif what == "t3":  # no primary key: every row is inserted
            conn.execute(f"INSERT INTO {what} VALUES {_values(arg)}")
            oracle.execute(f"INSERT INTO {what} VALUES {_values(arg)}")
        else:
            conn.execute(f"INSERT INTO {what} VALUES {_values(arg)}")
            oracle.upsert(what, _values(arg))
        if i in flush_after:
            conn.execute("FLUSH")
            for name in views:
                assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(),
                            oracle.rows(f"SELECT * FROM {name}"), f"{name} ({engine})")
    assert {s["engine"] for s in conn.status()} == {engine}
