"""Sinks: definitions refused at CREATE, the key conversion of DESIGN, delivery to PostgreSQL, files and
tables, status, retries and redaction. The targets are real (PostgreSQL on 127.0.0.1:5432, the local disk)."""
from __future__ import annotations

import dataclasses
import json
import os
import random

import pyarrow.parquet as pq
import pytest
from pg_target import pg_schema

import dagster_rw
from dagster_rw.errors import IntegrityError, OperationalError, ProgrammingError
from dagster_rw.sinks.retry import RetryPolicy

FAST_RETRY = "retry.max_attempts = '3', retry.initial_backoff_ms = '1', retry.max_backoff_ms = '5'"


@pytest.fixture
def pg():
    """A scratch schema in the real PostgreSQL, dropped afterwards."""
    yield from pg_schema()


@pytest.fixture
def secret_key(monkeypatch):
    """A key for the literal passwords of sinks (stored encrypted with it)."""
    from cryptography.fernet import Fernet

    monkeypatch.setenv("DAGSTER_RW_SECRET_KEY", Fernet.generate_key().decode())


@pytest.fixture
def out(tmp_path):
    """A folder for file sinks (the warehouse fixture uses tmp_path/wh)."""
    path = tmp_path / "out"
    path.mkdir()
    return path


def shop(conn):
    conn.execute("CREATE TABLE orders (id INT PRIMARY KEY, item_id INT, qty INT)")
    conn.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR)")
    conn.execute("CREATE MATERIALIZED VIEW order_items AS "
                 "SELECT o.id, o.item_id, i.name, o.qty FROM orders o JOIN items i ON o.item_id = i.id")
    conn.execute("INSERT INTO items VALUES (1, 'pen'), (2, 'ink'), (3, 'pad')")
    conn.execute("INSERT INTO orders VALUES (101, 1, 5), (102, 2, 1)")
    conn.execute("FLUSH")


def view_rows(conn, name="order_items"):
    return sorted(conn.execute(f"SELECT * FROM {name}").fetchall())


# -- CREATE SINK refuses what cannot work, naming the sink and the cause --------------------------------

@pytest.mark.parametrize("with_clause, cause", [
    ("connector = 'postgres', table = 't', type = 'upsert'", "primary_key"),
    ("connector = 'mysql', type = 'upsert', primary_key = 'id'", "unknown connector 'mysql'"),
    ("connector = 'postgres', type = 'upsert', primary_key = 'id'", "needs the option table"),
    ("connector = 'postgres', table = 't', type = 'append-only'", "force_append_only"),
    ("connector = 'postgres', table = 't', type = 'merge', primary_key = 'id'", "type = 'merge'"),
    ("connector = 'postgres', table = 't', type = 'upsert', primary_key = 'nope'", "'nope'"),
    ("connector = 'postgres', table = 't', type = 'upsert', primary_key = 'id', colour = 'red'", "'colour'"),
    ("connector = 'file', path = '/tmp/x', encode = 'csv', type = 'append-only', force_append_only = 'true'",
     "encode = 'csv'"),
    ("table = 't', type = 'upsert', primary_key = 'id'", "connector is missing"),
])
def test_create_sink_refuses_bad_options_naming_the_sink_and_cause(conn, with_clause, cause):
    shop(conn)
    with pytest.raises(ProgrammingError) as e:
        conn.execute(f"CREATE SINK bad FROM order_items WITH ({with_clause})")
    assert "'bad'" in str(e.value) and cause in str(e.value)
    assert conn.execute("SHOW SINKS").fetchall() == []


def test_kafka_sink_needs_a_format_that_fits_its_type(conn):
    shop(conn)
    base = "connector = 'kafka', topic = 't', properties.bootstrap.server = '127.0.0.1:1'"
    with pytest.raises(ProgrammingError, match="FORMAT PLAIN | UPSERT"):
        conn.execute(f"CREATE SINK k FROM order_items WITH ({base})")
    with pytest.raises(ProgrammingError, match="primary_key"):
        conn.execute(f"CREATE SINK k FROM order_items WITH ({base}) FORMAT UPSERT ENCODE JSON")
    with pytest.raises(ProgrammingError, match="can update and delete"):
        conn.execute(f"CREATE SINK k FROM order_items WITH ({base}) FORMAT PLAIN ENCODE JSON")
    with pytest.raises(ProgrammingError, match="ENCODE AVRO"):
        conn.execute(f"CREATE SINK k FROM order_items WITH ({base}, primary_key = 'id') FORMAT UPSERT ENCODE AVRO")


