"""The logical plan of a materialized view: operator nodes, their columns and their stream keys.

Every node names its output columns positionally (`c0`, `c1`, ...); expressions inside a node refer
to its child's columns by those names, so operators can be rendered to SQL without any user
identifiers. Stream keys are lists of output positions, derived bottom-up (docs/architecture.md,
"Stream keys").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp


@dataclass
class Col:
    name: str  # the user-facing name (hidden columns start with `_rw_`)
    type: str  # canonical SQL type (see dagster_rw.types)
    hidden: bool = False


# the alias of `SELECT * FROM (query) AS _rw_view_columns(a, b)`, which names a view's outputs
# from the column list after its name (`CREATE MATERIALIZED VIEW v (a, b) AS query`): exactly as
# many names as the query has outputs
VIEW_COLUMNS = "_rw_view_columns"


def cname(i: int) -> str:
    return f"c{i}"


@dataclass(eq=False)
class Node:
    columns: list[Col] = field(default_factory=list)
    stream_key: list[int] = field(default_factory=list)
    id: int = -1

    @property
    def children(self) -> list[Node]:
        return []

    def walk(self):
        for c in self.children:
            yield from c.walk()
        yield self


@dataclass(eq=False)
class Scan(Node):
    """The change stream of a table or view (`source`), read from its change log."""

    source: str = ""


@dataclass(eq=False)
class Values(Node):
    """One row of one hidden column, once: what a SELECT without FROM reads (PostgreSQL's Result).
    It emits its row when the view is created and nothing after; stream key: none (one row)."""


@dataclass(eq=False)
class Map(Node):
    """Filter then project: stateless, applied to the delta alone."""

    child: Node | None = None
    exprs: list[exp.Expression] = field(default_factory=list)
    where: exp.Expression | None = None
    # the same in forms that give NULL where a value cannot be computed, and the checks that count
    # those values (sql.non_strict.NonStrict); None when no expression can fail
    non_strict: object = None

    @property
    def children(self):
        return [self.child]


@dataclass(eq=False)
class Changelog(Node):
    """RisingWave's changelog CTE (`WITH c AS CHANGELOG FROM t`): every change of its input (a
    table's or view's scan) as an appended row, with `changelog_op` (1 insert, 2 delete, 3 the new
    row of an update, 4 its old row) and the epoch of the step that saw it (hidden), or with
    `row_ids` `_changelog_row_id`: the epoch times 2**32 plus the change's number in the step (by
    the input's key, a key's removal before its insertion). Stateless. Columns: the input's,
    changelog_op, the epoch or row id; stream key: the input's key, the op, the epoch or row id."""

    child: Node | None = None
    row_ids: bool = False

    @property
    def children(self):
        return [self.child]


@dataclass(eq=False)
class ProjectSet(Node):
    """A select list with one set-returning function: each input row becomes one row per element
    of `unnest(array)`, or per value of `generate_series(start, stop[, step])` (PostgreSQL's and
    RisingWave's ProjectSet). Stateless: a row's change is the change of all its rows.

    The child (a Map) computes the select list, with the function's array (or start) at
    `position`, then the series' stop (`kind` "series") and the input's stream key columns the
    select list does not pass through. The output is the select list with the element at
    `position`, those key columns, and the element's ordinal (0-based, hidden): the stream key is
    the input's key columns and the ordinal."""

    child: Node | None = None
    kind: str = "unnest"  # or "series"
    position: int = 0
    width: int = 0  # visible output columns (the select list)
    step: int = 1  # generate_series' step (a nonzero constant)

    @property
    def children(self):
        return [self.child]

    @property
    def extra(self) -> int:
        """Child columns between the select list and the key columns (the series' stop)."""
        return 1 if self.kind == "series" else 0


@dataclass(eq=False)
class Join(Node):
    """A join (inner, left, right or full) on equalities of its keys, with an optional residual
    condition; an inner join without keys is a nested-loop join (its condition the residual)."""

    left: Node | None = None
    right: Node | None = None
    kind: str = "inner"
    left_keys: list[int] = field(default_factory=list)
    right_keys: list[int] = field(default_factory=list)
    residual: exp.Expression | None = None  # over the combined columns c0.. (left then right)
    # output positions nothing above the join reads (nor its keys): an inner join keeps them out
    # of its state and outputs NULL there (set by prune_columns)
    unused: list[int] = field(default_factory=list)

    @property
    def children(self):
        return [self.left, self.right]


