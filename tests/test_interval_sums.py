"""SUM over INTERVAL, grouped and global, maintained as rows come and go: compared with PostgreSQL
itself (DuckDB has no SUM over intervals to be the oracle), which adds intervals field by field
(months, days and time apart), on random workloads. Values with months read back with them."""
from __future__ import annotations

import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_target import PgSchema

import dagster_rw
from dagster_rw import slt

VIEWS = {
    "iv_grouped": "SELECT k, sum(v) AS s, count(v) AS n FROM ti GROUP BY k",
    "iv_global": "SELECT sum(v) AS s, count(*) AS n FROM ti",
}

# (stored intervals are Parquet's: no field negative, milliseconds at most, see docs/sql.md)
_interval = st.one_of(st.none(), st.tuples(st.integers(0, 14), st.integers(0, 40), st.integers(0, 90_000_000)).map(
    lambda t: f"INTERVAL '{t[0]} months {t[1]} days {t[2]} milliseconds'"))
_op = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 9), st.integers(0, 2), _interval),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("flush")),
)


def _text(v) -> str:
    return "NULL" if v is None else slt.format_value(v)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(_op, min_size=2, max_size=12))
def test_interval_sums_match_postgresql(tmp_path_factory, ops):
    pg = PgSchema()
    try:
        conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
        conn.execute("CREATE TABLE ti (id INT PRIMARY KEY, k INT, v INTERVAL)")
        pg.admin.execute(f'CREATE TABLE "{pg.name}".ti (id INT PRIMARY KEY, k INT, v INTERVAL)')
        for name, q in VIEWS.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        for op in ops + [("flush",)]:
            if op[0] == "insert":
                _, i, k, v = op
                value = v or "NULL"
                conn.execute(f"INSERT INTO ti VALUES ({i}, {k}, {value})")  # (an upsert by key)
                pg.admin.execute(f'INSERT INTO "{pg.name}".ti VALUES ({i}, {k}, {value}) '
                                 "ON CONFLICT (id) DO UPDATE SET k = EXCLUDED.k, v = EXCLUDED.v")
            elif op[0] == "delete":
                conn.execute(f"DELETE FROM ti WHERE id = {op[1]}")
                pg.admin.execute(f'DELETE FROM "{pg.name}".ti WHERE id = {op[1]}')
            else:
                conn.execute("FLUSH")
                for name, q in VIEWS.items():
                    ours = sorted(tuple(_text(x) for x in r) for r in conn.execute(f"SELECT * FROM {name}").fetchall())
                    theirs_q = q.replace("FROM ti", f'FROM "{pg.name}".ti').replace("sum(v)", "sum(v)::text")
                    theirs = sorted(tuple("NULL" if x is None else str(x) for x in r)
                                    for r in pg.admin.execute(theirs_q).fetchall())
                    assert ours == theirs, name
        conn.close()
    finally:
        pg.drop()


def test_an_interval_with_months_reads_back_with_them(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE ti (id INT PRIMARY KEY, v INTERVAL)")
    conn.execute("INSERT INTO ti VALUES (1, INTERVAL '1 month 2 days'), (2, INTERVAL '3 hours')")
    conn.execute("FLUSH")
    rows = dict(conn.execute("SELECT id, v FROM ti").fetchall())
    assert (rows[1].months, rows[1].days, rows[1].nanoseconds) == (1, 2, 0)
    assert slt.format_value(rows[1]) == "1 mon 2 days" and slt.format_value(rows[2]) == "03:00:00"


@pytest.mark.parametrize("query", ["SELECT sum(v) AS s FROM ti"])
def test_interval_sum_of_no_rows_is_null(tmp_path, query):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE ti (id INT PRIMARY KEY, v INTERVAL)")
    conn.execute(f"CREATE MATERIALIZED VIEW s AS {query}")
    conn.execute("INSERT INTO ti VALUES (1, NULL)")
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM s").fetchall() == [(None,)]


def test_a_negative_interval_is_refused_by_name_and_nothing_is_lost(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE ti (id INT PRIMARY KEY, v INTERVAL)")
    conn.execute("INSERT INTO ti VALUES (1, INTERVAL '1 day'), (2, NULL)")
    with pytest.raises(dagster_rw.DataError, match=r"'ti': column 'v': .*days -1.* negative field"):
        conn.execute("INSERT INTO ti VALUES (3, INTERVAL '-1 day')")
    with pytest.raises(dagster_rw.DataError, match="negative field"):
        conn.execute("UPDATE ti SET v = v - INTERVAL '2 days' WHERE id = 1")
    conn.execute("FLUSH")
    assert conn.execute("SELECT id, v FROM ti ORDER BY id").fetchall() == [(1, datetime.timedelta(days=1)), (2, None)]