def test_append_only_sink_is_accepted_over_an_append_only_table_and_a_filter_of_it(conn, out):
    conn.execute("CREATE TABLE events (id INT, kind VARCHAR) APPEND ONLY")
    conn.execute("CREATE MATERIALIZED VIEW clicks AS SELECT id FROM events WHERE kind = 'click'")
    conn.execute(f"CREATE SINK a FROM clicks WITH (connector = 'file', path = '{out}', type = 'append-only')")
    conn.execute("CREATE MATERIALIZED VIEW per_kind AS SELECT kind, count(*) AS n FROM events GROUP BY kind")
    with pytest.raises(ProgrammingError, match="'per_kind' can update and delete"):
        conn.execute(f"CREATE SINK b FROM per_kind WITH (connector = 'file', path = '{out}', type = 'append-only')")


def test_drop_sink_and_dependencies(conn, out):
    shop(conn)
    conn.execute(f"CREATE SINK f FROM order_items WITH (connector = 'file', path = '{out}', "
                 "type = 'upsert', primary_key = 'id')")
    with pytest.raises(IntegrityError, match="depend on it"):
        conn.execute("DROP MATERIALIZED VIEW order_items")
    with pytest.raises(ProgrammingError, match="is a sink; use DROP SINK"):
        conn.execute("DROP MATERIALIZED VIEW f")
    conn.execute("DROP SINK f")
    conn.execute("DROP SINK IF EXISTS f")
    with pytest.raises(ProgrammingError, match='sink "f" does not exist'):
        conn.execute("DROP SINK f")
    conn.execute("DROP MATERIALIZED VIEW order_items")


# -- key conversion (DESIGN, "Converting to another key") ----------------------------------------------

def test_two_updates_of_one_order_in_one_epoch_leave_one_row_with_the_second_item(conn, pg):
    shop(conn)
    conn.execute(f"CREATE SINK s FROM order_items WITH ({pg.options('order_items', type='upsert', primary_key='id', auto_create='true')})")
    assert conn.refresh("s") == conn.status()[0]["epoch"]
    assert sorted(pg.rows("order_items")) == view_rows(conn)
    conn.execute("UPDATE orders SET item_id = 2 WHERE id = 101")
    conn.execute("UPDATE orders SET item_id = 3 WHERE id = 101")
    conn.execute("FLUSH")  # FLUSH delivers sinks once, after the views
    assert pg.rows("order_items", "id, item_id, name") == [(101, 3, "pad"), (102, 2, "ink")] or \
        sorted(pg.rows("order_items", "id, item_id, name")) == [(101, 3, "pad"), (102, 2, "ink")]
    assert sorted(pg.rows("order_items")) == view_rows(conn)


def test_sink_as_select_plans_an_internal_view_and_drops_it_with_the_sink(conn, pg):
    shop(conn)
    conn.execute("CREATE SINK per_item AS SELECT item_id, sum(qty) AS total FROM orders GROUP BY item_id "
                 f"WITH ({pg.options('per_item', type='upsert', primary_key='item_id', auto_create='true')})")
    assert conn.execute("SHOW SINKS").fetchall() == [("per_item",)]
    assert conn.execute("SHOW MATERIALIZED VIEWS").fetchall() == [("order_items",)]  # the internal one is hidden
    conn.execute("INSERT INTO orders VALUES (103, 1, 2)")
    conn.execute("DELETE FROM orders WHERE id = 102")
    conn.execute("FLUSH")
    want = conn.execute("SELECT item_id, sum(qty) FROM orders GROUP BY item_id").fetchall()
    assert sorted(pg.rows("per_item")) == sorted(want) == [(1, 7)]
    # refreshing the sink advances its own query's view too (a caller refreshing only the tables)
    conn.execute("UPDATE orders SET qty = 10 WHERE id = 101")
    conn.barrier()
    conn.refresh("orders")
    conn.refresh("per_item")
    assert sorted(pg.rows("per_item")) == [(1, 12)]
    conn.execute("DROP SINK per_item")
    assert not any(r["name"].startswith("_sink_") for r in conn.status())


