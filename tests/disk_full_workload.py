"""Run inside a tmpfs too small for it (tests/test_disk_full.py): a warehouse whose disk fills up in
the middle of its steps, again and again, leaving less space each round. Prints one JSON line: per
round, whether the FLUSH failed and how, and whether, once space was freed, the next FLUSH and a
fresh connection gave views equal to DuckDB's answer.

    python disk_full_workload.py DIR ROUNDS
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from oracle import Oracle, normalize  # noqa: E402

import dagster_rw  # noqa: E402

SCHEMA = ["CREATE TABLE t (id INT PRIMARY KEY, k INT, s VARCHAR)", "CREATE TABLE u (a INT, s VARCHAR)"]
VIEWS = {"per_k": "SELECT k, count(*) AS n, max(s) AS m FROM t GROUP BY k",
         "joined": "SELECT t.id, u.s FROM t JOIN u ON t.k = u.a",
         "u_all": "SELECT a, s FROM u WHERE a >= 0"}


def fill(path: str, leave: int) -> None:
    """Write a ballast file until the file system has about `leave` bytes free."""
    with open(path, "wb") as f:
        while True:
            free = os.statvfs(os.path.dirname(path)).f_bavail * os.statvfs(os.path.dirname(path)).f_frsize
            if free <= leave:
                break
            try:
                f.write(b"\0" * min(65536, max(4096, free - leave)))
                f.flush()
            except OSError:
                break


def check(conn, oracle) -> int:
    off = 0
    status = conn.status()
    assert len({s["epoch"] for s in status}) == 1, status
    for name in ["t", "u", *VIEWS]:
        got, want = normalize(conn.execute(f"SELECT * FROM {name}").fetchall()), normalize(oracle.rows(f"SELECT * FROM {name}"))
        off += abs(len(got) - len(want))
        assert got == want, (name, len(got), len(want))
    return off


def main(root: str, rounds: int) -> None:
    wh = os.path.join(root, "wh")
    ballast = os.path.join(root, "ballast")
    conn = dagster_rw.connect(wh)
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        oracle.execute(f"CREATE VIEW {name} AS {sql}")
    results = []
    next_id = 0
    for r in range(rounds):
        leave = (rounds - 1 - r) * 24 * 1024  # less space each round, down to none
        rows_t = ", ".join(f"({next_id + i}, {i % 5}, '{'x' * 300}{r}')" for i in range(40))
        rows_u = ", ".join(f"({i % 5}, '{'y' * 300}{r}')" for i in range(20))
        round_ = {"leave": leave}
        for sql in (f"INSERT INTO t VALUES {rows_t}", f"INSERT INTO u VALUES {rows_u}",
                    f"DELETE FROM t WHERE id = {next_id - 3}", f"UPDATE u SET s = 'z{r}' WHERE a = {r % 5}"):
            conn.execute(sql)  # accepted while there is space
            oracle.execute(sql)
        next_id += 40
        fill(ballast, leave)
        try:
            conn.execute("FLUSH")
            round_["flush"] = "ok"
        except Exception as e:  # noqa: BLE001 - what kind of error is the point
            round_["flush"] = f"{type(e).__module__}.{type(e).__name__}"
            round_["message"] = str(e)[:300]
            try:  # a statement while the disk is still full fails cleanly too
                conn.execute("INSERT INTO u VALUES (-1, 'never')")
                oracle.execute("INSERT INTO u VALUES (-1, 'never')")
                round_["insert_when_full"] = "ok"
            except Exception as e2:  # noqa: BLE001
                round_["insert_when_full"] = f"{type(e2).__module__}.{type(e2).__name__}"
        os.unlink(ballast)
        conn.execute("FLUSH")  # space is back: the next FLUSH continues
        round_["off"] = check(conn, oracle)
        with dagster_rw.connect(wh) as fresh:  # and a fresh process finds the same committed state
            round_["off_fresh"] = check(fresh, oracle)
        results.append(round_)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
