-- A shop: orders point at items; views join, aggregate and rank them.

-- The orders customers place, each for a quantity of one item.
CREATE TABLE orders (
    id        int PRIMARY KEY,
    item_id   int,
    customer  varchar,
    quantity  int,
    placed_at timestamp
);

-- The items on sale, with their unit price.
CREATE TABLE items (
    id    int PRIMARY KEY,
    name  varchar,
    price numeric(10, 2)
);

-- Each order with its item's name and the amount it comes to (stream key: order and item).
CREATE MATERIALIZED VIEW order_lines AS
SELECT o.id AS order_id, o.customer, i.id AS item_id, i.name AS item, o.quantity,
       o.quantity * i.price AS amount, o.placed_at
FROM orders o JOIN items i ON o.item_id = i.id;

-- Revenue per item, aggregated over order_lines (a view over a view).
CREATE MATERIALIZED VIEW item_revenue AS
SELECT item_id, item, count(*) AS orders, sum(quantity) AS units, sum(amount) AS revenue
FROM order_lines
GROUP BY item_id, item;

-- The three best customers by spend (top-N, maintained under updates and deletes).
CREATE MATERIALIZED VIEW top_customers AS
SELECT customer, sum(amount) AS spent
FROM order_lines
GROUP BY customer
ORDER BY spent DESC
LIMIT 3;