def test_sink_starts_from_the_snapshot_unless_told_not_to(conn, out):
    shop(conn)
    conn.execute(f"CREATE SINK full FROM orders WITH (connector = 'file', path = '{out / 'a'}', "
                 "type = 'upsert', primary_key = 'id', encode = 'jsonl')")
    conn.execute(f"CREATE SINK fresh FROM orders WITH (connector = 'file', path = '{out / 'b'}', "
                 "type = 'upsert', primary_key = 'id', encode = 'jsonl', snapshot = 'false')")
    conn.execute("INSERT INTO orders VALUES (103, 3, 1)")
    conn.execute("FLUSH")

    def ids(folder):
        return sorted(json.loads(line)["id"] for f in sorted(os.listdir(folder))
                      for line in (folder / f).read_text().splitlines())
    assert ids(out / "a") == [101, 102, 103]
    assert ids(out / "b") == [103]


# -- delivery is decoupled: FLUSH never fails for a sink; refresh raises after its retries ---------------

def test_unreachable_target_fails_neither_flush_nor_views_and_refresh_names_sink_and_target(conn, pg, secret_key):
    shop(conn)
    conn.execute(f"CREATE SINK s FROM order_items WITH ({pg.options('oi', type='upsert', primary_key='id', port='1')}, "
                 f"password = 'Zq9-secret', {FAST_RETRY})")
    conn.execute("INSERT INTO orders VALUES (103, 3, 4)")
    conn.execute("FLUSH")  # the sink cannot connect: FLUSH still returns, the view committed
    assert (103, 3, "pad", 4) in view_rows(conn)
    row = next(r for r in conn.status() if r["name"] == "s")
    assert row["retries"] == 1 and "port 1" in row["last_error"] and row["backlog_epochs"] > 0
    with pytest.raises(OperationalError) as e:
        conn.refresh("s")
    message = str(e.value)
    assert "'s'" in message and '"oi"' in message and "after 3 attempts" in message
    row = next(r for r in conn.status() if r["name"] == "s")
    assert row["retries"] == 4 and row["failing_since"] is not None and row["delivered_epoch"] == 0
    everything = message + repr(conn.status()) + repr(conn.execute("SHOW CREATE SINK s").fetchall())
    assert "Zq9-secret" not in everything and "***" in everything


def test_password_never_shown_in_errors_status_or_show(conn, pg, secret_key):
    role = f"{pg.name}_pw"
    pg.execute(f'CREATE ROLE "{role}" LOGIN PASSWORD \'right-Pw7\'')  # no rights on the schema
    try:
        shop(conn)
        conn.execute(f"CREATE SINK s FROM order_items WITH ({pg.options('oi', type='upsert', primary_key='id', user=role)}, "
                     "password = 'wrong-Pw7', retry.max_attempts = '1')")
        with pytest.raises(OperationalError) as e:
            conn.refresh("s")
        assert "permission denied" in str(e.value)
        shown = [str(e.value), repr(e.value), repr(conn.status()), repr(conn.execute("SHOW CREATE SINK s").fetchall()),
                 repr(conn.wh.get("s").sql)]
        for text in shown:
            assert "wrong-Pw7" not in text
    finally:
        pg.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_password_from_the_environment_stays_out_of_sql_catalog_and_status(conn, pg, monkeypatch):
    shop(conn)
    conn.execute(f"CREATE SINK s FROM order_items WITH ({pg.options('oi', type='upsert', primary_key='id', auto_create='true')}, "
                 "password = 'env:RW_TEST_SINK_PASSWORD', retry.max_attempts = '1')")
    with pytest.raises(OperationalError, match="RW_TEST_SINK_PASSWORD .* is not set"):
        conn.refresh("s")
    monkeypatch.setenv("RW_TEST_SINK_PASSWORD", "from-env-Pw9")
    conn.refresh("s")
    assert sorted(pg.rows("oi")) == view_rows(conn)
    catalog_files = [conn.wh.store.read_bytes(k).decode() for k in conn.wh.store.list("catalog/")]
    assert not any("from-env-Pw9" in text for text in catalog_files + [repr(conn.status())])


