"""MIN and MAX joined to their groups' accumulators with Arrow's kernels (no SQL join), and the
output delta cancelled per group without consolidation: under inserts, updates and deletes that
remove extremes (their last copy, or one of several), over integers, strings, dates and floating
point values (NaN among them, left to SQL), the views equal DuckDB's answer, and the Arrow join
answers for the steps it can."""
from __future__ import annotations

import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.operators.aggregate import AggregateOp

ROW = st.tuples(st.integers(0, 12), st.integers(0, 3),
                st.one_of(st.none(), st.integers(-3, 3)),
                st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "\u00e9", "Z"])),
                st.one_of(st.none(), st.sampled_from([-1.5, 0.0, 2.25, 7.0, float("nan")])),
                st.one_of(st.none(), st.integers(0, 3)),
                st.booleans())

QUERIES = {
    "extremes": "SELECT g, min(v) AS lo, max(v) AS hi, min(s) AS slo, max(s) AS shi, min(f) AS flo, "
                "max(f) AS fhi, max(d) AS dhi, count(*) AS n, sum(v) AS sv FROM t GROUP BY g",
    "max_only": "SELECT g, max(v) AS hi FROM t GROUP BY g",
    "by_string": "SELECT s, min(v) AS lo, count(v) AS nv FROM t GROUP BY s",  # a NULL group: SQL's join
    # two integer group columns: the value counts by numpy (the groups coded into one number)
    "two_groups": "SELECT g, id % 3 AS m, min(v) AS lo, max(v) AS hi, count(*) AS n FROM t GROUP BY g, id % 3",
}


def _literal(x) -> str:
    if x is None:
        return "NULL"
    if isinstance(x, float):
        return "CAST('NaN' AS DOUBLE)" if x != x else repr(x)
    if isinstance(x, str):
        return "'" + x.replace("'", "''") + "'"
    return str(x)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(epochs_=st.lists(st.lists(ROW, max_size=10), min_size=1, max_size=6))
def test_min_max_joined_in_arrow_equal_duckdb_under_deletes(tmp_path_factory, monkeypatch, epochs_):
    answered = []
    real = AggregateOp.joined_in_arrow

    def recording(self, dg, old, rels):
        joined = real(self, dg, old, rels)
        if any(a.func in ("min", "max") for a in self.node.aggs):
            answered.append(joined is not None)
        return joined

    monkeypatch.setattr(AggregateOp, "joined_in_arrow", recording)
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb", compact_max_files=3)
    oracle = Oracle()
    ddl = "CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT, s VARCHAR, f DOUBLE, d DATE)"
    conn.execute(ddl)
    oracle.execute(ddl)
    for name, q in QUERIES.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    for changes in epochs_:
        for rid, g, v, s, f, d, delete in changes:
            if delete:
                sql = f"DELETE FROM t WHERE id = {rid}"
                conn.execute(sql)
                oracle.execute(sql)
            else:
                day = None if d is None else f"DATE '{datetime.date(2024, 1, 1) + datetime.timedelta(days=d)}'"
                values = f"({rid}, {g}, {_literal(v)}, {_literal(s)}, {_literal(f)}, {day or 'NULL'})"
                conn.execute(f"INSERT INTO t VALUES {values}")
                oracle.upsert("t", values)
        conn.flush()
        for name, q in QUERIES.items():
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(q), name)
    conn.close()
    if len(epochs_) > 1 and any(epochs_[1:]):
        assert any(answered), "the Arrow join never answered a MIN/MAX step"


def test_min_max_grouped_by_two_columns_count_values_in_numpy(tmp_path, monkeypatch):
    """Two integer group columns: the value counts' changes come from numpy (the groups coded into
    one number), through extremes lost and regained, equal to DuckDB's answer."""
    counted = []
    real = AggregateOp.counts_in_numpy

    def counting(self, d, a, counts, old, i):
        got = real(self, d, a, counts, old, i)
        counted.append(got is not None)
        return got

    monkeypatch.setattr(AggregateOp, "counts_in_numpy", counting)
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    oracle = Oracle()
    ddl = "CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT)"
    conn.execute(ddl)
    oracle.execute(ddl)
    q = "SELECT g, id % 3 AS m, min(v) AS lo, max(v) AS hi, count(*) AS n FROM t GROUP BY g, id % 3"
    conn.execute(f"CREATE MATERIALIZED VIEW two AS {q}")
    for sql in ["INSERT INTO t VALUES (1, 1, 5), (2, 1, 7), (4, 1, 3), (5, 2, 3), (8, 2, 3)",
                "DELETE FROM t WHERE id = 4", "UPDATE t SET v = 1 WHERE id = 7", "INSERT INTO t VALUES (7, 1, 9)",
                "DELETE FROM t WHERE id IN (1, 5)", "UPDATE t SET v = 0 WHERE id = 8"]:
        conn.execute(sql)
        oracle.execute(sql)
        conn.execute("FLUSH")
        assert_same(conn.execute("SELECT * FROM two").fetchall(), oracle.rows(q), sql)
    conn.close()
    assert sum(counted) >= 4, counted