@dataclass(eq=False)
class AsofJoin(Join):
    """`ASOF [LEFT] JOIN ... ON equalities AND one inequality`: each left row meets, among the right
    rows with its join keys, the one closest to it by the inequality (`left.c<asof_left> asof_op
    right.c<asof_right>`: for > and >= the greatest right value below, for < and <= the least
    above); a LEFT one keeps left rows that meet none, padded with NULLs. `residual` is None."""

    asof_left: int = 0  # a column of the left child
    asof_right: int = 0  # a column of the right child
    asof_op: str = ">="


@dataclass(eq=False)
class LookupJoin(Join):
    """A temporal join, `JOIN dim FOR SYSTEM_TIME AS OF PROCTIME()`: each row of the left stream is
    joined with the dimension's committed state when the row is processed; later changes to the
    dimension never retract earlier output. `right` is the dimension's Scan. `dimension` is the
    object looked up: the dimension itself, when the join keys cover its primary key (a left row
    meets at most one dimension row), or an index on it holding every column of it, when they cover
    the index's key (a left row may meet several; the stream key then adds the dimension's key).
    `lookup_key`: the positions in `right` of the columns looked up by (the primary key's or the
    index key's, in order). `kind` is inner or left.
    `memo`: the left side may retract rows (it is not append-only), so the join keeps what it
    emitted for each left row, and a retracted left row retracts exactly that."""

    dimension: str = ""
    memo: bool = False
    lookup_key: list = field(default_factory=list)


@dataclass(eq=False)
class DynamicFilter(Node):
    """The rows of `left` whose column `column` compares (`op`: >, >=, < or <=) with the current
    value of `right`, a relation of at most one row (a global aggregate or a top-1) whose column 0
    holds that value, of the same type: `WHERE v > (SELECT max(x) FROM t)`. No row, or a NULL
    value, lets no row through. Output: the left's columns; stream key: the left's."""

    left: Node | None = None
    right: Node | None = None
    column: int = 0
    op: str = ">"

    @property
    def children(self):
        return [self.left, self.right]


@dataclass
class Agg:
    func: str  # count_star, count, sum, avg, min, max, string_agg, first_value, last_value, array_agg, and
    # the ordered-set aggregates percentile_cont, percentile_disc, mode, approx_percentile
    arg: int | None = None  # child column (an ordered-set aggregate's: its WITHIN GROUP ORDER BY key)
    distinct: bool = False
    extra: list[int] = field(default_factory=list)  # further argument columns (STRING_AGG's delimiter)
    order: list[tuple[int, bool, bool]] = field(default_factory=list)  # ORDER BY: (child column, desc, nulls first)
    direct: tuple[float, ...] = ()  # an ordered-set aggregate's constant arguments (fraction, relative error)


# ordered-set aggregates (`f(fraction) WITHIN GROUP (ORDER BY x)`): a result read from the group's
# values in order, NULLs ignored
ORDERED_SET_AGGS = ("percentile_cont", "percentile_disc", "mode", "approx_percentile")
# results that depend on the order of the input, recomputed from a touched group's rows
ORDERED_AGGS = ("string_agg", "first_value", "last_value", "array_agg") + ORDERED_SET_AGGS


def agg_text(child: Node, a: Agg) -> str:
    """An aggregate call as text over its input's column names: count(distinct x), or
    string_agg(s, sep ORDER BY k DESC), or percentile_cont(0.5) WITHIN GROUP (ORDER BY x)."""
    if a.func in ORDERED_SET_AGGS:
        direct = ", ".join(repr(x) for x in a.direct)
        return (f"{a.func}({direct}) WITHIN GROUP (ORDER BY {child.columns[a.arg].name}"
                f"{' DESC' if a.order and a.order[0][1] else ''})")
    args = [child.columns[a.arg].name if a.arg is not None else "*"] + [child.columns[x].name for x in a.extra]
    order = ", ".join(f"{child.columns[o].name}{' DESC' if desc else ''}" for o, desc, _ in a.order)
    return (f"{'count' if a.func == 'count_star' else a.func}({'distinct ' if a.distinct else ''}{', '.join(args)}"
            f"{' ORDER BY ' + order if order else ''})")


