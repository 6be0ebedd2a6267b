"""The interface both compute engines implement."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class ParquetScan:
    """A lazy relation over immutable Parquet files (state or change log) of a warehouse, by key.

    In-process, DuckDB reads the files from the store's local copies; on Spark, the executors read
    them from the warehouse. With `tag`, a column of that name holds each row's file's place in
    `keys` (the order of staged batches)."""

    keys: tuple[str, ...]
    schema: pa.Schema
    store: object = field(compare=False)
    tag: str | None = None
    rows: int | None = field(default=None, compare=False)  # the files' rows, where the manifest says

    def local_paths(self) -> list[str]:
        return [self.store.local_path(k) for k in self.keys]

    def local_folders(self) -> list[str]:
        """The folders the local copies of the store's files live in (what DuckDB may read)."""
        return self.store.local_folders()


class Engine:
    name = "abstract"

    def sql(self, query: str, shared: bool = False, broadcast: tuple = (), **relations):
        """Run `query` (DuckDB dialect) over the named relations; returns this engine's relation type.
        On Spark the result is a plan that the rules reading it extend, so that a chain of rules
        runs as one Spark job; `shared`: more than one later rule (or a count) reads the result,
        so Spark computes it once now (see `shared`). `broadcast` names the relations that come
        from a step's change (the keys a lookup of state looks for): on Spark, broadcast to the
        state's partitions or shuffled, by the step's size."""
        raise NotImplementedError

    def shared(self, relation):
        """`relation`, about to be read by more than one rule: on Spark computed once now (a local
        checkpoint) unless it is computed already, so that its readers do not each compute its plan
        again; in-process (Arrow tables) as it is."""
        return relation

    def to_arrow(self, relation) -> pa.Table:
        raise NotImplementedError

    def from_arrow(self, table: pa.Table):
        raise NotImplementedError

    def num_rows(self, relation) -> int:
        raise NotImplementedError
