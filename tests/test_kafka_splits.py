"""Large source steps read their offset ranges as splits in parallel Spark tasks; the result is the
same as the in-process read, record for record, bad records and bad values included."""
from __future__ import annotations

import json
import uuid
import warnings

import dagster_rw
from dagster_rw.sources.splits import cut

warnings.filterwarnings("ignore")


def test_offset_ranges_are_cut_into_contiguous_splits():
    ranges = {0: (5, 27), 2: (0, 3), 1: (4, 4)}
    splits = cut(ranges, 10)
    assert splits == [(0, 5, 15), (0, 15, 25), (0, 25, 27), (2, 0, 3)]
    for p, (start, end) in ranges.items():
        mine = [s for s in splits if s[0] == p]
        assert sum(e - s for _, s, e in mine) == end - start
        assert all(a[2] == b[1] for a, b in zip(mine, mine[1:]))


def test_spark_splits_read_the_same_records_as_the_in_process_path(kafka_broker, spark, tmp_path):
    topic = f"s-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=3)
    for p in range(3):
        values = [json.dumps({"id": p * 1000 + i, "v": i * p}) for i in range(40 + p)]
        values[7] = '{"id": "bad"'  # one bad record per partition, at offset 7
        values[12] = json.dumps({"id": p * 1000 + 12, "v": "twelve"})  # kept, v NULL
        kafka_broker.produce(topic, values, partition=p)
    ddl = (f"CREATE TABLE t (id INT, v BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
           f"properties.bootstrap.server = '{kafka_broker.bootstrap}', epoch.max.records.per.partition = '30') "
           "FORMAT PLAIN ENCODE JSON")
    results = []
    for engine in ("spark", "duckdb"):
        conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine, source_split_records=9)
        conn.execute(ddl)
        conn.flush()  # 30 records per partition: 4 splits each on Spark
        conn.flush()  # the rest
        assert conn.pending_inputs() == {}
        assert conn.status()[0]["engine"] == "duckdb"  # the commit is in-process either way
        results.append((sorted(conn.execute("SELECT id, v FROM t").fetchall()),
                        conn.execute('SELECT "partition", "offset", raw_value FROM rw_source_errors ORDER BY 1, 2').fetchall()))
    assert results[0] == results[1]
    rows, errors = results[0]
    assert len(rows) == 3 * 39 + 3 and all((p * 1000 + 12, None) in rows for p in range(3))
    assert errors == [e for p in range(3) for e in
                      [(p, 7, '{"id": "bad"'), (p, 12, json.dumps({"id": p * 1000 + 12, "v": "twelve"}))]]


def test_stream_operators_give_the_same_answers_on_spark(kafka_broker, spark, tmp_path):
    """EMIT ON WINDOW CLOSE, the temporal join and HOP run as Spark steps too, with equal results."""
    rounds = [[(1, 5, 1), (2, 7, 3), (1, 1, 12)], [(2, 4, 14), (3, 9, 25), (1, 2, 8)]]
    answers = []
    for engine in ("spark", "duckdb"):
        topic = f"o-{uuid.uuid4().hex[:10]}"  # each warehouse its own topic, fed the same rounds
        kafka_broker.create_topic(topic, partitions=2)
        conn = dagster_rw.connect(str(tmp_path / engine), spark=spark, engine=engine)
        conn.execute(f"CREATE SOURCE ev (k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '3' SECOND) "
                     f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = "
                     f"'{kafka_broker.bootstrap}') FORMAT PLAIN ENCODE JSON")
        conn.execute("CREATE TABLE dim (k INT PRIMARY KEY, name VARCHAR)")
        conn.execute("INSERT INTO dim VALUES (1, 'one'), (2, 'two')")
        conn.execute("CREATE MATERIALIZED VIEW closed AS SELECT window_start, count(*) AS n, max(v) AS mx "
                     "FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE")
        conn.execute("CREATE MATERIALIZED VIEW named AS SELECT e.v, d.name FROM ev e "
                     "LEFT JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() d ON e.k = d.k")
        conn.execute("CREATE MATERIALIZED VIEW hops AS SELECT window_end, sum(v) AS sv "
                     "FROM HOP(ev, ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY window_end")
        answers.append([])
        for i, batch in enumerate(rounds):
            kafka_broker.produce(topic, [json.dumps({"k": k, "v": v, "ts": f"2024-03-01 00:00:{s:02d}"})
                                         for k, v, s in batch], partition=i % 2)
            if i == 1:
                conn.execute("UPDATE dim SET name = 'ONE' WHERE k = 1")
            conn.barrier()
            for name in ("ev", "dim", "closed", "named", "hops"):
                conn.refresh(name)  # one epoch at a time, as each round was produced
            # batch queries read on Spark return aware UTC timestamps: compare the instants
            answers[-1].append({v: sorted((tuple(x.replace(tzinfo=None) if hasattr(x, "tzinfo") else x for x in r)
                                           for r in conn.execute(f"SELECT * FROM {v}").fetchall()), key=str)
                                for v in ("closed", "named", "hops")})
        assert {s["engine"] for s in conn.status() if s["name"] in ("closed", "named", "hops")} == {engine}
    assert answers[0] == answers[1]
    assert answers[1][-1]["closed"] and answers[1][-1]["named"]
