"""RisingWave's changelog CTE (`WITH c AS CHANGELOG FROM t`): a view of every change of its input,
each with changelog_op (1 insert, 2 delete, 3 the new row of an update, 4 its old row). Checked on
random workloads against the changes DuckDB's copy of the tables went through between flushes
(each flush is one step of the view); test_both_paths runs CHANGELOG_BOTH_PATHS on Spark."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same
from test_differential import SCHEMA, _apply, operations

import dagster_rw
from dagster_rw.errors import ProgrammingError

_NET = "sum(CASE WHEN changelog_op IN (1, 3) THEN 1 WHEN changelog_op IN (2, 4) THEN -1 END)"
# views whose rows the input's current rows give (the changes add up to them), for both_paths' run:
# an insert or an update's new row counts +1, a delete or an update's old row -1
CHANGELOG_BOTH_PATHS = {
    "changelog_net_t1": (f"WITH c AS CHANGELOG FROM t1 SELECT k, s, {_NET} AS n FROM c GROUP BY k, s HAVING {_NET} <> 0",
                         "SELECT k, s, count(*) AS n FROM t1 GROUP BY k, s"),
    "changelog_net_t3": (f"WITH c AS CHANGELOG FROM t3 SELECT v, {_NET} AS n FROM c GROUP BY v HAVING {_NET} <> 0",
                         "SELECT v, count(*) AS n FROM t3 GROUP BY v"),
    # the row ids, numbered by the engine that ran the step: unique
    "changelog_ids_t1": (f"WITH c AS CHANGELOG FROM t1 SELECT k, {_NET} AS n, count(DISTINCT _changelog_row_id) = "
                         f"count(*) AS unique_ids FROM c GROUP BY k HAVING {_NET} <> 0",
                         "SELECT k, count(*) AS n, true AS unique_ids FROM t1 GROUP BY k"),
}
# name -> (query, the table it reads, the view's row for a change (row of the table + op), or None)
VIEWS = {
    "cl_t1": ("WITH c AS CHANGELOG FROM t1 SELECT * FROM c", "t1", lambda r: r),
    # the filter applies to each change: an update that moves k from NULL keeps only its new row (op 3)
    "cl_t2_filtered": ("WITH c AS changelog FROM t2 SELECT id, w, changelog_op AS op FROM c WHERE k IS NOT NULL",
                       "t2", lambda r: (r[0], r[2], r[4]) if r[1] is not None else None),
    # with the row ids (checked apart: _check_row_ids), compared without them
    "cl_t1_ids": ("WITH c AS CHANGELOG FROM t1 SELECT id, changelog_op, _changelog_row_id AS rid FROM c", "t1",
                  lambda r: (r[0], r[4])),
}


def _check_row_ids(rows: list, before: set[int]) -> set[int]:
    """cl_t1_ids' rows (id, op, row id): the row ids are unique, those of this step come after every
    earlier one, and an update's old row (4) comes before its new row (3). The row ids seen so far."""
    ids = [r[2] for r in rows]
    assert len(set(ids)) == len(ids), "row ids repeat"
    new = [r for r in rows if r[2] not in before]
    assert not before or not new or min(r[2] for r in new) > max(before), "a step's row ids precede earlier ones"
    old_of = {r[0]: r[2] for r in new if r[1] == 4}
    assert all(old_of[r[0]] < r[2] for r in new if r[1] == 3), "an update's new row precedes its old row"
    return set(ids)


def _changes(before: list, after: list, key_width: int) -> list:
    """The rows with their ops that turn `before` into `after` (rows keyed by their first columns)."""
    old = {r[:key_width]: r for r in before}
    new = {r[:key_width]: r for r in after}
    out = []
    for k in old.keys() | new.keys():
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if a is not None and b is not None:
            out += [a + (4,), b + (3,)]
        elif a is not None:
            out.append(a + (2,))
        else:
            out.append(b + (1,))
    return out


def _view_rows(name: str, changes: list) -> list:
    shape = VIEWS[name][2]
    return [r for r in map(shape, changes) if r is not None]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(operations, min_size=3, max_size=14),
       create_at=st.lists(st.integers(0, 14), min_size=len(VIEWS), max_size=len(VIEWS)))
def test_changelog_views_match_the_changes_on_random_workloads(tmp_path_factory, ops, create_at):
    conn = dagster_rw.connect(str(tmp_path_factory.mktemp("wh")))
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    seen: dict[str, list] = {}  # view -> its input's rows at the last step
    expected: dict[str, list] = {}
    row_ids: set[int] = set()
    for i, op in enumerate(ops + [("flush",)]):
        for name, at in zip(VIEWS, create_at):
            if at <= i and name not in seen:
                conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name][0]}")
                seen[name] = oracle.rows(f"SELECT * FROM {VIEWS[name][1]}")
                expected[name] = _view_rows(name, [r + (1,) for r in seen[name]])  # the snapshot: inserts
        _apply(conn, oracle, op)
        if op[0] == "flush":
            for name in seen:
                now = oracle.rows(f"SELECT * FROM {VIEWS[name][1]}")
                expected[name] += _view_rows(name, _changes(seen[name], now, 1))
                seen[name] = now
                rows = conn.execute(f"SELECT * FROM {name}").fetchall()
                if name.endswith("_ids"):
                    row_ids = _check_row_ids(rows, row_ids)
                    rows = [r[:-1] for r in rows]
                assert_same(rows, expected[name], name)
    conn.close()