@dataclass(eq=False)
class Aggregate(Node):
    """GROUP BY (or a global aggregate when `group` is empty); output = group columns then aggregates."""

    child: Node | None = None
    group: list[int] = field(default_factory=list)
    aggs: list[Agg] = field(default_factory=list)

    @property
    def children(self):
        return [self.child]

    @property
    def is_global(self) -> bool:
        return not self.group


@dataclass(eq=False)
class WindowCloseAggregate(Aggregate):
    """GROUP BY a time window, EMIT ON WINDOW CLOSE: a window's rows wait in a buffer until the
    watermark of `source` passes the window's end; then its groups are computed, emitted once
    (inserts only), and its rows dropped. Rows of windows already closed are late and ignored.

    `window` is the child column holding window_start (`window_is_start`) or window_end."""

    window: int = 0
    window_is_start: bool = True
    size_us: int = 0
    source: str = ""


@dataclass(eq=False)
class WindowCloseFilter(Node):
    """EMIT ON WINDOW CLOSE over rows (no aggregation): each row of the (append-only) child is
    emitted once the watermark of `source` has passed its event time (column `column`); rows
    that arrive behind the watermark are late and dropped. Output and stream key: the child's."""

    child: Node | None = None
    column: int = 0
    source: str = ""

    @property
    def children(self):
        return [self.child]


@dataclass
class TimeBound:
    """One comparison of a temporal filter: the compared column `op` (>, >=, <, <=) `bound`, an
    expression of now() (written as the column `rw_now`) that never decreases as now() grows
    (now() plus or minus a constant interval)."""

    op: str
    bound: exp.Expression

    @property
    def is_lower(self) -> bool:
        """A lower bound (>, >=): as now() grows, rows leave and never come back."""
        return self.op in (">", ">=")


NOW = "rw_now"  # how a TimeBound's expression names now()


@dataclass(eq=False)
class TemporalFilter(Node):
    """RisingWave's temporal filter (`WHERE ts > now() - INTERVAL '1 hour'`): the rows of `child`
    whose column `column` (a TIMESTAMP or TIMESTAMPTZ) compares with every one of `bounds` as of
    now(), which in a view is the barrier time of the epoch a step reaches, never decreasing from
    one step to the next. Lower bounds let rows leave as time passes, upper bounds (<, <=) let
    them enter. Output and stream key: the child's."""

    child: Node | None = None
    column: int = 0
    bounds: list[TimeBound] = field(default_factory=list)

    @property
    def children(self):
        return [self.child]


@dataclass(eq=False)
class UnionAll(Node):
    """Bag union; output = the visible columns, a branch number, then each branch's key columns."""

    inputs: list[Node] = field(default_factory=list)
    visible: int = 0

    @property
    def children(self):
        return list(self.inputs)


@dataclass
class OrderKey:
    column: int
    desc: bool = False
    nulls_first: bool = False


@dataclass(eq=False)
class TopN(Node):
    """ORDER BY ... LIMIT n [OFFSET m]: the first rows of the child in that order (ties by stream key).
    With `with_ties` (FETCH FIRST n ROWS WITH TIES, no offset): also every row tied with the n-th."""

    child: Node | None = None
    order: list[OrderKey] = field(default_factory=list)
    limit: int = 0
    offset: int = 0
    with_ties: bool = False

    @property
    def children(self):
        return [self.child]


@dataclass(eq=False)
class OverWindow(Node):
    """A window function OVER (PARTITION BY ... ORDER BY ... [ROWS | RANGE frame]): a ranking one
    (row_number, rank, dense_rank), an offset one (lag, lead: the value `offset` rows before or
    after, else `default`), a value one (first_value, last_value, nth_value: the argument at the
    frame's first, last or `offset`-th row) or an aggregate (count, sum, avg, min, max) over a child
    column (`arg`; None for count(*)). The child's columns, then the function's value as one more column (typed as
    the last column says). Stream key: the child's."""

    child: Node | None = None
    func: str = "row_number"  # row_number, rank, dense_rank, lag, lead, first_value, last_value, nth_value,
    # count, sum, avg, min, max
    partition: list[int] = field(default_factory=list)  # child columns
    order: list[OrderKey] = field(default_factory=list)  # over child columns
    arg: int | None = None  # an aggregate's, lag/lead's or a value function's argument (child column)
    frame: str = ""  # "ROWS | RANGE BETWEEN ... AND ...", or "" for SQL's default frame
    offset: int = 1  # lag / lead: how many rows back / ahead; nth_value: n
    default: int | None = None  # lag / lead: the child column giving the value past the partition's edge

    @property
    def children(self):
        return [self.child]


