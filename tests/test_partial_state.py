"""State larger than the cache, in-process: with a cache far smaller than the state, files are
mapped rather than decoded, and small epochs give DuckDB's answers all the same."""
from __future__ import annotations

import pytest

import dagster_rw
from dagster_rw.storage import mapped_columns, sst_cache

import cluster_workload


@pytest.fixture
def small_cache():
    limit = sst_cache.files._LIMIT
    sst_cache.clear()
    yield 64 << 10  # files over 8 KB decoded are mapped
    sst_cache.set_limit(limit)
    sst_cache.clear()


@pytest.mark.parametrize("seed", [3, 11])
def test_small_epochs_over_mapped_state_match_duckdb(tmp_path, small_cache, seed):
    conn = dagster_rw.connect(str(tmp_path / "wh"), cache_bytes=small_cache)
    seen = set()
    original = mapped_columns.map_file

    def spy(path):
        table = original(path)
        if table is not None:
            seen.add(path)
        return table

    mapped_columns.map_file = spy
    try:
        out = cluster_workload.run(conn, seed=seed, orders=3000, epochs=3)
    finally:
        mapped_columns.map_file = original
    assert out["lagged_epochs"] == 3
    # the table's own state, the join's and the top-N's were read through their mapped columns
    for object_state in ("/orders/state/output/", "/sales/state/", "/top_orders/state/"):
        assert any(object_state in path for path in seen), (object_state, sorted(seen))
    assert sst_cache.files._bytes <= small_cache  # the cache kept to its bound throughout