def test_constraint_violation_names_the_sink_the_target_and_the_rows_key(conn, pg):
    shop(conn)
    pg.execute(f'CREATE TABLE "{pg.name}".oi (id INT PRIMARY KEY, item_id INT, name TEXT, qty INT CHECK (qty < 50))')
    conn.execute(f"CREATE SINK s FROM order_items WITH ({pg.options('oi', type='upsert', primary_key='id')}, "
                 "retry.max_attempts = '2', retry.initial_backoff_ms = '1')")
    assert conn.refresh("s") > 0
    conn.execute("INSERT INTO orders VALUES (103, 1, 7), (104, 2, 99), (105, 3, 1)")
    conn.execute("FLUSH")
    with pytest.raises(IntegrityError) as e:
        conn.refresh("s")
    message = str(e.value)
    assert "sink 's'" in message and f'"{pg.name}"."oi"' in message and "key (id)=(104)" in message
    assert "oi_qty_check" in message
    assert sorted(pg.rows("oi", "id")) == [(101,), (102,)]  # nothing of the refused batch
    pg.execute(f'ALTER TABLE "{pg.name}".oi DROP CONSTRAINT oi_qty_check')
    conn.refresh("s")
    assert sorted(pg.rows("oi")) == view_rows(conn)


def test_sink_keeps_its_inputs_change_files_until_it_delivered_them(conn, out):
    shop(conn)
    conn.execute(f"CREATE SINK f FROM order_items WITH (connector = 'file', path = '{out}', "
                 "type = 'upsert', primary_key = 'id')")
    conn.refresh("f")  # the snapshot
    conn.wh.options = dataclasses.replace(conn.wh.options, flush_delivers_sinks=False)
    for i in range(4):
        conn.execute(f"UPDATE orders SET qty = {10 + i} WHERE id = 101")
        conn.execute("FLUSH")
    status = {r["name"]: r for r in conn.status()}
    assert status["f"]["backlog_epochs"] == 4 and status["f"]["backlog_rows"] > 0
    assert len(conn.wh.manifest("order_items").changelog) >= 4  # held for the sink
    conn.refresh("f")
    conn.execute("UPDATE orders SET qty = 1 WHERE id = 101")
    conn.execute("FLUSH")  # the view's next commit may now drop the files the sink passed
    assert len(conn.wh.manifest("order_items").changelog) <= 1
    # the files hold the whole history; the newest change per key is the view
    latest = {}
    for name in sorted(os.listdir(out)):
        for r in pq.read_table(out / name).to_pylist():
            latest[r["id"]] = r
    conn.refresh("f")
    for name in sorted(os.listdir(out)):
        for r in pq.read_table(out / name).to_pylist():
            latest[r["id"]] = r
    got = sorted((r["id"], r["item_id"], r["name"], r["qty"]) for r in latest.values() if r["_op"] == "upsert")
    assert got == view_rows(conn)


# -- file sinks -------------------------------------------------------------------------------------

