"""The benchmarks' data: visits of products, a product-to-category table, and the view over them
(a join with an aggregate with COUNT, SUM and MAX per category)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

PRODUCTS = 100_000
CATEGORIES = 1_000
VIEW = ("SELECT i.category, count(*) AS visits, sum(v.length) AS total, max(v.length) AS longest "
        "FROM visit v JOIN info i ON v.product = i.product GROUP BY i.category")
# what the view's MAX keeps per group beside the result: how many joined rows have each length
VALUE_COUNTS = ("SELECT i.category, v.length, count(*) AS copies "
                "FROM visit v JOIN info i ON v.product = i.product GROUP BY i.category, v.length")


def visits(rng, ids: np.ndarray) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "product": pa.array(rng.integers(0, PRODUCTS, len(ids)), pa.int32()),
        "uid": pa.array(rng.integers(0, 1_000_000, len(ids)), pa.int32()),
        "length": pa.array(rng.integers(1, 3_600, len(ids)), pa.int32()),
    })


def info() -> pa.Table:
    return pa.table({"product": pa.array(np.arange(PRODUCTS), pa.int32()),
                     "category": pa.array(np.arange(PRODUCTS) % CATEGORIES, pa.int32())})
