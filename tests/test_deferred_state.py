"""A back-fill on Spark leaves the state of a join's larger side unbuilt until the other side
first changes (operators/join.py), and the value counts of a grouped MIN/MAX unbuilt until a step
first takes rows away from its input (operators/aggregate/extremes.py): the views stay equal to
DuckDB's answer through the epochs before, at and after the ones that build them, on either
engine, and when the inputs have moved past the view's epoch by then (a lagging view)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same

import dagster_rw

pytestmark = pytest.mark.spark

SCHEMA = ("CREATE TABLE f (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
VIEWS = {
    # the fact side, filtered, is the larger one: deferred through its filter
    "agg": "SELECT d.name, count(*) AS n, sum(f.v) AS s, max(f.v) AS mx FROM f JOIN d ON f.k = d.k "
           "WHERE f.v > 1 GROUP BY d.name",
    "pairs": "SELECT f.id, f.v, d.name FROM f JOIN d ON f.k = d.k",
    # MIN and MAX over one table, grouped by two columns
    "ext": "SELECT k, v > 4 AS big, min(v) AS lo, max(id) AS hi, count(*) AS n FROM f GROUP BY k, v > 4",
}
# what each view's back-fill leaves unbuilt: the join's fact side, MIN/MAX's value counts
DEFERRED = {"agg": ["left", "vcount2"], "pairs": ["left"], "ext": ["vcount0", "vcount1"]}


def _fact(rows) -> str:
    return ", ".join(f"({i}, {k}, {v})" for i, k, v in rows)


def _dim(rows) -> str:
    return ", ".join(f"({k}, 'n{n}')" for k, n in rows)


def _check(conn, oracle, label: str, names=tuple(VIEWS)) -> None:
    for name in names:
        assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"),
                    f"{name} {label}")


def _backfill(path: str, spark, oracle: Oracle, fact, dim, **options):
    conn = dagster_rw.connect(path, spark=spark, engine="spark", **options)
    for sql in SCHEMA:
        conn.execute(sql)
        oracle.execute(sql)
    conn.execute(f"INSERT INTO f VALUES {_fact(fact)}")
    oracle.upsert("f", _fact(fact))
    conn.execute(f"INSERT INTO d VALUES {_dim(dim)}")
    oracle.upsert("d", _dim(dim))
    conn.execute("FLUSH")
    for name, q in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        oracle.execute(f"CREATE VIEW {name} AS {q}")
    return conn


def _deferred(conn) -> dict[str, list[str]]:
    """Each view's deferred state tables, each checked to hold no file."""
    out = {}
    for name in VIEWS:
        m = conn.wh.manifest(name)
        assert all(not m.state.get(t) for t in m.deferred), (name, m.deferred)
        out[name] = sorted(t.split(".")[1] for t in m.deferred)
    return out


def _built(conn) -> bool:
    """Whether every join holds both of its sides and every MIN/MAX its value counts."""
    def files(name, suffixes):
        return [f for t, fs in conn.wh.manifest(name).state.items() if t.endswith(suffixes) for f in fs]

    return all(len(files(name, (".left", ".right"))) >= 2 for name in ("agg", "pairs")) and \
        len(files("agg", (".vcount2",))) >= 1 and len(files("ext", (".vcount0",))) >= 1 and \
        len(files("ext", (".vcount1",))) >= 1


def _apply(conn, oracle, op) -> None:
    kind, arg = op
    if kind == "fact":
        conn.execute(f"INSERT INTO f VALUES {_fact(arg)}")
        oracle.upsert("f", _fact(arg))
    elif kind == "dim":
        conn.execute(f"INSERT INTO d VALUES {_dim(arg)}")
        oracle.upsert("d", _dim(arg))
    else:
        conn.execute(arg)
        oracle.execute(arg)


# (an INSERT names each key once: which of two rows of one key wins is not what is tested here)
FACT = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=8,
                unique_by=lambda r: r[0])
DIM = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=3, unique_by=lambda r: r[0])
DML = st.sampled_from(["DELETE FROM f WHERE v < 3", "UPDATE f SET v = v + 4 WHERE k = 2", "DELETE FROM d WHERE k = 1",
                       "UPDATE d SET name = 'n9' WHERE k = 3", "UPDATE f SET k = 1 WHERE id % 3 = 0"])
OPS = st.one_of(st.tuples(st.just("fact"), FACT), st.tuples(st.just("dim"), DIM), st.tuples(st.just("sql"), DML))


# each example pays a back-fill on Spark: no shrinking (a failure prints its example as found)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(fact=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6), st.integers(0, 9)), min_size=5, max_size=25,
                     unique_by=lambda r: r[0]),
       dim=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=4, unique_by=lambda r: r[0]),
       epochs=st.lists(st.lists(OPS, min_size=1, max_size=3), min_size=1, max_size=5),
       lag_at=st.integers(0, 4))
