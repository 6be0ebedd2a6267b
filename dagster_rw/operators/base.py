"""What every incremental operator shares: the delta convention, consolidation and SQL helpers.

A delta is a relation with the operator's columns `c0..cN` plus `_w`, a signed weight (+1 insert,
-1 delete, an update is a -1/+1 pair). Consolidation adds up weights per row and drops zeros, so
applying a delta never depends on the order of changes inside an epoch.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import Node, cname
from ..storage import sst_cache
from ..storage.state_table import in_key_order

W = "_w"
DELETED = "_del"


def col_list(names, prefix: str = "") -> str:
    return ", ".join(f"{prefix}{quote(n)}" for n in names)


def names(node: Node) -> list[str]:
    return [cname(i) for i in range(len(node.columns))]


def delta_schema(node: Node) -> pa.Schema:
    fields = [pa.field(cname(i), sqltypes.arrow_type(c.type)) for i, c in enumerate(node.columns)]
    return pa.schema(fields + [pa.field(W, pa.int64())])


def row_schema(node: Node) -> pa.Schema:
    return pa.schema([pa.field(cname(i), sqltypes.arrow_type(c.type)) for i, c in enumerate(node.columns)])


def null_safe_eq(left: list[str], right: list[str], lp: str, rp: str) -> str:
    return " AND ".join(f"{lp}.{quote(a)} IS NOT DISTINCT FROM {rp}.{quote(b)}" for a, b in zip(left, right)) \
        or "TRUE"


def eq(left: list[str], right: list[str], lp: str, rp: str) -> str:
    return " AND ".join(f"{lp}.{quote(a)} = {rp}.{quote(b)}" for a, b in zip(left, right)) or "TRUE"


def consolidate_sql(cols: list[str], source: str = "d") -> str:
    """Sum weights per identical row and drop the rows whose weight cancels out."""
    c = col_list(cols)
    if not cols:
        return f"SELECT CAST(sum({W}) AS BIGINT) AS {W} FROM {source} HAVING sum({W}) <> 0"
    return f"SELECT {c}, CAST(sum({W}) AS BIGINT) AS {W} FROM {source} GROUP BY {c} HAVING sum({W}) <> 0"


def rows_equal(a: pa.Table, b: pa.Table, cols: list[str], a_rows: np.ndarray | None = None,
               b_rows: np.ndarray | None = None) -> np.ndarray | None:
    """Whether row a_rows[i] of `a` equals row b_rows[i] of `b` (default: row i of each) in every
    column (NULL equals NULL), or None when Arrow cannot compare a column type. Each column is
    compared only for the pairs equal in the columns before it (rows that change usually differ
    in the first value column, so the others cost little)."""
    n = a.num_rows if a_rows is None else len(a_rows)
    same = np.zeros(n, bool)
    cand = np.arange(n)  # the pairs equal so far
    for i, c in enumerate(cols):
        if not len(cand):
            break
        x, y = a.column(c), b.column(c)
        narrowed = i > 0 and len(cand) < n
        if a_rows is not None or narrowed:
            x = x.take(pa.array(cand if a_rows is None else a_rows[cand]))
        if b_rows is not None or narrowed:
            y = y.take(pa.array(cand if b_rows is None else b_rows[cand]))
        try:
            eq = pc.equal(x, y)
            if eq.null_count:
                eq = pc.fill_null(pc.or_kleene(eq, pc.and_(pc.is_null(x), pc.is_null(y))), False)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        cand = cand[np.asarray(eq)]
    else:
        same[cand] = True
        return same
    for c in cols[i:]:  # no pair left: the remaining types must still compare
        try:
            pc.equal(a.column(c).slice(0, 0), b.column(c).slice(0, 0))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return None
    return same


def consolidate(engine, delta, cols: list[str]):
    """consolidate_sql's answer. In Arrow, without SQL, when the weights are +1/-1 and rows sharing a
    hash of their integer columns come at most as one delete and one insert (true of a step's
    change to rows with a key): such a pair cancels when the two rows are equal."""
    if isinstance(delta, pa.Table):
        fast = _cancel_pairs(delta, cols)
        if fast is not None:
            return fast
    return engine.sql(consolidate_sql(cols, "d"), d=delta)


def _cancel_pairs(delta: pa.Table, cols: list[str]) -> pa.Table | None:
    if delta.num_rows == 0:
        return delta.select(cols + [W])
    hashed = [c for c in cols if delta.column(c).null_count == 0]
    h = sst_cache.local_hash(delta, hashed) if hashed else None
    if h is None:
        return None
    w = delta.column(W).to_numpy()
    if not ((w == 1) | (w == -1)).all():
        return None
    order, oh = sst_cache.hash_order(h)
    tie = np.flatnonzero(oh[1:] == oh[:-1])
    if not len(tie):
        return delta.select(cols + [W])
    if (np.diff(tie) == 1).any():  # three or more rows share a hash
        return None
    a, b = order[tie], order[tie + 1]
    if (w[a] == w[b]).any():  # the same row twice with one sign: weights add up, SQL does that
        return None
    same = rows_equal(delta, delta, cols, a, b)
    if same is None:
        return None
    keep = np.ones(delta.num_rows, bool)
    keep[a[same]] = False
    keep[b[same]] = False
    return delta.filter(pa.array(keep)).select(cols + [W])


def state_writes(engine, delta, cols: list[str], pk: list[str], empty: bool = False):
    """The state writes of a consolidated delta whose rows are unique per `pk` and sign: inserted
    rows are put; keys left with only deletions become tombstones (state_upsert_sql, in Arrow
    when the key columns are integers). Into an `empty` state table (a backfill, a first step) a
    deletion has nothing to remove: only the inserted rows are written, with no anti-join."""
    if empty and not isinstance(delta, pa.Table):
        # a filter of the delta computed once: cheaper to read again than to store again
        return engine.sql(f"SELECT {col_list(cols)}, false AS {DELETED} FROM d WHERE {W} > 0", d=engine.shared(delta))
    if isinstance(delta, pa.Table):
        fast = _state_writes_in_arrow(delta, cols, pk)
        if fast is not None:
            return fast
    # computed once (on Spark): a state file's write reads its rows several times (a count, a
    # sample of the key ranges, the write)
    return engine.sql(state_upsert_sql(cols, pk, "d"), shared=True, d=delta)


def _state_writes_in_arrow(delta: pa.Table, cols: list[str], pk: list[str]) -> pa.Table | None:
    by_key = _state_writes_by_key_order(delta, cols, pk)
    if by_key is not None:
        return by_key
    h = sst_cache.local_hash(delta, pk)
    if h is None:
        return None
    ins = delta.column(W).to_numpy() > 0
    dels = ~ins
    # a key deleted and inserted in one step is written by its insert alone: find such pairs as
    # rows sharing a hash (one sort; neighbours), then compare their key columns
    order, ordered = sst_cache.hash_order(h)
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):
        if (np.diff(tie) == 1).any():
            return None  # three or more rows share a hash: let SQL match the keys
        a, b = order[tie], order[tie + 1]
        if (ins[a] & ins[b]).any():
            return None  # two inserts share a hash: let SQL match the keys
        mixed = ins[a] != ins[b]  # two deletes sharing a hash are two keys (unique per key and sign)
        deleted = np.where(ins[a], b, a)[mixed]
        inserted = np.where(ins[a], a, b)[mixed]
        same = rows_equal(delta, delta, pk, deleted, inserted)
        if same is None:
            return None
        dels[deleted[same]] = False
    rows = delta.select(cols)
    return pa.concat_tables([
        rows.filter(pa.array(ins)).append_column(DELETED, pa.array(np.zeros(int(ins.sum()), bool))),
        rows.filter(pa.array(dels)).append_column(DELETED, pa.array(np.ones(int(dels.sum()), bool)))])


def _state_writes_by_key_order(delta: pa.Table, cols: list[str], pk: list[str]) -> pa.Table | None:
    """_state_writes_in_arrow by one sort of exact key codes (integer keys without NULLs): the
    writes come out in key order, so the state file's sort finds nothing left to do. None when the
    key cannot be coded, or when a key appears other than as one delete and/or one insert."""
    codes = sst_cache.order_codes(delta, pk) if delta.num_rows > 1 else None
    if codes is None:
        return None
    if sst_cache.ascending(codes):  # one row per key, in key order already: every row is a write
        ins = delta.column(W).to_numpy() > 0
        return in_key_order(delta.select(cols).append_column(DELETED, pa.array(~ins)), pk)
    order, ordered = sst_cache.sorted_order(codes)
    ins = delta.column(W).to_numpy()[order] > 0
    keep = np.ones(len(order), bool)
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):
        if (np.diff(tie) == 1).any() or (ins[tie] == ins[tie + 1]).any():
            return None  # a key three times, or twice with one sign: not a consolidated delta's
        keep[np.where(ins[tie], tie + 1, tie)] = False  # a key deleted and inserted: its insert writes it
    writes = delta.select(cols).take(pa.array(order[keep])).append_column(DELETED, pa.array(~ins[keep]))
    return in_key_order(writes, pk)


def micros(column: str) -> str:
    """A timestamp column (SQL) as microseconds since 1970: the unit of watermarks."""
    return f"date_diff('microsecond', TIMESTAMP '1970-01-01 00:00:00', CAST({column} AS TIMESTAMP))"


def render(e: exp.Expression) -> str:
    """An expression over positional columns in DuckDB's dialect (its type annotations kept)."""
    return e.sql(dialect="duckdb")


