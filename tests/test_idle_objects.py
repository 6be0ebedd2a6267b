"""An object whose inputs brought nothing new in an epoch moves to that epoch without a step: it
writes no file, its manifest's epoch advances in the FLUSH's commit, and its rows stay equal to
DuckDB's answer over the same tables, epoch after epoch, whichever tables each epoch touched."""
from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw

VIEWS = {
    "per_k": "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS top FROM a GROUP BY k",
    "names": "SELECT name, count(*) AS n FROM b GROUP BY name",
    "joined": "SELECT b.name, sum(a.v) AS s, count(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY b.name",
    "over_names": "SELECT n, count(*) AS c FROM names GROUP BY n",
}

rows_a = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 4), st.integers(-5, 5)), min_size=1, max_size=6)
rows_b = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["x", "y", "z"])), min_size=1, max_size=3)
# per epoch: rows for a, for b, both, or neither (an epoch no table takes part in)
epochs = st.lists(st.tuples(st.one_of(st.none(), rows_a), st.one_of(st.none(), rows_b)), min_size=1, max_size=8)


def _files(conn, name: str) -> tuple:
    m = conn.wh.manifest(name)
    return tuple(sorted(f.key for files in m.state.values() for f in files)), tuple(f.key for f in m.changelog)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(epochs=epochs)
@example(epochs=[([(1, 1, 1)], None), (None, [(1, "x")]), (None, None), ([(1, 2, 3), (2, 1, 0)], [(2, "y")])])
def test_objects_whose_inputs_brought_nothing_advance_without_writing(tmp_path_factory, epochs):
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")), engine="duckdb")
    oracle = Oracle()
    for ddl in ("CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE b (k INT PRIMARY KEY, name VARCHAR)"):
        conn.execute(ddl)
        oracle.execute(ddl)
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    for ra, rb in epochs:
        before = {name: _files(conn, name) for name in ["a", "b", *VIEWS]}
        touched = set()
        if ra:
            values = ", ".join(f"({i}, {k}, {v})" for i, k, v in ra)
            conn.execute(f"INSERT INTO a VALUES {values}")
            for i, k, v in ra:
                oracle.upsert("a", f"({i}, {k}, {v})")
            touched.add("a")
        if rb:
            conn.execute("INSERT INTO b VALUES " + ", ".join(f"({k}, '{n}')" for k, n in rb))
            for k, n in rb:
                oracle.upsert("b", f"({k}, '{n}')")
            touched.add("b")
        conn.execute("FLUSH")
        newest = max(conn.wh.manifest(n).epoch for n in ["a", "b", *VIEWS])
        # what no touched table feeds must not have written a file, and must still have advanced
        feeds = {"a": {"a", "per_k", "joined"}, "b": {"b", "names", "joined", "over_names"}}
        idle = {"a", "b", *VIEWS} - set().union(*(feeds[t] for t in touched))
        for name in idle:  # (change files every consumer has read may go, as after any step)
            state, changes = _files(conn, name)
            assert state == before[name][0] and set(changes) <= set(before[name][1]), \
                f"{name} wrote files though its inputs had nothing new"
            assert conn.wh.manifest(name).epoch == newest, f"{name} did not advance to epoch {newest}"
            assert conn.wh.manifest(name).stats["rows_in"] == 0
        for name, sql in VIEWS.items():
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(sql.replace(
                "FROM names", f"FROM ({VIEWS['names']}) names")), name)
    # a second connection reads what the idle commits left: the same rows, at the same epochs
    other = dagster_rw.connect(conn.wh.store.url, engine="duckdb")
    for name, sql in VIEWS.items():
        assert sorted(other.execute(f"SELECT * FROM {name}").fetchall()) == \
            sorted(conn.execute(f"SELECT * FROM {name}").fetchall())
        assert other.wh.manifest(name).epoch == conn.wh.manifest(name).epoch
    other.close()
    conn.close()
