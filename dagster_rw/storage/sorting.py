"""The sorts the storage layer and the operators use: stable orders of integer key codes (packed with
the row numbers into one word where they fit), the faster of numpy's and Polars' sort measured once
per process, and the row order of a state or change-log file."""
from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .key_codes import _int_codes, _int_like
from .tuning import TUNING


def sorted_order(codes: np.ndarray, runs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(order, codes[order]): a stable argsort of integer codes. Where each code's offset from
    the lowest leaves room for the row number in 64 bits, the two are packed into one word and
    the words sorted by value (sort_values), the row numbers breaking ties: one sort of plain
    64-bit values, against numpy's argsort, which moves indices beside the values (100k codes
    here: ~1.1-1.9 ms for the words' sort by Polars, against ~3-7 ms for numpy's argsort). Wider
    codes take numpy's quicksort, equal codes (a key's delete and insert) put back in row order.
    `runs`: the codes are sorted runs one after the other (files concatenated, as a merge reads
    them), which numpy's stable argsort (timsort) merges rather than sorts (6M codes in 16 runs:
    65 ms, against 86 ms packed and 90 ms for the quicksort alone, measured on an earlier
    machine)."""
    n = len(codes)
    if n < 2 or runs or codes.dtype.kind not in "iu":
        order = np.argsort(codes, kind="stable")
        return order, codes[order]
    order = _packed_order(_unsigned(codes), (n - 1).bit_length())
    if order is not None:
        return order, codes[order]
    order = np.argsort(codes)
    ordered = codes[order]
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):
        if (np.diff(tie) == 1).any():  # three or more equal codes: the stable sort orders them
            order = np.argsort(codes, kind="stable")
            return order, codes[order]
        swap = tie[order[tie] > order[tie + 1]]  # equal pairs in row order
        order[swap], order[swap + 1] = order[swap + 1], order[swap].copy()
    return order, ordered


def _unsigned(codes: np.ndarray) -> np.ndarray:
    """Integer codes as uint64 in the same order (a signed value's sign bit flipped)."""
    if codes.dtype == np.uint64:
        return codes
    if codes.dtype.kind == "u":
        return codes.astype(np.uint64)
    return codes.astype(np.int64, copy=False).view(np.uint64) ^ np.uint64(1 << 63)


def _packed_order(u: np.ndarray, bits: int) -> np.ndarray | None:
    """The stable sort order of uint64 values `u` whose span fits 64 - `bits` bits (`bits`: enough
    for a row number), or None when it does not."""
    lo = u.min()
    if int(u.max() - lo) >> (64 - bits):
        return None
    words = u - lo
    words <<= np.uint64(bits)
    words |= np.arange(len(u), dtype=np.uint64)
    return (sort_values(words) & np.uint64((1 << bits) - 1)).astype(np.intp)


def sort_values(values: np.ndarray) -> np.ndarray:
    """An array's values in ascending order, as a new array: large integer arrays with the faster
    of numpy's sort and Polars' (single-threaded, without the GIL), measured once per process.

    Where numpy's AVX-512 sort runs on AMD Zen 4, its compress-stores are microcoded and it is
    slower than scalar code: 100k 64-bit values take ~3.8 ms there (1M: ~53 ms), Polars ~1.2 ms
    (1M: ~15 ms). On CPUs where numpy's SIMD sort
    works it beats Polars, hence the measurement rather than a fixed choice. A 50M-row benchmark
    epoch sorts ~300k values on its writer threads (storage files of ~100k rows each)."""
    if len(values) < TUNING.fast_sort_min_values or values.dtype.kind not in "iu":
        return np.sort(values)
    polars = _polars_sort()
    if polars is None:
        return np.sort(values)
    return polars.Series(values).sort(multithreaded=False).to_numpy()


def _polars_sort():
    """The polars module when its sort beat numpy's on this machine (timed once, on 64k random
    64-bit values, best of three each), else None (also when Polars is not installed); or as
    TUNING.sorter says."""
    global _sort_choice
    if TUNING.sorter != "measured":
        if TUNING.sorter == "polars":
            import polars

            return polars
        return None
    with _sort_lock:
        if _sort_choice is None:
            try:
                import polars
            except ImportError:
                polars = None
            if polars is not None:
                sample = np.random.default_rng(0).integers(0, 1 << 62, 1 << 16, dtype=np.uint64)
                fast = _best_of_three(lambda: polars.Series(sample).sort(multithreaded=False).to_numpy())
                polars = polars if fast < _best_of_three(lambda: np.sort(sample)) else None
            _sort_choice = (polars,)
        return _sort_choice[0]


def _best_of_three(f) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


_sort_choice: tuple | None = None
_sort_lock = threading.Lock()


def hash_order(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, sorted hashes) of key_hash values, the hashes shortened to their high 64 - log2(rows)
    bits so that a row number fits beside them (_packed_order). Equal keys still hash equal and so
    end up side by side; callers compare the rows of equal hashes anyway."""
    if len(h) < 2:
        return np.arange(len(h)), h
    bits = (len(h) - 1).bit_length()
    short = h >> np.uint64(bits)
    order = _packed_order(short, bits)
    return order, short[order]


def _range_codes(columns: list) -> np.ndarray | None:
    """Two integer columns packed into one sortable uint64 by their value ranges in this table
    (valid for ordering these rows only, not for comparing with another table's codes)."""
    if any(c.null_count or not _int_like(c.type) for c in columns):
        return None
    values = []
    for c in columns:
        if not pa.types.is_integer(c.type):
            c = c.cast(pa.int64() if c.type.bit_width == 64 else pa.int32())
        values.append(c.to_numpy().astype(np.int64))  # a copy, even of an int64 column
    lo = [int(v.min()) for v in values]
    widths = [max(int(v.max()) - low, 0).bit_length() for v, low in zip(values, lo)]
    if sum(widths) > 63:
        return None
    high, low = values  # (fresh int64 copies: worked on in place)
    high -= lo[0]
    high <<= widths[1]
    low -= lo[1]
    high |= low
    return high.view(np.uint64)


def ascending(codes: np.ndarray) -> bool:
    """Whether order codes are distinct and in ascending order (rows sorted by key, one per key)."""
    return bool((codes[1:] > codes[:-1]).all())


def order_codes(table: pa.Table, keys: list[str]) -> np.ndarray | None:
    """Integer codes ordering these rows by `keys` (one integer-like column, or two packed by
    their types or, failing that, by their ranges in this table; no NULLs), or None."""
    if not keys or len(keys) > 2:
        return None
    cols = [table.column(k).combine_chunks() for k in keys]
    codes = _int_codes(cols)
    if codes is None and len(keys) == 2:
        codes = _range_codes(cols)
    return codes


def sort_indices(table: pa.Table, keys: list[str], last: str | None = None):
    """Row order sorting `table` by `keys` (NULLs first), then by the integer column `last` when
    given. Integer-like keys whose codes are unique, or tie only in pairs (a delete and an insert of
    one key), sort with numpy's quicksort, several times faster than a general multi-column sort.
    None: the rows are in that order already (distinct integer-like keys, ascending)."""
    if table.num_rows > 1 and keys:
        codes = order_codes(table, keys)
        if codes is not None:
            if ascending(codes):
                return None
            order, ordered = sorted_order(codes)
            tie = np.flatnonzero(ordered[1:] == ordered[:-1])
            if not len(tie):
                return order
            if last is not None and (len(tie) < 2 or not (np.diff(tie) == 1).any()):  # only pairs tie
                w = table.column(last).to_numpy()
                swap = tie[w[order[tie]] > w[order[tie + 1]]]
                order[swap], order[swap + 1] = order[swap + 1], order[swap].copy()
                return order
    return nulls_first_order(table, keys + ([last] if last else []))


def nulls_first_order(table: pa.Table, keys: list[str]):
    """Arrow's row order sorting `table` by `keys`, ascending, NULLs first."""
    spec = [(k, "ascending") for k in keys]
    try:  # NULLs first, per key (pyarrow 25 and later; the option for all keys at once is deprecated)
        return pc.sort_indices(table, sort_keys=[(k, order, "at_start") for k, order in spec])
    except (TypeError, ValueError, pa.ArrowInvalid):
        return pc.sort_indices(table, spec, null_placement="at_start")


def sorted_for_file(table: pa.Table, keys: list[str]) -> pa.Table:
    """`table` in the order of a state or change-log file sorted by `keys` (NULLs first; a
    trailing `_w` only orders a key's delete before its insert)."""
    if keys and table.num_rows > 1:
        last = keys[-1] if keys[-1] == "_w" else None
        order = sort_indices(table, keys[:-1] if last else keys, last)
        if order is not None:
            table = table.take(order)
    return table
