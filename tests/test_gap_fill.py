"""GAP_FILL in FROM: the rows of a relation and a filled row every interval between each two
consecutive rows (LOCF by default, KEEPNULL, INTERPOLATE over integers and floats), against DuckDB
on random workloads and on both paths, with RisingWave's float steps to the last digit, and what
is refused by name."""
from __future__ import annotations

import pytest
from both_paths import run_on
from test_differential import _workload_test

import dagster_rw

BASE = "SELECT TIMESTAMP '2024-01-01 00:00:00' + id * INTERVAL '25 minutes' AS ts, k, v, s, CAST(v AS DOUBLE PRECISION) / 4 AS x FROM t1"
SETUP = [(f"CREATE MATERIALIZED VIEW tv AS {BASE}", f"CREATE VIEW tv AS {BASE}")]
TYPES = {"k": "INT", "v": "INT", "x": "DOUBLE"}


def oracle(width: str, how: dict, cols=("k", "v", "s", "x")) -> str:
    """DuckDB's gap filling of tv, written apart from the planner's: each row beside the next one, a
    series of timestamps over the gap, each filled row numbered within its gap."""
    nexts = ", ".join(f"lead({c}) OVER (ORDER BY ts) AS n_{c}" for c in cols)

    def fill(c: str) -> str:
        kind = how.get(c, "locf")
        if kind == "keepnull":
            return f"NULL AS {c}"
        if kind == "locf":
            return f"p.{c} AS {c}"
        step = f"floor((p.n_{c} - p.{c}) / (f.n + 1))" if TYPES[c] == "INT" else f"((p.n_{c} - p.{c}) / (f.n + 1))"
        return f"CASE WHEN p.{c} IS NULL OR p.n_{c} IS NULL THEN p.{c} ELSE CAST(p.{c} + f.k * {step} AS {TYPES[c]}) END AS {c}"

    return (f"SELECT ts, {', '.join(cols)} FROM tv UNION ALL "
            f"SELECT f.ts, {', '.join(fill(c) for c in cols)} FROM "
            f"(SELECT ts AS t0, {', '.join(cols)}, {nexts} FROM tv) p JOIN "
            f"(SELECT t0, ts, row_number() OVER (PARTITION BY t0 ORDER BY ts) AS k, count(*) OVER (PARTITION BY t0) AS n "
            f"FROM (SELECT t0, generate_series(t0 + INTERVAL '{width}', t1 - INTERVAL '1 microsecond', INTERVAL '{width}') AS ts "
            f"FROM (SELECT ts AS t0, lead(ts) OVER (ORDER BY ts) AS t1 FROM tv) l WHERE t1 IS NOT NULL) s) f ON p.t0 = f.t0")


VIEWS = {
    "gap_default": ("SELECT * FROM GAP_FILL(tv, ts, INTERVAL '10 minutes')", oracle("10 minutes", {})),
    "gap_mixed": ("SELECT ts, k, v, s, x FROM GAP_FILL(tv, ts, INTERVAL '10' MINUTE, INTERPOLATE(v), KEEPNULL(s), "
                  "INTERPOLATE(x), LOCF(k))",
                  oracle("10 minutes", {"v": "interpolate", "s": "keepnull", "x": "interpolate"})),
    "gap_grouped": ("SELECT g.k, count(*) AS n, sum(g.v) AS sv, count(g.s) AS ns FROM GAP_FILL(tv, ts, "
                    "INTERVAL '1 hour', INTERPOLATE(v)) AS g GROUP BY g.k",
                    f"SELECT k, count(*) AS n, sum(v) AS sv, count(s) AS ns FROM ({oracle('1 hour', {'v': 'interpolate'})}) "
                    "AS g GROUP BY k"),
}

test_gap_fill_views_match_duckdb = _workload_test(VIEWS, setup=SETUP)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_gap_fill_views_on_both_paths(tmp_path, spark, engine):
    run_on(str(tmp_path / engine), spark, engine, VIEWS, setup=SETUP)


def test_float_steps_are_risingwaves_to_the_last_digit(tmp_path):
    """RisingWave adds a float step once per filled row; start + k * step can differ in the last
    digit (18.333333333333332 against 18.333333333333336 here)."""
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE m (ts TIMESTAMPTZ PRIMARY KEY, x DOUBLE PRECISION, n BIGINT)")
    conn.execute("INSERT INTO m VALUES ('2024-05-21 10:05:00+00', 15.0, 100), ('2024-05-21 10:08:00+00', 20.0, 90)")
    conn.execute("CREATE MATERIALIZED VIEW f AS SELECT * FROM GAP_FILL(m, ts, INTERVAL '1' MINUTE, INTERPOLATE(x), "
                 "INTERPOLATE(n))")
    conn.execute("FLUSH")
    assert [r[1:] for r in sorted(conn.execute("SELECT * FROM f").fetchall())] == [
        (15.0, 100), (16.666666666666668, 96), (18.333333333333336, 92), (20.0, 90)]  # -10 / 3 rounds down


@pytest.mark.parametrize("query, refused", [
    ("SELECT * FROM GAP_FILL(m, n, INTERVAL '1 minute')", "of type bigint (it needs a timestamp)"),
    ("SELECT * FROM GAP_FILL(m, ts, INTERVAL '1 month')", "INTERVAL"),
    ("SELECT * FROM GAP_FILL(m, ts, INTERVAL '-1 minute')", "not positive"),
    ("SELECT * FROM GAP_FILL(m, ts, INTERVAL '1 minute', LOCF(x + 1))", "the GAP_FILL argument LOCF(x + 1)"),
    ("SELECT * FROM GAP_FILL(m, ts, INTERVAL '1 minute', FIRST(x))", "function first(double precision) does not exist"),
    ("SELECT * FROM GAP_FILL(m, ts, INTERVAL '1 minute', LOCF(x), KEEPNULL(x))", "a second fill strategy for 'x'"),
    ("SELECT * FROM GAP_FILL(m, ts, INTERVAL '1 minute', LOCF(ts))", "LOCF(ts): not a column"),
    ("SELECT * FROM GAP_FILL((SELECT * FROM m), ts, INTERVAL '1 minute')", "GAP_FILL over anything but"),
])
def test_what_gap_fill_cannot_do_is_refused_by_name(tmp_path, query, refused):
    conn = dagster_rw.connect(str(tmp_path / "wh"))
    conn.execute("CREATE TABLE m (ts TIMESTAMP PRIMARY KEY, x DOUBLE PRECISION, n BIGINT)")
    with pytest.raises(dagster_rw.ProgrammingError) as e:
        conn.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    assert refused in str(e.value)
    assert "v" not in [r[0] for r in conn.execute("SHOW MATERIALIZED VIEWS").fetchall()]
