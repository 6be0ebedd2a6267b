"""The interface both compute engines implement."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class ParquetScan:
    """A lazy relation over immutable Parquet files (state or change log), optionally tagged per file."""

    paths: tuple[str, ...]
    schema: pa.Schema


class Engine:
    name = "abstract"

    def sql(self, query: str, **relations):
        """Run `query` (DuckDB dialect) over the named relations; returns this engine's relation type."""
        raise NotImplementedError

    def to_arrow(self, relation) -> pa.Table:
        raise NotImplementedError

    def from_arrow(self, table: pa.Table):
        raise NotImplementedError

    def write_parquet(self, relation, path: str, order_by: list[str]) -> int:
        """Write `relation` sorted by `order_by` to one local Parquet file; returns the row count."""
        raise NotImplementedError

    def num_rows(self, relation) -> int:
        raise NotImplementedError
