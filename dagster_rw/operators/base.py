"""What every incremental operator shares: the delta convention, consolidation and SQL helpers.

A delta is a relation with the operator's columns `c0..cN` plus `_w`, a signed weight (+1 insert,
-1 delete, an update is a -1/+1 pair). Consolidation adds up weights per row and drops zeros, so
applying a delta never depends on the order of changes inside an epoch.
"""
from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import Node, cname

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

    def state_tables(self) -> dict[str, tuple[list[str], pa.Schema]]:
        """The state this operator keeps: name -> (primary key, schema). Empty for stateless ones."""
        return {}

    def state(self, name: str):
        pk, schema = self.state_tables()[name]
        return self.ctx.state_table(self.node.id, name, pk, schema)

    def apply(self, inputs: list):
        raise NotImplementedError

    def sql(self, query: str, **rels):
        return self.engine.sql(query, **rels)
