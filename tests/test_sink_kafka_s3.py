"""Kafka and S3 targets, real ones: the Tansu broker (read back with kafka-python) and moto's S3 server."""
from __future__ import annotations

import io
import json
import uuid

import pyarrow.parquet as pq
import pytest

import dagster_rw


def shop(conn):
    conn.execute("CREATE TABLE orders (id INT PRIMARY KEY, item_id INT, qty INT)")
    conn.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR)")
    conn.execute("CREATE MATERIALIZED VIEW order_items AS "
                 "SELECT o.id, o.item_id, i.name, o.qty FROM orders o JOIN items i ON o.item_id = i.id")
    conn.execute("INSERT INTO items VALUES (1, 'pen'), (2, 'ink'), (3, 'pad')")
    conn.execute("INSERT INTO orders VALUES (101, 1, 5), (102, 2, 1), (103, 3, 2)")
    conn.execute("FLUSH")


def test_kafka_upsert_sink_keys_messages_by_primary_key_and_deletes_as_tombstones(conn, kafka_broker):
    topic = f"sink-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2)
    shop(conn)
    conn.execute(f"CREATE SINK k FROM order_items WITH (connector = 'kafka', topic = '{topic}', "
                 f"properties.bootstrap.server = '{kafka_broker.bootstrap}', primary_key = 'id') "
                 "FORMAT UPSERT ENCODE JSON")
    conn.refresh("k")  # the snapshot, in a batch of its own
    conn.execute("UPDATE orders SET item_id = 2 WHERE id = 101")
    conn.execute("UPDATE orders SET item_id = 3 WHERE id = 101")
    conn.execute("DELETE FROM orders WHERE id = 102")
    conn.execute("FLUSH")
    records = kafka_broker.consume_all(topic)
    assert all(r.key is not None for r in records)
    # a compacted reading of the topic (the newest message per key, tombstones removing) is the view
    latest = {}
    for r in sorted(records, key=lambda r: r.offset):  # per key, one partition: offsets order its messages
        latest[r.key] = r.value
    table = {json.loads(k)["id"]: json.loads(v) for k, v in latest.items() if v is not None}
    view = conn.execute("SELECT id, item_id, name, qty FROM order_items").fetchall()
    assert sorted((r["id"], r["item_id"], r["name"], r["qty"]) for r in table.values()) == sorted(view)
    assert any(r.value is None and json.loads(r.key) == {"id": 102} for r in records)
    assert len(records) == 3 + 2  # the snapshot, then one change per key: 101 upserted, 102 deleted


def test_kafka_plain_sink_writes_inserts_of_an_append_only_table(conn, kafka_broker):
    topic = f"sink-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic)
    conn.execute("CREATE TABLE clicks (id INT, page VARCHAR, at TIMESTAMP) APPEND ONLY")
    conn.execute(f"CREATE SINK k FROM clicks WITH (connector = 'kafka', topic = '{topic}', "
                 f"properties.bootstrap.server = '{kafka_broker.bootstrap}') FORMAT PLAIN ENCODE JSON")
    for epoch in range(3):
        conn.execute(f"INSERT INTO clicks VALUES ({epoch}, '/p{epoch}', TIMESTAMP '2026-05-0{epoch + 1} 12:00:00'), "
                     f"({epoch + 100}, NULL, NULL)")
        conn.execute("FLUSH")
    records = kafka_broker.consume_all(topic)
    got = sorted((json.loads(r.value)["id"], json.loads(r.value)["page"], json.loads(r.value)["at"]) for r in records)
    want = sorted((i, p, t.isoformat() if t else None) for i, p, t in conn.execute("SELECT * FROM clicks").fetchall())
    assert got == want and all(r.key is None for r in records)


def test_kafka_sink_to_an_unreachable_broker_reports_it_and_views_go_on(conn):
    shop(conn)
    conn.execute("CREATE SINK k FROM order_items WITH (connector = 'kafka', topic = 't', "
                 "properties.bootstrap.server = '127.0.0.1:1', properties.bootstrap.timeout.ms = '500', "
                 "primary_key = 'id', retry.max_attempts = '1') "
                 "FORMAT UPSERT ENCODE JSON")
    conn.execute("INSERT INTO orders VALUES (104, 1, 1)")
    conn.execute("FLUSH")
    row = next(r for r in conn.status() if r["name"] == "k")
    assert row["retries"] == 1 and "127.0.0.1:1" in row["last_error"] and row["delivered_epoch"] == 0
    assert (104, 1, "pen", 1) in conn.execute("SELECT * FROM order_items").fetchall()


@pytest.fixture(scope="module")
def s3():
    from s3_server import MotoS3

    with MotoS3() as server:
        server.create_bucket("sinks")
        yield server


@pytest.mark.s3
@pytest.mark.parametrize("encode", ["parquet", "jsonl"])
def test_file_sink_on_s3_writes_whole_files_named_by_epoch_range(conn, s3, encode):
    prefix = f"out-{uuid.uuid4().hex[:8]}"
    shop(conn)
    conn.execute(f"CREATE SINK f FROM order_items WITH (connector = 'file', path = 's3://sinks/{prefix}', "
                 f"encode = '{encode}', type = 'upsert', primary_key = 'id')")
    conn.refresh("f")  # the snapshot: the first file
    conn.execute("UPDATE orders SET qty = 50 WHERE id = 103")
    conn.execute("DELETE FROM orders WHERE id = 102")
    conn.execute("FLUSH")
    client = s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="sinks", Prefix=prefix + "/")["Contents"])
    assert len(keys) == 2 and all(k.split("/")[-1].startswith("f-") and k.endswith(encode) for k in keys)
    latest = {}
    for key in keys:
        body = client.get_object(Bucket="sinks", Key=key)["Body"].read()
        rows = pq.read_table(io.BytesIO(body)).to_pylist() if encode == "parquet" else \
            [json.loads(line) for line in body.decode().splitlines()]
        for r in rows:
            latest[r["id"]] = r
    got = sorted((r["id"], r["item_id"], r["name"], r["qty"]) for r in latest.values() if r["_op"] == "upsert")
    assert got == sorted(conn.execute("SELECT * FROM order_items").fetchall())
    assert latest[102]["_op"] == "delete"


def test_sink_in_a_warehouse_on_s3_delivers_to_postgres(s3):
    from pg_target import PgSchema

    pg = PgSchema()
    try:
        with dagster_rw.connect(s3.url("sinks")) as conn:
            shop(conn)
            conn.execute(f"CREATE SINK s FROM order_items WITH ({pg.options('oi', type='upsert', primary_key='id', auto_create='true')})")
            conn.execute("UPDATE orders SET item_id = 1 WHERE id = 103")
            conn.execute("FLUSH")
            assert sorted(pg.rows("oi")) == sorted(conn.execute("SELECT * FROM order_items").fetchall())
    finally:
        pg.drop()
