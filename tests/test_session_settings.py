"""RisingWave's session settings that only tune its physical plans are accepted and ignored, SHOW
answers them (the session's value, else RisingWave's default), and an unknown name is refused."""
from __future__ import annotations

import pytest
from oracle import Oracle, assert_same

import dagster_rw
from dagster_rw.errors import ProgrammingError
from dagster_rw.sql.statements import IGNORED_SETTINGS, SETTING_DEFAULTS

PLAN_SETTINGS = {"rw_streaming_enable_delta_join": "true", "streaming_enable_unaligned_join": "true",
                 "rw_streaming_over_window_cache_policy": "recent", "streaming_parallelism": "4",
                 "rw_force_two_phase_agg": "true", "rw_force_split_distinct_agg": "true"}


def test_show_answers_each_setting_with_its_default_then_the_value_set(warehouse):
    conn = dagster_rw.connect(warehouse)
    for name in sorted(SETTING_DEFAULTS):
        assert conn.execute(f"SHOW {name}").fetchall() == [(SETTING_DEFAULTS[name],)], name
    for name, value in PLAN_SETTINGS.items():
        conn.execute(f"SET {name.upper()} TO {value}")
        assert conn.execute(f"SHOW {name}").fetchall() == [(value,)]
        assert conn.cursor().execute(f"SHOW {name}").description[0][0] == name
    # another connection has its own session
    with dagster_rw.connect(warehouse) as other:
        assert other.execute("SHOW streaming_enable_unaligned_join").fetchall() == [("false",)]


@pytest.mark.parametrize("statement", ["SET rw_no_such_setting TO true", "SET enable_nestloop = off",
                                       "SHOW rw_no_such_setting"])
def test_an_unknown_setting_is_refused_by_name(conn, statement):
    with pytest.raises(ProgrammingError, match="(?i)rw_no_such_setting|enable_nestloop"):
        conn.execute(statement)


def _views_under_every_setting(conn):
    oracle = Oracle()
    for name in sorted(IGNORED_SETTINGS):
        conn.execute(f"SET {name} = '{PLAN_SETTINGS.get(name, SETTING_DEFAULTS[name])}'")
    ddl = ["CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT)", "CREATE TABLE b (k INT PRIMARY KEY, w INT)"]
    views = {"j": "SELECT a.id, a.v, b.w FROM a JOIN b ON a.k = b.k",
             "g": "SELECT k, count(DISTINCT v) AS dv, sum(v) AS sv FROM a GROUP BY k",
             "w": "SELECT id, row_number() OVER (PARTITION BY k ORDER BY v, id) AS r FROM a"}
    for d in ddl:
        conn.execute(d)
        oracle.execute(d)
    for name, q in views.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        oracle.execute(f"CREATE VIEW {name} AS {q}")
    for sql in ["INSERT INTO a VALUES (1, 1, 5), (2, 1, 7), (3, 2, NULL), (4, 3, 5)",
                "INSERT INTO b VALUES (1, 10), (2, 20)", "UPDATE a SET v = 8 WHERE id = 1", "DELETE FROM b WHERE k = 2"]:
        conn.execute(sql)
        oracle.execute(sql)
        conn.execute("FLUSH")
        for name in views:
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)


def test_views_created_under_plan_settings_match_duckdb(conn):
    _views_under_every_setting(conn)


@pytest.mark.spark
def test_views_created_under_plan_settings_match_duckdb_on_spark(tmp_path, spark):
    conn = dagster_rw.connect(str(tmp_path / "wh"), spark=spark, engine="spark")
    _views_under_every_setting(conn)
    assert {s["engine"] for s in conn.status()} == {"spark"}
