"""Steps and batch reads over Spark Connect (`spark="sc://host:port"`), against a real Connect server.

The server (conftest's spark_connect_url) runs with a /tmp of its own, so it reads the warehouse
(a folder under /var/tmp) as a cluster reads a shared mount; the client runs in its own process so
it does not meet this run's classic Spark session.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture
def connect_url(spark_connect_url):
    return spark_connect_url


CLIENT = textwrap.dedent('''
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    sys.path.insert(0, {tests!r})
    import dagster_rw
    from oracle import Oracle, assert_same

    conn = dagster_rw.connect({warehouse!r}, spark={url!r}, engine="spark")
    oracle = Oracle()
    statements = [
        "CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)",
        "CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)",
        "INSERT INTO t VALUES (1, 1, 10), (2, 1, 30), (3, 2, 5)",
        "INSERT INTO d VALUES (1, 'one'), (2, 'two')",
    ]
    for s in statements:
        conn.execute(s)
        oracle.execute(s) if s.startswith("CREATE") else oracle.upsert(s.split()[2], s.split("VALUES", 1)[1])
    view = "SELECT d.name, count(*) AS n, max(t.v) AS mx FROM t JOIN d ON t.k = d.k GROUP BY d.name"
    conn.execute("CREATE MATERIALIZED VIEW m AS " + view)
    oracle.execute("CREATE VIEW m AS " + view)
    conn.execute("DELETE FROM t WHERE id = 2")
    oracle.execute("DELETE FROM t WHERE id = 2")
    conn.execute("FLUSH")
    assert_same(conn.execute("SELECT * FROM m").fetchall(), oracle.rows("SELECT * FROM m"), "m over Spark Connect")
    engines = sorted({{s["engine"] for s in conn.status() if "engine" in s}})
    print(json.dumps({{"engines": engines, "rows": sorted(conn.execute("SELECT * FROM m").fetchall())}}))
''')


def test_steps_and_queries_run_over_spark_connect(tmp_path, connect_url):
    script = tmp_path / "client.py"
    script.write_text(CLIENT.format(tests=os.path.dirname(__file__), warehouse=str(tmp_path / "wh"),
                                    url=connect_url))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["engines"] == ["spark"]
    assert result["rows"] == [["one", 1, 10], ["two", 1, 5]]


KAFKA_CLIENT = textwrap.dedent('''
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    sys.path.insert(0, {root!r})
    import dagster_rw

    conn = dagster_rw.connect({warehouse!r}, spark={url!r}, engine="spark", source_split_records=5)
    conn.execute("CREATE TABLE k (id INT, v INT) WITH (connector = 'kafka', topic = {topic!r}, "
                 "properties.bootstrap.server = {bootstrap!r}) FORMAT PLAIN ENCODE JSON")
    conn.execute("FLUSH")
    print(json.dumps(sorted(conn.execute("SELECT id, v FROM k").fetchall())))
''')


def test_kafka_splits_are_read_by_spark_connect_tasks(tmp_path, connect_url, kafka_broker):
    import json
    import uuid

    topic = f"sc-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=2)
    for p in range(2):
        kafka_broker.produce(topic, [json.dumps({"id": p * 100 + i, "v": i}) for i in range(12)], partition=p)
    script = tmp_path / "kafka_client.py"
    script.write_text(KAFKA_CLIENT.format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                          warehouse=str(tmp_path / "wh"), url=connect_url, topic=topic,
                                          bootstrap=kafka_broker.bootstrap))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows == sorted([[p * 100 + i, i] for p in range(2) for i in range(12)])