@pytest.mark.parametrize("encode", ["parquet", "jsonl"])
def test_file_sink_writes_one_file_per_batch_named_by_epochs(conn, out, encode):
    conn.execute("CREATE TABLE events (id INT, kind VARCHAR, amount NUMERIC(10,2), at TIMESTAMP) APPEND ONLY")
    conn.execute(f"CREATE SINK e FROM events WITH (connector = 'file', path = '{out}', encode = '{encode}', "
                 "type = 'append-only')")
    for epoch in range(3):
        conn.execute(f"INSERT INTO events VALUES ({epoch}, 'k{epoch}', {epoch}.25, TIMESTAMP '2026-01-0{epoch + 1} 10:00:00'),"
                     f" ({epoch + 10}, NULL, NULL, NULL)")
        conn.execute("FLUSH")
    names = sorted(os.listdir(out))
    assert len(names) == 3 and all(n.startswith("e-") and n.endswith("." + encode) for n in names)
    ranges = [tuple(int(x) for x in n.split(".")[0].split("-")[1:]) for n in names]
    assert all(a < b for a, b in ranges) and [r[0] for r in ranges[1:]] == [r[1] for r in ranges[:-1]]
    if encode == "parquet":
        got = [tuple(r.values()) for n in names for r in pq.read_table(out / n).to_pylist()]
        got = [(i, k, float(a) if a is not None else None, str(t) if t else None) for i, k, a, t in got]
    else:
        got = [tuple(json.loads(line).values()) for n in names for line in (out / n).read_text().splitlines()]
        got = [(i, k, float(a) if a is not None else None, t.replace("T", " ") if t else None) for i, k, a, t in got]
    want = [(i, k, float(a) if a is not None else None, str(t) if t else None)
            for i, k, a, t in conn.execute("SELECT * FROM events").fetchall()]
    assert sorted(got, key=str) == sorted(want, key=str)
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_force_append_only_drops_deletes_and_writes_updates_as_inserts(conn, out):
    shop(conn)
    conn.execute(f"CREATE SINK f FROM orders WITH (connector = 'file', path = '{out}', encode = 'jsonl', "
                 "type = 'append-only', force_append_only = 'true', snapshot = 'false')")
    conn.execute("UPDATE orders SET qty = 9 WHERE id = 101")
    conn.execute("DELETE FROM orders WHERE id = 102")
    conn.execute("FLUSH")
    rows = [json.loads(line) for f in os.listdir(out) for line in (out / f).read_text().splitlines()]
    assert rows == [{"id": 101, "item_id": 1, "qty": 9}]


# -- CREATE SINK ... INTO table -------------------------------------------------------------------------

def test_sink_into_a_table_stages_upserts_and_deletes_by_its_key(conn):
    shop(conn)
    conn.execute("CREATE TABLE latest (id INT PRIMARY KEY, name VARCHAR, qty INT, note VARCHAR)")
    with pytest.raises(ProgrammingError, match="'latest' has no column 'item_id'"):
        conn.execute("CREATE SINK copy INTO latest FROM order_items")
    conn.execute("CREATE SINK copy INTO latest AS SELECT id, name, qty FROM order_items")
    conn.execute("UPDATE orders SET item_id = 2 WHERE id = 101")
    conn.execute("UPDATE orders SET item_id = 3 WHERE id = 101")
    conn.execute("DELETE FROM orders WHERE id = 102")
    conn.execute("CREATE MATERIALIZED VIEW latest_qty AS SELECT sum(qty) AS total FROM latest")
    conn.execute("FLUSH")  # the sink stages its rows; the same FLUSH seals and applies them, downstream too
    assert conn.execute("SELECT id, name, qty, note FROM latest").fetchall() == [(101, "pad", 5, None)]
    assert conn.execute("SELECT total FROM latest_qty").fetchall() == [(5,)]
    conn.execute("DROP MATERIALIZED VIEW latest_qty")
    with pytest.raises(IntegrityError, match="copy"):
        conn.execute("DROP TABLE latest")
    conn.execute("CREATE TABLE loop_back (id INT PRIMARY KEY, qty INT)")
    conn.execute("CREATE MATERIALIZED VIEW lb AS SELECT id, qty FROM loop_back")
    with pytest.raises(ProgrammingError, match="feed the sink its own output"):
        conn.execute("CREATE SINK loop INTO loop_back FROM lb")


# -- retry policy --------------------------------------------------------------------------------------

def test_backoff_grows_exponentially_with_jitter_up_to_the_cap():
    policy = RetryPolicy(max_attempts=10, initial_seconds=0.1, max_seconds=2.0)
    rng = random.Random(7)
    for n in range(1, 10):
        step = min(2.0, 0.1 * 2 ** (n - 1))
        delays = [policy.delay(n, rng) for _ in range(200)]
        assert all(step / 2 <= d <= step for d in delays)
        assert max(delays) - min(delays) > step / 4  # jittered, not fixed


def test_status_keys_for_sinks(conn, out):
    shop(conn)
    conn.execute(f"CREATE SINK f FROM orders WITH (connector = 'file', path = '{out}', type = 'upsert', "
                 "primary_key = 'id')")
    conn.execute("FLUSH")
    row = next(r for r in conn.status() if r["name"] == "f")
    assert row["kind"] == "sink" and row["delivered_epoch"] == row["epoch"] == conn.wh.manifest("orders").epoch
    assert row["backlog_epochs"] == 0 and row["backlog_rows"] == 0 and row["retries"] == 0
    assert row["last_error"] is None and row["last_success_at"] is not None and row["rows_delivered"] == 2


