"""A differential workload for the Spark path on a cluster: views of each kind, DML over several
epochs, a view that lags and catches up in one step; every view compared with DuckDB.

Shared by the tests that run it on the standalone cluster (this process's session) and over
Spark Connect (a client process), with a warehouse on S3 or on a shared folder.
"""
from __future__ import annotations

import random

from oracle import Oracle, assert_same

SCHEMA = [
    "CREATE TABLE orders (id INT PRIMARY KEY, cust INT, item INT, qty INT)",
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR, price INT)",
]

VIEWS = {
    # a join under an aggregate with MIN/MAX (retracted by deletes and updates)
    "sales": "SELECT i.name, count(*) AS n, sum(o.qty * i.price) AS revenue, min(o.qty) AS least, "
             "max(o.qty) AS most FROM orders o JOIN items i ON o.item = i.id GROUP BY i.name",
    # an outer join: orders whose item is missing keep NULLs
    "order_lines": "SELECT o.id, o.qty, i.name FROM orders o LEFT JOIN items i ON o.item = i.id",
    # top-N
    "top_orders": "SELECT id, cust, qty FROM orders ORDER BY qty DESC, id LIMIT 5",
    # a view over a view
    "big_sellers": "SELECT name, revenue FROM sales WHERE n > 3",
}
LAGGING = "per_customer"  # created with the others, refreshed only at the end (several epochs in one step)
LAGGING_SQL = "SELECT cust, count(*) AS n, max(qty) AS most FROM orders GROUP BY cust"


def _rows(rng: random.Random, ids, items: int) -> list[tuple]:
    return [(i, rng.randrange(40), rng.randrange(items + 3), rng.randrange(1, 50)) for i in ids]


def _values(rows) -> str:
    return ", ".join("(" + ", ".join("NULL" if v is None else repr(v) for v in r) + ")" for r in rows)


def run(conn, seed: int = 7, orders: int = 600, epochs: int = 3) -> dict:
    """Load, create the views (a backfill), then `epochs` rounds of DML, each sealed by a barrier
    and applied to every object but the lagging view, after which each equals DuckDB's answer;
    then the lagging view's refresh, over all those epochs in one step. Returns the manifests' file lists of the big objects, for the caller's checks."""
    rng = random.Random(seed)
    oracle = Oracle()
    for ddl in SCHEMA:
        conn.execute(ddl)
        oracle.execute(ddl)
    item_rows = [(i, f"item{i % 12}", rng.randrange(1, 9)) for i in range(30)]
    order_rows = _rows(rng, range(orders), 30)
    for table, rows in (("items", item_rows), ("orders", order_rows)):
        conn.execute(f"INSERT INTO {table} VALUES {_values(rows)}")
        oracle.upsert(table, _values(rows))
    conn.execute("FLUSH")
    for name, sql in {**VIEWS, LAGGING: LAGGING_SQL}.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        oracle.execute(f"CREATE VIEW {name} AS {sql}")

    def check(names) -> None:
        for name in names:
            assert_same(conn.execute(f"SELECT * FROM {name}").fetchall(), oracle.rows(f"SELECT * FROM {name}"), name)

    check(VIEWS)
    for epoch in range(epochs):
        changed = _rows(rng, rng.sample(range(orders + 100), 80), 30)  # inserts and updates by key
        statements = [
            f"DELETE FROM orders WHERE qty > {45 - epoch}",  # the largest quantities go: MAX retracts
            f"UPDATE orders SET qty = qty + 1 WHERE cust = {rng.randrange(40)}",
            f"DELETE FROM items WHERE id = {rng.randrange(30)}",
            f"UPDATE items SET price = price + 2 WHERE id < {rng.randrange(10)}",
        ]
        conn.execute(f"INSERT INTO orders VALUES {_values(changed)}")
        oracle.upsert("orders", _values(changed))
        for sql in statements:
            conn.execute(sql)
            oracle.execute(sql)
        conn.barrier()  # a FLUSH for every object but the lagging view
        for name in ["orders", "items", *VIEWS]:
            conn.refresh(name)
        check(VIEWS)
    lag = conn.wh.status([LAGGING])[0]["lag_epochs"]
    conn.refresh(LAGGING)
    check([LAGGING])
    return {"lagged_epochs": lag,
            "files": {name: {table: [f.to_json() for f in files] for table, files in conn.wh.manifest(name).state.items()}
                      for name in ("orders", "sales")}}
