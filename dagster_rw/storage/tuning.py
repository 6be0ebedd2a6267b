"""The thresholds that choose, per call, between a general path of the storage layer and a fast
path that gives the same answer (an index, a filter, a faster sort, a smaller file writer). One
object for the process, `TUNING`: the figures are where each path starts to pay on the machines
measured, and a test forces a path by setting them with `tuned(...)`."""
from __future__ import annotations

import contextlib
import dataclasses
import os

from ..errors import ProgrammingError


@dataclasses.dataclass(slots=True)
class Tuning:
    # a file with at least this many keys gets a sparse index (every `sparse_index_stride`-th key);
    # smaller files fit the CPU cache well enough for plain binary searches
    sparse_index_min_rows: int = 1 << 21
    sparse_index_stride: int = 512
    # a file with at least this many integer keys, filling much of their range, gets a dense
    # index (a row per key value); smaller files are searched as fast as gathered
    dense_index_min_rows: int = 1 << 12
    # this many needles or more are first filtered by a file's Bloom filter; fewer search the file
    # as fast as they are filtered
    filter_min_needles: int = 1 << 10
    # one Bloom filter over a state table's newer files holds at most this many keys (16 slots, bytes, per key)
    union_filter_max_keys: int = 1 << 22
    # lookups by a dense integer key ask the map of which file holds each key's newest version
    newest_holders: bool = True
    # sorts of fewer values use numpy's sort (as fast either way: 5k values ~0.1 ms)
    fast_sort_min_values: int = 4096
    # larger sorts: 'measured' (Polars' or numpy's, whichever was faster here, timed once),
    # 'numpy' or 'polars'
    sorter: str = "measured"
    # small files by plain_parquet where it handles the column types; False (or the environment's
    # DAGSTER_RW_PLAIN_PARQUET=0) leaves every file to pyarrow, for a reader that refuses ours and
    # for measuring the two side by side
    plain_parquet_writer: bool = os.environ.get("DAGSTER_RW_PLAIN_PARQUET", "1") != "0"


TUNING = Tuning()


@contextlib.contextmanager
def tuned(**changes):
    """Set these fields of `TUNING` for the duration of the block, then put the previous values back."""
    known = [f.name for f in dataclasses.fields(Tuning)]
    unknown = sorted(set(changes) - set(known))
    if unknown:
        raise ProgrammingError(f"unknown tuning {', '.join(unknown)}; the known ones are {', '.join(known)}")
    before = {name: getattr(TUNING, name) for name in changes}
    for name, value in changes.items():
        setattr(TUNING, name, value)
    try:
        yield TUNING
    finally:
        for name, value in before.items():
            setattr(TUNING, name, value)
