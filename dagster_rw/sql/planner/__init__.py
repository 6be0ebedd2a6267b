"""From a parsed SELECT to a logical plan: bind names, split joins, place aggregates, derive stream keys.

Anything the incremental operators cannot maintain is refused here, at CREATE time, with a
ProgrammingError that names the construct and its position.

Every query the planner plans first goes through the rewrite rules (sql/rewrites, applied in
Queries.plan_query). Planner is made of one class per concern, each in a module of its own:

- queries: the entry point (plan), CTEs, UNION, and a SELECT's clauses in the order they are planned
- scope, binding: the names in scope, expressions bound to a node's columns, projections (Map)
- from_items, joins, time_windows: FROM (tables, derived tables, joins, lookup joins, dynamic
  filters, TUMBLE and HOP)
- subqueries: subqueries of WHERE as joins and dynamic filters
- laterals: LATERAL subqueries of FROM as joins
- aggregates, bit_aggregates, window_functions, order_limit, set_returning: GROUP BY and DISTINCT,
  bit_and / bit_or / bit_xor as counts per bit, OVER, ORDER BY with LIMIT, unnest and generate_series
- window_close: EMIT ON WINDOW CLOSE
- temporal_filters: WHERE conjuncts comparing a time with now() (rows enter and leave as time passes)
"""
from __future__ import annotations

from ...engine.duck import DuckEngine
from ..syntax import output_name as _output_name  # noqa: F401 - the name dbapi imports from here
from .aggregates import Aggregates
from .bit_aggregates import BitAggregates
from .binding import Binding
from .from_items import FromItems
from .gap_fill import GapFill
from .joins import Joins
from .laterals import Laterals
from .order_limit import OrderLimit
from .queries import Queries
from .set_returning import SetReturning
from .subqueries import Subqueries
from .temporal_filters import TemporalFilters
from .time_windows import TimeWindows
from .window_close import WindowClose
from .window_functions import WindowFunctions


class Planner(Queries, FromItems, GapFill, Joins, TimeWindows, Subqueries, Laterals, Aggregates, BitAggregates,
              WindowFunctions, OrderLimit, SetReturning, WindowClose, TemporalFilters, Binding):
    """Plans one query against a catalog. `resolve_object(name)` returns a CatalogObject or None."""

    def __init__(self, resolve_object, sql: str, obj_name: str | None = None, engine: DuckEngine | None = None,
                 indexes=None):
        self.resolve_object = resolve_object
        self.indexes = indexes or (lambda name: [])  # name -> the indexes on that object (temporal joins)
        self.sql = sql
        self.obj = obj_name
        self.engine = engine or DuckEngine(threads=1)
        self.inputs: list[str] = []
        self.ctes: dict = {}  # WITH query name -> (its body, the WITH queries its body sees)
        self._group_counter = 0
        self._subquery_counter = 0  # FROM items made of subqueries of WHERE (subquery_join)
        # window Maps of TUMBLE/HOP: id(node) -> (time column in the child, window_start, window_end, size)
        self.window_maps: dict[int, tuple[int, int, int, int]] = {}
        self.window_close = False  # planning a view that emits on window close (set by plan)