def test_views_over_a_deferred_side_equal_duckdb_through_its_build(spark, tmp_path_factory, fact, dim, epochs,
                                                                  lag_at):
    path = str(tmp_path_factory.mktemp("wh"))
    oracle = Oracle()
    conn = _backfill(path, spark, oracle, fact, dim)
    assert _deferred(conn) == DEFERRED  # f holds more rows than d
    _check(conn, oracle, "after the back-fill")
    conn.close()
    conn = dagster_rw.connect(path, engine="duckdb")  # later, small epochs run in-process
    dim_changed = False  # (a change of d that changes nothing, an UPDATE of no row, builds the state too)
    for i, ops in enumerate(epochs):
        for op in ops:
            _apply(conn, oracle, op)
        if i == lag_at:
            # the tables commit this epoch and one more; the views step to this one alone, then on
            conn.barrier()
            conn.refresh("f")
            conn.refresh("d")
            more = (5000 + i, i % 7, 7)
            conn.execute(f"INSERT INTO f VALUES {_fact([more])}")
            conn.barrier()
            conn.refresh("f")
            for name in VIEWS:
                conn.refresh(name)
            # (ext reads f alone: it reaches f's later epoch)
            _check(conn, oracle, f"lagging at epoch {i}", ("agg", "pairs"))
            oracle.upsert("f", _fact([more]))
        conn.execute("FLUSH")
        _check(conn, oracle, f"after epoch {i}")
        dim_changed = dim_changed or any(kind == "dim" or "FROM d" in arg or "UPDATE d" in arg
                                         for kind, arg in ops if kind != "fact")
        if not dim_changed:
            assert all("left" in _deferred(conn)[name] for name in ("agg", "pairs"))
    conn.close()


def test_a_deferred_side_is_built_on_spark_when_the_other_side_changes(spark, tmp_path):
    """The first epoch changing the small side builds the large side's state from its input as of
    the view's epoch, also when that input has committed a later epoch (the view lags)."""
    oracle = Oracle()
    fact = [(i, i % 4, i * 7 % 11) for i in range(40)]
    conn = _backfill(str(tmp_path / "wh"), spark, oracle, fact, [(1, 0), (2, 1), (3, 2)])
    assert _deferred(conn) == DEFERRED
    _check(conn, oracle, "after the back-fill")
    _apply(conn, oracle, ("sql", "INSERT INTO f VALUES (100, 1, 5), (101, 3, 1)"))
    conn.execute("FLUSH")
    assert _deferred(conn) == DEFERRED  # rows added to f alone: nothing built
    _check(conn, oracle, "after an epoch adding rows to f")
    _apply(conn, oracle, ("sql", "DELETE FROM f WHERE id = 5"))
    conn.execute("FLUSH")  # a row of f taken away: the value counts are built, the join's side is not
    assert _deferred(conn) == {"agg": ["left"], "pairs": ["left"], "ext": []}
    _check(conn, oracle, "after an epoch taking a row from f")
    # d changes in an epoch the views reach while f has committed the next one too
    for sql in ("UPDATE d SET name = 'n9' WHERE k = 1", "INSERT INTO f VALUES (102, 1, 7)"):
        _apply(conn, oracle, ("sql", sql))
    conn.barrier()
    conn.refresh("f")
    conn.refresh("d")
    view_epoch = conn.wh.manifest("d").epoch
    conn.execute("INSERT INTO f VALUES (103, 1, 8)")
    conn.execute("DELETE FROM f WHERE id = 9")
    conn.barrier()
    conn.refresh("f")
    for name in ("agg", "pairs"):  # (ext reads f alone: it reaches f's later epoch)
        assert conn.refresh(name) == view_epoch
    conn.refresh("ext")
    assert conn.wh.manifest("f").epoch > view_epoch
    assert _deferred(conn) == {name: [] for name in VIEWS}
    assert _built(conn)
    _check(conn, oracle, "at the lagging epoch", ("agg", "pairs"))  # (ext reads f alone: at its later epoch)
    for sql in ("INSERT INTO f VALUES (103, 1, 8)", "DELETE FROM f WHERE id = 9"):
        oracle.execute(sql)
    conn.execute("FLUSH")
    _check(conn, oracle, "caught up")
    for sql in ("UPDATE d SET name = 'n5' WHERE k = 2", "INSERT INTO f VALUES (104, 2, 9)"):
        _apply(conn, oracle, ("sql", sql))
    conn.execute("FLUSH")
    _check(conn, oracle, "after both sides changed")
    assert {s["engine"] for s in conn.status()} == {"spark"}
    conn.close()


def test_the_option_keeps_every_side_built(spark, tmp_path):
    oracle = Oracle()
    conn = _backfill(str(tmp_path / "wh"), spark, oracle, [(i, i % 4, i) for i in range(10)], [(1, 0)],
                     deferred_join_state=False, deferred_value_counts=False)
    assert _deferred(conn) == {name: [] for name in VIEWS}
    assert _built(conn)
    _check(conn, oracle, "after the back-fill")
    conn.close()
