"""Secrets: CREATE SECRET / DROP SECRET / SHOW SECRETS, `option = secret name` in sinks and sources,
literal passwords encrypted or refused, and no clear value anywhere in the warehouse folder, in
errors, status, SHOW CREATE SINK or logs."""
from __future__ import annotations

import logging
import os

import pytest
from cryptography.fernet import Fernet
from pg_target import pg_schema

import dagster_rw
from dagster_rw.errors import Error, IntegrityError, OperationalError, ProgrammingError
from dagster_rw.storage.secrets import KEY_VARIABLE

CLEAR = "Clear-Pw-7f3a9"


@pytest.fixture
def pg():
    yield from pg_schema()


@pytest.fixture
def key(monkeypatch):
    value = Fernet.generate_key().decode()
    monkeypatch.setenv(KEY_VARIABLE, value)
    return value


@pytest.fixture
def no_key(monkeypatch):
    monkeypatch.delenv(KEY_VARIABLE, raising=False)


def everything_stored(warehouse: str) -> bytes:
    """Every byte under the warehouse folder (catalog, log, manifests, data, sink health)."""
    out = []
    for root, _, files in os.walk(warehouse):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out.append(fh.read())
    assert out, "the warehouse folder is empty"
    return b"\n".join(out)


def shop(conn):
    conn.execute("CREATE TABLE orders (id INT PRIMARY KEY, qty INT)")
    conn.execute("INSERT INTO orders VALUES (1, 5), (2, 7)")
    conn.execute("FLUSH")


def test_create_secret_without_a_key_is_refused_saying_how_to_set_one(conn, no_key):
    version = conn.wh.catalog(reload=True).version
    with pytest.raises(ProgrammingError) as e:
        conn.execute(f"CREATE SECRET pw WITH (backend = 'meta') AS '{CLEAR}'")
    assert KEY_VARIABLE in str(e.value) and "Fernet.generate_key" in str(e.value)
    assert CLEAR not in str(e.value)
    assert conn.wh.catalog(reload=True).version == version
    assert conn.execute("SHOW SECRETS").fetchall() == []


def test_secret_feeds_a_postgres_sink_and_is_stored_nowhere_in_clear(conn, warehouse, pg, key, caplog):
    caplog.set_level(logging.DEBUG)
    shop(conn)
    conn.execute(f"CREATE SECRET pg_pw WITH (backend = 'meta') AS '{CLEAR}'")
    with pytest.raises(ProgrammingError, match='secret "pg_pw" already exists'):
        conn.execute("CREATE SECRET pg_pw WITH (backend = 'meta') AS 'other'")
    conn.execute("CREATE SECRET IF NOT EXISTS pg_pw AS 'other'")  # (backend defaults to meta)
    assert conn.execute("SHOW SECRETS").fetchall() == [("pg_pw",)]
    conn.execute(f"CREATE SINK s FROM orders WITH ({pg.options('o', type='upsert', primary_key='id', auto_create='true')},"
                 " password = secret pg_pw)")
    assert conn.refresh("s") > 0
    assert sorted(pg.rows("o")) == [(1, 5), (2, 7)]
    target = conn.wh.sink_targets["s"][1]
    assert target.conn.info.password == CLEAR  # resolved at delivery, from the encrypted catalog entry
    shown = conn.execute("SHOW CREATE SINK s").fetchall()
    assert "password = secret pg_pw" in shown[0][1]
    assert conn.wh.get("s").options["password"] == "secret:pg_pw"
    conn.execute("INSERT INTO orders VALUES (3, 1)")
    conn.execute("FLUSH")
    conn.refresh("s")
    assert sorted(pg.rows("o")) == [(1, 5), (2, 7), (3, 1)]
    # a second process (a fresh connection) reads the same secret from the catalog
    conn.wh.close_sink_targets()
    with dagster_rw.connect(warehouse) as other:
        other.execute("INSERT INTO orders VALUES (4, 2)")
        other.execute("FLUSH")
        other.refresh("s")
        texts = repr(other.status()) + repr(other.execute("SHOW CREATE SINK s").fetchall())
    assert sorted(pg.rows("o"))[-1] == (4, 2)
    stored = everything_stored(warehouse)
    assert CLEAR.encode() not in stored and b"pg_pw" in stored
    assert CLEAR not in texts + repr(shown) + caplog.text


def test_literal_password_is_refused_without_a_key_and_encrypted_with_one(conn, warehouse, pg, monkeypatch):
    shop(conn)
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    version = conn.wh.catalog(reload=True).version
    with pytest.raises(ProgrammingError) as e:
        conn.execute(f"CREATE SINK s FROM orders WITH ({pg.options('o', type='upsert', primary_key='id')}, "
                     f"password = '{CLEAR}')")
    message = str(e.value)
    assert "CREATE SECRET" in message and "env:" in message and KEY_VARIABLE in message and CLEAR not in message
    assert conn.wh.catalog(reload=True).version == version and "s" not in conn.wh.catalog().objects
    assert CLEAR.encode() not in everything_stored(warehouse)

    monkeypatch.setenv(KEY_VARIABLE, Fernet.generate_key().decode())
    conn.execute(f"CREATE SINK s FROM orders WITH ({pg.options('o', type='upsert', primary_key='id', auto_create='true')}, "
                 f"password = '{CLEAR}')")
    stored_option = conn.wh.get("s").options["password"]
    assert stored_option.startswith("encrypted:") and CLEAR not in stored_option
    conn.refresh("s")
    assert conn.wh.sink_targets["s"][1].conn.info.password == CLEAR
    assert sorted(pg.rows("o")) == [(1, 5), (2, 7)]
    assert "'***'" in conn.execute("SHOW CREATE SINK s").fetchall()[0][1]
    assert CLEAR.encode() not in everything_stored(warehouse)