def number_nodes(root: Node) -> Node:
    for i, node in enumerate(root.walk()):
        node.id = i
    return root


def prune_columns(root: Node) -> Node:
    """Mark, on every join, the output columns that nothing above it reads: not the view's output,
    not a key or an expression, filter, group or argument of any operator above, not a stream key
    on the way (RisingWave's column pruning, as far as joins go: a fact table's columns a view never
    uses stay out of the join's state). Operators this does not know read all their input."""
    nodes = list(root.walk())
    if len({id(n) for n in nodes}) != len(nodes):
        return root  # a node feeding two operators: leave every column
    needed: dict[int, set[int]] = {id(root): set(range(len(root.columns)))}
    for node in reversed(nodes):  # parents before their children
        out = needed.get(id(node), set()) | set(node.stream_key)
        if isinstance(node, Join) and type(node) is Join:
            node.unused = sorted(set(range(len(node.columns))) - out - _join_reads(node))
        for child, wants in zip(node.children, _child_reads(node, out)):
            needed[id(child)] = needed.get(id(child), set()) | wants | set(child.stream_key)
    return root


def scan_reads(root: Node) -> dict[str, set[str]]:
    """Per object the plan scans, the names of its columns the plan reads: the view's output,
    keys, expressions, filters, groups and arguments traced down to the scan, stream keys on the
    way (every column, for operators prune_columns does not know or a node feeding two)."""
    nodes = list(root.walk())
    reads: dict[str, set[str]] = {}
    if len({id(n) for n in nodes}) != len(nodes):
        for node in nodes:
            if isinstance(node, Scan):
                reads.setdefault(node.source, set()).update(c.name for c in node.columns)
        return reads
    needed: dict[int, set[int]] = {id(root): set(range(len(root.columns)))}
    for node in reversed(nodes):  # parents before their children
        out = needed.get(id(node), set()) | set(node.stream_key)
        if isinstance(node, Scan):
            reads.setdefault(node.source, set()).update(node.columns[i].name for i in out if i < len(node.columns))
        for child, wants in zip(node.children, _child_reads(node, out)):
            needed[id(child)] = needed.get(id(child), set()) | wants | set(child.stream_key)
    return reads


def _refs(e: exp.Expression | None) -> set[int] | None:
    """Positions of the columns `c<i>` an expression reads; None when it reads anything else."""
    out: set[int] = set()
    if e is None:
        return out
    for col in e.find_all(exp.Column):
        name = col.name
        if col.table or not (name.startswith("c") and name[1:].isdigit()):
            return None
        out.add(int(name[1:]))
    return out


def _join_reads(node: Join) -> set[int]:
    """Output positions a join itself reads: its keys and its residual condition's columns."""
    nl = len(node.left.columns)
    residual = _refs(node.residual)
    if residual is None:
        return set(range(len(node.columns)))
    return set(node.left_keys) | {nl + k for k in node.right_keys} | residual


def _child_reads(node: Node, out: set[int]) -> list[set[int]]:
    """For each child of `node`, the positions of its columns `node` reads to produce the output
    columns `out` (all of them for operators not known here)."""
    every = [set(range(len(c.columns))) for c in node.children]
    if type(node) is Map:
        reads = _refs(node.where)
        for i in out:
            more = _refs(node.exprs[i]) if i < len(node.exprs) else None
            if reads is None or more is None:
                return every
            reads |= more
        return [reads]
    if type(node) is Join:
        nl = len(node.left.columns)
        wants = out | _join_reads(node)
        return [{i for i in wants if i < nl}, {i - nl for i in wants if i >= nl}]
    if type(node) is Aggregate:
        reads = set(node.group)
        for a in node.aggs:
            reads |= ({a.arg} if a.arg is not None else set()) | set(a.extra) | {o for o, _, _ in a.order}
        return [reads]
    return every
