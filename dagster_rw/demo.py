"""`dagster-rw demo`: a small shop streaming changes through several epochs, with each epoch's timing."""
from __future__ import annotations

import random
import shutil
import time

import pyarrow as pa

SCHEMA = [
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR, category VARCHAR, price NUMERIC(10,2))",
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, item_id INT, qty INT, placed DATE)",
    "CREATE TABLE visit (product INT, uid INT, length INT)",
    "CREATE MATERIALIZED VIEW order_lines AS SELECT o.id, o.item_id, i.name, o.qty * i.price AS amount "
    "FROM orders o JOIN items i ON o.item_id = i.id",
    "CREATE MATERIALIZED VIEW revenue_by_category AS SELECT i.category, count(*) AS orders, "
    "sum(o.qty * i.price) AS revenue, max(o.qty) AS biggest FROM orders o JOIN items i ON o.item_id = i.id "
    "GROUP BY i.category",
    "CREATE MATERIALIZED VIEW longest_visit AS SELECT i.category, max(v.length) AS longest, count(*) AS visits "
    "FROM visit v JOIN items i ON v.product = i.id GROUP BY i.category",
    "CREATE MATERIALIZED VIEW top_orders AS SELECT id, item_id, qty FROM orders ORDER BY qty DESC, id LIMIT 5",
]

CATEGORIES = ["books", "games", "garden", "kitchen", "music", "toys"]


def run_demo(warehouse: str, epochs: int = 5, rows: int = 20000, out=print) -> int:
    import dagster_rw

    shutil.rmtree(warehouse, ignore_errors=True)
    rng = random.Random(7)
    conn = dagster_rw.connect(warehouse)
    out(f"warehouse: {warehouse}")
    for statement in SCHEMA:
        conn.execute(statement)
    n_items = 200
    conn.insert("items", pa.table({
        "id": list(range(n_items)),
        "name": [f"item-{i}" for i in range(n_items)],
        "category": [CATEGORIES[i % len(CATEGORIES)] for i in range(n_items)],
        "price": pa.array([f"{1 + (i % 50) * 0.5:.2f}" for i in range(n_items)]).cast(pa.decimal128(10, 2)),
    }))
    next_order = 0
    out(f"{'epoch':>5}  {'changes':>8}  {'barrier+refresh s':>18}  views")
    for e in range(epochs):
        k = rows if e == 0 else max(1, rows // 50)
        ids = list(range(next_order, next_order + k))
        next_order += k
        conn.insert("orders", pa.table({
            "id": pa.array(ids, pa.int64()),
            "item_id": [rng.randrange(n_items) for _ in ids],
            "qty": [rng.randint(1, 9) for _ in ids],
            "placed": pa.array([None] * k, pa.date32()),
        }))
        conn.insert("visit", pa.table({
            "product": [rng.randrange(n_items) for _ in ids],
            "uid": [rng.randrange(1000) for _ in ids],
            "length": [rng.randint(1, 600) for _ in ids],
        }))
        changes = 2 * k
        if e > 0:
            victim = rng.randrange(next_order)
            conn.execute(f"UPDATE orders SET item_id = {rng.randrange(n_items)}, qty = 9 WHERE id = {victim}")
            conn.execute(f"DELETE FROM orders WHERE id < {victim // 100}")
            conn.execute(f"UPDATE items SET price = price + 1 WHERE id = {rng.randrange(n_items)}")
            changes += 3
        t0 = time.perf_counter()
        epoch = conn.flush()
        elapsed = time.perf_counter() - t0
        out(f"{epoch:>5}  {changes:>8}  {elapsed:>18.3f}  all committed")
    for view in ("revenue_by_category", "longest_visit", "top_orders"):
        out(f"\n{view}:")
        cur = conn.execute(f"SELECT * FROM {view} ORDER BY 1")
        out("  " + " | ".join(d[0] for d in cur.description))
        for row in cur.fetchall():
            out("  " + " | ".join(str(v) for v in row))
    out("\nstatus:")
    for s in conn.status():
        out(f"  {s['name']:<20} {s['kind']:<18} epoch {s['epoch']:<4} lag {s['lag_epochs']:<3} "
            f"state rows {s['state_rows']:<8} last step {s.get('step_seconds', 0):.3f}s")
    return 0