def test_a_new_connection_resumes_delivery_where_the_last_one_committed(warehouse, out):
    with dagster_rw.connect(warehouse) as c1:
        shop(c1)
        c1.execute(f"CREATE SINK f FROM orders WITH (connector = 'file', path = '{out}', encode = 'jsonl', "
                   "type = 'upsert', primary_key = 'id')")
        c1.execute("FLUSH")
    with dagster_rw.connect(warehouse) as c2:
        c2.execute("INSERT INTO orders VALUES (103, 3, 3)")
        c2.execute("FLUSH")
    lines = [json.loads(line) for f in sorted(os.listdir(out)) for line in (out / f).read_text().splitlines()]
    assert [r["id"] for r in lines] == [101, 102, 103]  # each change once: no re-delivery, no gap


def test_one_deliverer_per_sink_and_a_dead_holders_lease_is_taken_over(conn, out):
    import socket
    import subprocess
    import sys
    import time

    from dagster_rw.sinks.lease import lease_key

    shop(conn)
    conn.execute(f"CREATE SINK f FROM orders WITH (connector = 'file', path = '{out}', type = 'upsert', "
                 "primary_key = 'id')")

    def lease_of(pid):
        return json.dumps({"host": socket.gethostname(), "pid": pid, "token": "other",
                           "expires": time.time() + 600}).encode()

    conn.wh.store.write_bytes(lease_key("f"), lease_of(os.getpid()))  # a live holder
    conn.execute("FLUSH")  # tries once, finds the lease taken, does not fail
    assert os.listdir(out) == []
    with pytest.raises(OperationalError, match=f"being delivered by process {os.getpid()}"):
        conn.refresh("f")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    conn.wh.store.write_bytes(lease_key("f"), lease_of(int(gone.stdout)))  # its holder has exited
    assert conn.refresh("f") == conn.wh.manifest("orders").epoch
    assert len(os.listdir(out)) == 1 and not conn.wh.store.exists(lease_key("f"))


@pytest.mark.parametrize("with_binary", [False, True])
def test_postgres_target_keeps_every_type_and_tricky_text_exactly(conn, pg, with_binary):
    extra = ", d INTERVAL" if with_binary else ""
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR, n NUMERIC(12,3), f DOUBLE PRECISION, r REAL, "
                 f"b BOOLEAN, dt DATE, ts TIMESTAMP, tz TIMESTAMPTZ, tm TIME, big BIGINT, small SMALLINT{extra})")
    interval = ", INTERVAL '1 day 02:03:04'" if with_binary else ""
    null_interval = ", NULL" if with_binary else ""
    conn.execute("INSERT INTO t VALUES "
                 f"(1, 'a,b \"quoted\"\nnew line', 1.5, 0.1, 2.5, true, DATE '2026-02-28', "
                 f"TIMESTAMP '2026-02-28 23:59:59.123456', TIMESTAMPTZ '2026-02-28 10:00:00+00', TIME '12:34:56', "
                 f"9007199254740993, -32768{interval}), "
                 f"(2, '', -0.001, -1e300, NULL, false, NULL, NULL, NULL, NULL, NULL, NULL{null_interval}), "
                 f"(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL{null_interval}), "
                 f"(4, E'back\\\\slash \\t tab', 0, 3.141592653589793, 1.25, true, DATE '1999-12-31', "
                 f"TIMESTAMP '1999-12-31 00:00:00', TIMESTAMPTZ '1999-12-31 23:00:00+00', TIME '00:00:00', 0, 0"
                 f"{null_interval})")
    conn.execute(f"CREATE SINK s FROM t WITH ({pg.options('t', type='upsert', primary_key='id', auto_create='true')})")
    conn.execute("FLUSH")
    got = sorted(pg.rows("t"))
    want = sorted(conn.execute("SELECT * FROM t").fetchall())
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g == tuple(w), (g, w)
