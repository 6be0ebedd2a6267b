"""Hash aggregation (GROUP BY, global aggregates, DISTINCT), correct under inserts, updates and deletes.

State strategies, chosen per aggregate:
- value state (`acc`): per group the row count and, per SUM/AVG/COUNT, a running sum and non-null
  count; a step adds the delta's partial sums to the touched groups only.
- materialized input (`vcount<i>`): for MIN, MAX and COUNT(DISTINCT), per group the count of each
  distinct value, kept as count changes (a CountTable: a step writes changes without reading old
  counts). An insert can only improve the extreme; when a delete removes the last copy of the
  current extreme, that group's values are read back (the group's slice of the sorted state).
"""
from __future__ import annotations

from .general import AggregateOp
from .value_state import MINPUT

__all__ = ["AggregateOp", "MINPUT"]
