"""One broken object (a state file missing or corrupt) fails its own step with an error naming it
and the file; FLUSH still advances and commits every object not downstream of it, then raises
BrokenObject; status() says which object is broken and why, in any process, until it advances
again (here: dropped and created anew)."""
from __future__ import annotations

import pytest
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.errors import BrokenObject, Error
from dagster_rw.storage import manifest as manifests
from dagster_rw.storage import sst_cache

SCHEMA = ["CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE b (id INT PRIMARY KEY, w INT)"]
VIEWS = {
    "per_k": "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k",
    "big_k": "SELECT k, n FROM per_k WHERE n > 1",  # downstream of per_k
    "per_w": "SELECT w, count(*) AS n FROM b GROUP BY w",
    "a_b": "SELECT a.id, b.w FROM a JOIN b ON a.id = b.id",  # reads a and b, not per_k
}


def setup(conn, oracle):
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
    dml(conn, oracle, ["INSERT INTO a VALUES (1, 1, 10), (2, 1, 20), (3, 2, 5)", "INSERT INTO b VALUES (1, 7), (2, 8)"])
    conn.execute("FLUSH")


def dml(conn, oracle, statements):
    for sql in statements:
        conn.execute(sql)
        oracle.execute(sql)


def state_files(conn, name):
    m = manifests.load(conn.wh.store, name)
    return [f.key for files in m.state.values() for f in files]


def break_file(conn, key, how):
    path = conn.wh.store.local_path(key)
    sst_cache.discard(path)  # (as a fresh process would, read it from disk)
    if how == "missing":
        import os

        os.unlink(path)
        # a file a FLUSH packed with others is restored from its pack: lost means the pack is lost too
        where = conn.wh.store.locate_packed(key) if conn.wh.store.locate_packed is not None else None
        if where is not None and os.path.exists(conn.wh.store.cache_path(where[0])):
            os.unlink(conn.wh.store.cache_path(where[0]))
    else:
        with open(path, "r+b") as f:
            f.seek(0)
            f.write(b"garbage!" * 64)


def check(conn, oracle, names):
    for name in names:
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_a_broken_view_does_not_stop_flush_for_the_others(warehouse, how):
    conn = dagster_rw.connect(warehouse)
    oracle = Oracle()
    setup(conn, oracle)
    before = {s["name"]: s["epoch"] for s in conn.status()}
    files = state_files(conn, "per_k")
    assert files
    for key in files:
        break_file(conn, key, how)
    dml(conn, oracle, ["INSERT INTO a VALUES (4, 1, 1), (5, 3, 2)", "UPDATE a SET v = 0 WHERE id = 3",
                       "INSERT INTO b VALUES (4, 9), (5, 9)"])
    with pytest.raises(BrokenObject) as e:
        conn.execute("FLUSH")
    message = str(e.value)
    assert '"per_k"' in message and "big_k" in message, message
    assert e.value.broken.keys() == {"per_k"} and e.value.skipped == ["big_k"]
    if how == "missing":
        assert "missing" in e.value.broken["per_k"] and any(k.split("/")[-1] in message for k in files)
    status = {s["name"]: s for s in conn.status()}
    newest = max(s["epoch"] for s in status.values())
    for name in ("a", "b", "per_w", "a_b"):  # advanced and committed
        assert status[name]["epoch"] == newest > before[name] and status[name]["broken"] is None, status[name]
    check(conn, oracle, ["a", "b", "per_w", "a_b"])
    assert status["per_k"]["epoch"] == before["per_k"] and status["per_k"]["broken"]
    assert status["big_k"]["epoch"] == before["big_k"] and status["big_k"]["broken"] is None
    with dagster_rw.connect(warehouse) as other:  # another process sees the same
        assert next(s for s in other.status() if s["name"] == "per_k")["broken"] == status["per_k"]["broken"]
        # its FLUSH, too, advances the others and names the broken one
        other.execute("INSERT INTO b VALUES (6, 1)")
        oracle.execute("INSERT INTO b VALUES (6, 1)")
        with pytest.raises(BrokenObject, match='"per_k"'):
            other.execute("FLUSH")
        check(other, oracle, ["b", "per_w"])
    # the repair: the broken view and what reads it created anew
    conn.execute("DROP MATERIALIZED VIEW big_k")
    conn.execute("DROP MATERIALIZED VIEW per_k")
    conn.execute(f"CREATE MATERIALIZED VIEW per_k AS {VIEWS['per_k']}")
    conn.execute(f"CREATE MATERIALIZED VIEW big_k AS {VIEWS['big_k']}")
    conn.execute("FLUSH")
    check(conn, oracle, ["a", "b", *VIEWS])
    status = conn.status()
    assert len({s["epoch"] for s in status}) == 1 and not any(s["broken"] for s in status)


def test_a_broken_table_leaves_its_views_behind_and_the_others_advance(warehouse):
    conn = dagster_rw.connect(warehouse)
    oracle = Oracle()
    setup(conn, oracle)
    for key in state_files(conn, "b"):
        break_file(conn, key, "corrupt")
    with pytest.raises(Error, match="missing or corrupt"):  # DML that reads its rows names the file
        conn.execute("UPDATE b SET w = 1 WHERE id = 1")
    dml(conn, oracle, ["INSERT INTO b VALUES (3, 1)", "INSERT INTO a VALUES (9, 9, 9)"])
    with pytest.raises(BrokenObject) as e:
        conn.execute("FLUSH")
    assert set(e.value.broken) == {"b"} and set(e.value.skipped) == {"per_w", "a_b"}
    check(conn, oracle, ["a", "per_k", "big_k"])
    assert isinstance(e.value, Error)
