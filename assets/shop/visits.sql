-- Visits to products, and the products' categories.

-- Each visit of a user to a product and how long it lasted (no primary key: a hidden row id).
CREATE TABLE visit (product int, "user" varchar, length int);

-- The category of each product.
CREATE TABLE info (product int PRIMARY KEY, category varchar);

-- The longest visit per category, kept right when visits are deleted (MAX keeps every value per
-- group, so deleting the longest visit falls back to the next one).
CREATE MATERIALIZED VIEW longest_visit AS
SELECT i.category, max(v.length) AS longest, count(*) AS visits, count(DISTINCT v."user") AS visitors
FROM visit v JOIN info i ON v.product = i.product
GROUP BY i.category;

-- Products nobody visited yet (an outer join).
CREATE MATERIALIZED VIEW unvisited AS
SELECT i.product, i.category
FROM info i LEFT JOIN visit v ON v.product = i.product
WHERE v.product IS NULL;
