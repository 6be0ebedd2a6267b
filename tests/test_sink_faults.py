"""Faults at the target and in the delivering process: the views keep committing, the sink catches up,
and nothing is skipped (at-least-once; upsert targets converge to the view)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from pg_target import pg_schema

import dagster_rw
from dagster_rw.errors import OperationalError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def pg():
    """A scratch schema in the real PostgreSQL, dropped afterwards."""
    yield from pg_schema()


def test_sink_survives_target_refusing_writes_for_several_epochs_then_catches_up(warehouse, pg):
    role = f"{pg.name}_w"
    pg.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        pg.execute(f'CREATE TABLE "{pg.name}".totals (k INT PRIMARY KEY, n BIGINT, s BIGINT)')
        pg.execute(f'GRANT USAGE ON SCHEMA "{pg.name}" TO "{role}"')
        pg.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{pg.name}".totals TO "{role}"')
        with dagster_rw.connect(warehouse) as conn:
            conn.execute("CREATE TABLE events (id INT PRIMARY KEY, k INT, v INT)")
            conn.execute("CREATE MATERIALIZED VIEW totals AS SELECT k, count(*) AS n, sum(v) AS s FROM events GROUP BY k")
            conn.execute(f"CREATE SINK out FROM totals WITH ({pg.options('totals', type='upsert', primary_key='k', user=role)}, "
                         "retry.max_attempts = '3', retry.initial_backoff_ms = '1', retry.max_backoff_ms = '4')")
            next_id = 0

            def epoch_of_changes():
                nonlocal next_id
                rows = ", ".join(f"({next_id + i}, {i % 5}, {i})" for i in range(10))
                conn.execute(f"INSERT INTO events VALUES {rows}")
                conn.execute(f"DELETE FROM events WHERE id = {next_id - 3}")
                next_id += 10
                conn.execute("FLUSH")

            epoch_of_changes()
            assert sorted(pg.rows("totals")) == sorted(conn.execute("SELECT * FROM totals").fetchall())
            delivered = next(r for r in conn.status() if r["name"] == "out")["delivered_epoch"]

            pg.execute(f'REVOKE INSERT, UPDATE, DELETE ON "{pg.name}".totals FROM "{role}"')
            view_epochs = []
            for _ in range(4):
                epoch_of_changes()  # FLUSH returns: the views commit, the sink's one attempt fails
                view_epochs.append(conn.wh.manifest("totals").epoch)
            assert view_epochs == sorted(set(view_epochs)) and len(view_epochs) == 4
            row = next(r for r in conn.status() if r["name"] == "out")
            assert row["delivered_epoch"] == delivered and row["backlog_epochs"] == 4
            assert row["retries"] == 4 and "permission denied" in row["last_error"] and row["failing_since"]
            assert row["stuck_seconds"] > 0
            with pytest.raises(OperationalError, match="sink 'out' could not deliver .* permission denied"):
                conn.refresh("out")
            assert sorted(pg.rows("totals")) != sorted(conn.execute("SELECT * FROM totals").fetchall())

            pg.execute(f'GRANT INSERT, UPDATE, DELETE ON "{pg.name}".totals TO "{role}"')
            assert conn.refresh("out") == conn.wh.manifest("totals").epoch
            assert sorted(pg.rows("totals")) == sorted(conn.execute("SELECT * FROM totals").fetchall())
            row = next(r for r in conn.status() if r["name"] == "out")
            assert row["retries"] == 0 and row["failing_since"] is None and row["backlog_epochs"] == 0
            assert row["stuck_seconds"] == 0
            assert "permission denied" in row["last_error"]  # kept for the record
    finally:
        pg.execute(f'DROP OWNED BY "{role}"')
        pg.execute(f'DROP ROLE IF EXISTS "{role}"')


DELIVER = """
import sys, dagster_rw
with dagster_rw.connect(sys.argv[1]) as conn:
    for name in ("raw", "per_k_out"):
        print(name, conn.refresh(name), flush=True)
"""


def _deliver_in_subprocess(warehouse):
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", DELIVER, warehouse], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_process_killed_during_delivery_redelivers_without_skipping(warehouse, pg):
    with dagster_rw.connect(warehouse, flush_delivers_sinks=False) as conn:
        conn.execute("CREATE TABLE events (id INT, k INT, v INT) APPEND ONLY")
        conn.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS s FROM events GROUP BY k")
        conn.execute(f"CREATE SINK raw FROM events WITH ({pg.options('raw', type='append-only', auto_create='true', max_batch_rows='20')})")
        conn.execute(f"CREATE SINK per_k_out FROM per_k WITH ({pg.options('per_k', type='upsert', primary_key='k', auto_create='true', max_batch_rows='20')})")
        for epoch in range(30):
            rows = ", ".join(f"({epoch * 20 + i}, {(epoch + i) % 7}, {i})" for i in range(20))
            conn.execute(f"INSERT INTO events VALUES {rows}")
            conn.execute("FLUSH")
        events = sorted(conn.execute("SELECT * FROM events").fetchall())
        view = sorted(conn.execute("SELECT * FROM per_k").fetchall())
    # make each batch take a while at the target, so the kill lands inside delivery
    pg.execute(f'CREATE TABLE "{pg.name}".raw (id INT, k INT, v INT)')
    pg.execute(f'CREATE FUNCTION "{pg.name}".slow() RETURNS trigger LANGUAGE plpgsql AS '
               "$$ BEGIN PERFORM pg_sleep(0.03); RETURN NULL; END $$")
    pg.execute(f'CREATE TRIGGER slow AFTER INSERT ON "{pg.name}".raw FOR EACH STATEMENT EXECUTE FUNCTION "{pg.name}".slow()')

    child = _deliver_in_subprocess(warehouse)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and pg.rows("raw", "count(*)")[0][0] < 200 and child.poll() is None:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert child.returncode == -signal.SIGKILL, "the delivering process finished before it could be killed"
    delivered_before = len(pg.rows("raw"))
    assert 0 < delivered_before < len(events)

    pg.execute(f'DROP TRIGGER slow ON "{pg.name}".raw')
    child = _deliver_in_subprocess(warehouse)  # a new process resumes from the committed position
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    got = pg.rows("raw")
    assert sorted(set(got)) == events  # every row delivered: nothing skipped
    assert len(got) >= len(events)  # at least once (a batch the kill interrupted may come twice)
    assert sorted(pg.rows("per_k")) == view
