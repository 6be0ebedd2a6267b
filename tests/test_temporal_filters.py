"""Temporal filters (RisingWave's `WHERE ts > now() - INTERVAL ...`: rows that leave a view as time
passes) are refused at CREATE by that name, naming the view, in every clause that can hold one;
`now()` elsewhere in a view is refused as a time that would never be updated; a batch SELECT (over
a table or a view) may still filter by now()."""
from __future__ import annotations

import pytest

import dagster_rw

SCHEMA = "CREATE TABLE events (id INT PRIMARY KEY, ts TIMESTAMP, v INT)"


@pytest.mark.parametrize("query", [
    "SELECT * FROM events WHERE ts > now() - INTERVAL '1 hour'",
    "SELECT id FROM events WHERE ts + INTERVAL '1' HOUR >= NOW() AND v > 1",
    "SELECT id FROM events WHERE ts < current_timestamp",
    "SELECT count(*) FROM events WHERE ts > proctime() - INTERVAL '1 day'",
    "SELECT id FROM events WHERE v > 1 OR ts BETWEEN now() - INTERVAL '1 day' AND now()",
    "SELECT e.id FROM events e JOIN events f ON e.id = f.id AND f.ts > now() - INTERVAL '5 minutes'",
    "SELECT v, count(*) FROM events GROUP BY v HAVING max(ts) > now() - INTERVAL '1 day'",
])
def test_temporal_filters_are_refused_at_create_naming_the_view_and_the_cause(conn, query):
    conn.execute(SCHEMA)
    with pytest.raises(dagster_rw.ProgrammingError, match=r"not supported in 'recent': temporal filters \(") as e:
        conn.execute(f"CREATE MATERIALIZED VIEW recent AS {query}")
    assert "SELECT over the view" in str(e.value)
    assert "recent" not in [r[0] for r in conn.execute("SHOW MATERIALIZED VIEWS").fetchall()]


def test_now_outside_a_filter_is_refused_and_random_stays_non_deterministic(conn):
    conn.execute(SCHEMA)
    with pytest.raises(dagster_rw.ProgrammingError, match=r"now\(\) in a view \(its value would be the time"):
        conn.execute("CREATE MATERIALIZED VIEW stamped AS SELECT id, now() AS seen FROM events")
    with pytest.raises(dagster_rw.ProgrammingError, match=r"the non-deterministic function random\(\)"):
        conn.execute("CREATE MATERIALIZED VIEW noisy AS SELECT id FROM events WHERE v > random()")


def test_a_select_over_the_view_filters_by_now(conn):
    conn.execute(SCHEMA)
    conn.execute("CREATE MATERIALIZED VIEW all_events AS SELECT id, ts FROM events")
    conn.execute("INSERT INTO events VALUES (1, TIMESTAMP '2000-01-01 00:00:00', 1), (2, TIMESTAMP '2999-01-01 00:00:00', 2)")
    conn.execute("FLUSH")
    assert conn.execute("SELECT id FROM all_events WHERE ts > now() - INTERVAL '1 hour'").fetchall() == [(2,)]