def state_upsert_sql(cols: list[str], pk: list[str], source: str = "d") -> str:
    """State writes for a consolidated delta whose rows are unique per `pk`: inserted rows are put,
    keys left with only deletions become tombstones."""
    c = col_list(cols)
    return (
        f"SELECT {c}, false AS {DELETED} FROM {source} WHERE {W} > 0 "
        f"UNION ALL SELECT {c}, true AS {DELETED} FROM {source} rw_a WHERE {W} < 0 AND NOT EXISTS "
        f"(SELECT 1 FROM {source} rw_b WHERE rw_b.{W} > 0 AND {null_safe_eq(pk, pk, 'rw_a', 'rw_b')})"
    )


class Operator:
    """One node of a view's dataflow. `apply` turns the input deltas of one step into the output delta."""

    def __init__(self, node: Node, ctx):
        self.node = node
        self.ctx = ctx
        self.engine = ctx.engine

    def state_tables(self) -> dict[str, tuple]:
        """The state this operator keeps: name -> (primary key, schema[, table class, when not a
        StateTable]). Empty for stateless ones."""
        return {}

    def state(self, name: str):
        return self.ctx.state_table(self.node.id, name, *self.state_tables()[name])

    def apply(self, inputs: list):
        raise NotImplementedError

    def sql(self, query: str, shared: bool = False, **rels):
        return self.engine.sql(query, shared=shared, **rels)

    def shared(self, *relations) -> list:
        """Relations (input deltas, lookups) that this operator reads more than once: on Spark each
        computed once, now (Engine.shared), not again by each rule reading it."""
        return [self.engine.shared(r) for r in relations]