def test_a_value_taken_for_a_reference_is_refused(conn, key, tmp_path):
    shop(conn)
    with pytest.raises(ProgrammingError, match="cannot start with"):
        conn.execute(f"CREATE SINK s FROM orders WITH (connector = 'file', path = 'secret:x', type = 'upsert', "
                     "primary_key = 'id')")


def test_delivery_with_a_wrong_key_fails_naming_the_secret_not_its_value(conn, warehouse, pg, key, monkeypatch):
    shop(conn)
    conn.execute(f"CREATE SECRET pg_pw AS '{CLEAR}'")
    conn.execute(f"CREATE SINK s FROM orders WITH ({pg.options('o', type='upsert', primary_key='id', auto_create='true')},"
                 " password = secret pg_pw, retry.max_attempts = '1')")
    monkeypatch.setenv(KEY_VARIABLE, Fernet.generate_key().decode())
    with pytest.raises(OperationalError) as e:
        conn.refresh("s")
    assert 'secret "pg_pw" cannot be decrypted' in str(e.value) and CLEAR not in str(e.value)
    # rotation: the new key first, the old one after it
    monkeypatch.setenv(KEY_VARIABLE, f"{Fernet.generate_key().decode()},{key}")
    conn.refresh("s")
    assert sorted(pg.rows("o")) == [(1, 5), (2, 7)]
    monkeypatch.delenv(KEY_VARIABLE)
    conn.wh.close_sink_targets()
    conn.execute("INSERT INTO orders VALUES (3, 1)")
    conn.execute("FLUSH")
    with pytest.raises(OperationalError, match=KEY_VARIABLE):
        conn.refresh("s")


def test_drop_secret_refuses_while_a_sink_uses_it(conn, key, pg):
    shop(conn)
    conn.execute(f"CREATE SECRET tok AS '{CLEAR}'")
    conn.execute(f"CREATE SINK s FROM orders WITH ({pg.options('o', type='upsert', primary_key='id')}, "
                 "password = secret tok)")
    with pytest.raises(IntegrityError, match='cannot drop secret "tok".*\\(s\\)'):
        conn.execute("DROP SECRET tok")
    with pytest.raises(ProgrammingError, match='secret "nope" does not exist'):
        conn.execute("CREATE SINK t FROM orders WITH (connector = 'file', path = '/x', type = 'upsert', "
                     "primary_key = 'id', password = secret nope)")
    conn.execute("DROP SINK s")
    conn.execute("DROP SECRET tok")
    conn.execute("DROP SECRET IF EXISTS tok")
    with pytest.raises(ProgrammingError, match='secret "tok" does not exist'):
        conn.execute("DROP SECRET tok")
    assert conn.execute("SHOW SECRETS").fetchall() == []


def test_secrets_survive_other_ddl_and_other_processes(conn, warehouse, key):
    conn.execute("CREATE SECRET a AS 'va'")
    conn.execute("CREATE TABLE t (x INT)")  # a catalog version that does not mention secrets
    conn.execute("CREATE SECRET b AS 'vb'")
    conn.execute("DROP TABLE t")
    with dagster_rw.connect(warehouse) as other:
        assert other.execute("SHOW SECRETS").fetchall() == [("a",), ("b",)]


def test_source_options_take_secret_references_and_keep_no_literal(conn, warehouse, no_key):
    base = ("CREATE SOURCE src (a INT) WITH (connector = 'kafka', topic = 't', "
            "properties.bootstrap.server = '127.0.0.1:1', {}) FORMAT PLAIN ENCODE JSON")
    with pytest.raises(ProgrammingError, match='secret "sasl_pw" does not exist'):
        conn.execute(base.format("properties.sasl.password = secret sasl_pw"))
    with pytest.raises(ProgrammingError) as e:
        conn.execute(base.format(f"properties.sasl.password = '{CLEAR}'"))
    assert "CREATE SECRET" in str(e.value) and CLEAR not in str(e.value)
    assert "src" not in conn.wh.catalog(reload=True).objects


@pytest.mark.parametrize("sql", [
    f"CREATE SECRET s WITH (backend = 'vault') AS '{CLEAR}'",
    f"CREATE SECRET s WITH (backend = 'meta', colour = 'red') AS '{CLEAR}'",
    f"CREATE SECRET s AS '{CLEAR}' extra",
    f"CREATE SECRET s AS '{CLEAR}",
    f"CREATE SECRET s '{CLEAR}'",
])
def test_malformed_create_secret_is_refused_without_quoting_the_value(conn, key, sql):
    with pytest.raises(Error) as e:
        conn.execute(sql)
    assert isinstance(e.value, ProgrammingError) and CLEAR not in str(e.value)


def test_a_sql_project_does_not_declare_secrets(tmp_path):
    from dagster_rw.dagster.project import RwProject

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.sql").write_text(f"CREATE SECRET pw AS '{CLEAR}';\nCREATE TABLE t (a INT);\n")
    with pytest.raises(ProgrammingError) as e:
        RwProject(tmp_path / "p").declared()
    assert "does not declare secrets" in str(e.value) and CLEAR not in str(e.value)


def test_a_sql_project_refers_to_secrets_by_name(tmp_path, no_key):
    from dagster_rw.dagster.project import RwProject

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.sql").write_text(
        "CREATE TABLE t (a INT PRIMARY KEY);\n"
        "CREATE SINK s FROM t WITH (connector = 'postgres', table = 'x', type = 'upsert', primary_key = 'a', "
        "password = secret pg_pw);\n")
    objects = RwProject(tmp_path / "p").objects
    assert objects["s"].deps == ["t"] and "password = secret pg_pw" in objects["s"].sql
