"""The PostgreSQL target equals the view, and DuckDB's answer over the same DML, after every epoch a
sink delivers: random inserts, updates (including of the join key) and deletes, random barriers, sinks
lagging several epochs, and sink keys different from the view's stream key."""
from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle, assert_same
from pg_target import PgSchema

import dagster_rw

ORDER_IDS = st.integers(1, 8)
ITEM_IDS = st.integers(1, 4)

operations = st.one_of(
    st.tuples(st.just("insert_order"), ORDER_IDS, ITEM_IDS, st.integers(0, 9)),
    st.tuples(st.just("move_order"), ORDER_IDS, ITEM_IDS),
    st.tuples(st.just("set_qty"), ORDER_IDS, st.integers(0, 9)),
    st.tuples(st.just("delete_order"), ORDER_IDS),
    st.tuples(st.just("upsert_item"), ITEM_IDS, st.sampled_from(["pen", "ink", "pad", None])),
    st.tuples(st.just("delete_item"), ITEM_IDS),
    st.tuples(st.just("flush")),
    st.tuples(st.just("flush_and_deliver")),
)

ORDER_ITEMS = "SELECT o.id, o.item_id, i.name, o.qty FROM orders o JOIN items i ON o.item_id = i.id"
PER_ITEM = "SELECT item_id, count(*) AS n, sum(qty) AS total FROM orders GROUP BY item_id"


def _sql(op) -> str:
    kind = op[0]
    if kind == "insert_order":
        return f"INSERT INTO orders VALUES ({op[1]}, {op[2]}, {op[3]})"
    if kind == "move_order":
        return f"UPDATE orders SET item_id = {op[2]} WHERE id = {op[1]}"
    if kind == "set_qty":
        return f"UPDATE orders SET qty = {op[2]} WHERE id = {op[1]}"
    if kind == "delete_order":
        return f"DELETE FROM orders WHERE id = {op[1]}"
    if kind == "upsert_item":
        name = "NULL" if op[2] is None else f"'{op[2]}'"
        return f"INSERT INTO items VALUES ({op[1]}, {name})"
    return f"DELETE FROM items WHERE id = {op[1]}"


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(operations, min_size=4, max_size=16), batch_rows=st.sampled_from(["1000000", "2"]))
def test_postgres_target_equals_the_view_after_every_delivered_epoch(ops, batch_rows):
    pg = PgSchema()
    oracle = Oracle()
    try:
        # sinks lag until told to deliver
        with dagster_rw.connect(tempfile.mkdtemp(prefix="rw-sinkdiff-"), flush_delivers_sinks=False) as conn:
            for c in (conn, oracle):
                c.execute("CREATE TABLE orders (id INT PRIMARY KEY, item_id INT, qty INT)")
                c.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR)")
            conn.execute("INSERT INTO items VALUES (1, 'pen'), (2, 'ink')")
            oracle.upsert("items", "(1, 'pen'), (2, 'ink')")
            conn.execute("INSERT INTO orders VALUES (1, 1, 3)")
            oracle.upsert("orders", "(1, 1, 3)")
            conn.execute("FLUSH")
            conn.execute(f"CREATE MATERIALIZED VIEW order_items AS {ORDER_ITEMS}")
            # keyed by the order id, not by the view's stream key (order id, item id)
            conn.execute(f"CREATE SINK by_order FROM order_items WITH ({pg.options('by_order', type='upsert', primary_key='id', auto_create='true', max_batch_rows=batch_rows)})")
            conn.execute(f"CREATE SINK per_item AS {PER_ITEM} WITH ({pg.options('per_item', type='upsert', primary_key='item_id', auto_create='true', max_batch_rows=batch_rows)})")
            delivered = 0
            for op in ops:
                if op[0] in ("flush", "flush_and_deliver"):
                    conn.execute("FLUSH")
                    if op[0] == "flush":
                        continue
                    epoch = conn.refresh("by_order")
                    assert conn.refresh("per_item") == epoch == conn.wh.manifest("order_items").epoch
                    delivered += 1
                    expected = oracle.rows(ORDER_ITEMS)
                    assert_same(pg.rows("by_order", "id, item_id, name, qty"), expected, f"by_order at {epoch}")
                    assert_same(pg.rows("by_order", "id, item_id, name, qty"),
                                conn.execute("SELECT id, item_id, name, qty FROM order_items").fetchall(),
                                f"by_order vs view at {epoch}")
                    assert_same(pg.rows("per_item", "item_id, n, total"), oracle.rows(PER_ITEM), f"per_item at {epoch}")
                    continue
                sql = _sql(op)
                conn.execute(sql)
                if op[0] in ("insert_order", "upsert_item"):
                    table = "orders" if op[0] == "insert_order" else "items"
                    oracle.upsert(table, sql.split("VALUES", 1)[1])
                else:
                    oracle.execute(sql)
            conn.execute("FLUSH")
            conn.refresh("by_order")
            conn.refresh("per_item")
            assert_same(pg.rows("by_order", "id, item_id, name, qty"), oracle.rows(ORDER_ITEMS), "by_order at the end")
            assert_same(pg.rows("per_item", "item_id, n, total"), oracle.rows(PER_ITEM), "per_item at the end")
    finally:
        pg.drop()