def test_changelog_ops_of_rising_waves_example(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE user_behaviors (v1 INT, v2 INT)")
    conn.execute("CREATE MATERIALIZED VIEW ss_mv AS WITH sub AS CHANGELOG FROM user_behaviors "
                 "SELECT v1, v2, changelog_op AS __op FROM sub")
    for sql in ["INSERT INTO user_behaviors (v1, v2) VALUES (1, 1)", "INSERT INTO user_behaviors (v1, v2) VALUES (2, 2)",
                "FLUSH", "DELETE FROM user_behaviors WHERE v1 = 2", "FLUSH",
                "UPDATE user_behaviors SET v2 = 100 WHERE v1 = 1", "FLUSH"]:
        conn.execute(sql)
    assert Counter(conn.execute("SELECT * FROM ss_mv").fetchall()) == Counter(
        [(1, 1, 1), (2, 2, 1), (2, 2, 2), (1, 1, 4), (1, 100, 3)])
    counts = "WITH c AS CHANGELOG FROM user_behaviors SELECT changelog_op, count(*) AS n FROM c GROUP BY changelog_op"
    conn.execute(f"CREATE MATERIALIZED VIEW per_op AS {counts}")  # the snapshot's rows count as inserts
    assert sorted(conn.execute("SELECT * FROM per_op").fetchall()) == [(1, 1)]


def test_a_filter_over_the_changes_sees_each_row_of_an_update(tmp_path):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE t2 (id INT PRIMARY KEY, k INT, w INT)")
    conn.execute("CREATE MATERIALIZED VIEW cl AS WITH c AS changelog FROM t2 SELECT id, w, changelog_op AS op FROM c "
                 "WHERE k > 1")
    for sql in ["INSERT INTO t2 VALUES (1, 1, 5), (2, 2, 6)", "FLUSH", "UPDATE t2 SET k = 2 WHERE id = 1",
                "UPDATE t2 SET k = 0 WHERE id = 2", "FLUSH"]:
        conn.execute(sql)
    assert Counter(conn.execute("SELECT * FROM cl").fetchall()) == Counter([(2, 6, 1), (1, 5, 3), (2, 6, 4)])


@pytest.mark.parametrize("sql, error", [
    ("WITH c AS CHANGELOG FROM t SELECT * FROM c", "not supported: the changelog CTE in a batch query"),
    ("CREATE MATERIALIZED VIEW m AS WITH c AS CHANGELOG FROM (SELECT 1) SELECT * FROM c",
     "not supported: a changelog CTE over anything but the name"),
])
def test_changelog_shapes_refused_by_name(tmp_path, sql, error):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE t (a INT)")
    with pytest.raises(ProgrammingError, match=error):
        conn.execute(sql)


def test_row_ids_of_rising_waves_example(tmp_path):
    """`_changelog_row_id`: the epoch of the step times 2**32 plus the change's number in the step,
    by key, a key's old row before its new one (RisingWave's example, its ids cast to BIGINT)."""
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE user_behaviors (v1 INT PRIMARY KEY, v2 INT)")
    conn.execute("CREATE MATERIALIZED VIEW ss_mv AS WITH sub AS CHANGELOG FROM user_behaviors "
                 "SELECT v1, v2, changelog_op AS __op, _changelog_row_id::bigint AS __row_id FROM sub")
    for sql in ["INSERT INTO user_behaviors VALUES (1, 1), (2, 2)", "FLUSH",
                "DELETE FROM user_behaviors WHERE v1 = 2", "UPDATE user_behaviors SET v2 = 100 WHERE v1 = 1", "FLUSH"]:
        conn.execute(sql)
    rows = sorted(conn.execute("SELECT * FROM ss_mv").fetchall(), key=lambda r: r[3])
    assert [r[:3] for r in rows] == [(1, 1, 1), (2, 2, 1), (1, 1, 4), (1, 100, 3), (2, 2, 2)]
    epochs = [r[3] >> 32 for r in rows]
    assert epochs[0] == epochs[1] < epochs[2] == epochs[3] == epochs[4]
    assert epochs[4] == next(s["epoch"] for s in conn.status() if s["name"] == "ss_mv")
    assert [r[3] & 0xFFFFFFFF for r in rows] == [0, 1, 0, 1, 2]
