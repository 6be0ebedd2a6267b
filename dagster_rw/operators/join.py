"""Inner join: d(L join R) = dL join R_old + L_old join dR + dL join dR.

State: each side's rows indexed by (join key, stream key); a step looks up only the rows whose
join key appears in the other side's delta. Without a join key (a cross join, or a condition of
comparisons alone: a nested-loop join) the state is keyed by the stream key and a side's delta
meets the whole of the other side's state: correct at any size, cheap when that side is small
(a global aggregate's one row).

A deferred side: a back-fill on Spark keeps no state for the join's larger side when that side is
a table or view read through filters and projections alone (an option, `deferred_join_state`).
Such state would be a full copy of the input, sorted by the join key, and is read only when the
other side changes: while it does not, each step joins the side's change with the other side's
state (dL join R_old) and writes nothing for it. The first step whose other side changes builds
the state from the input's own rows as of the step's epoch, L = L_old + dL, and joins it with the
change: L_old join dR + dL join dR = L join dR. From then on the side is kept as any other.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import Map, Scan, TemporalFilter, WindowCloseAggregate, WindowCloseFilter, cname
from ..storage.catalog import SOURCE
from .base import (
    Operator,
    W,
    col_list,
    consolidate,
    consolidate_sql,
    delta_schema,
    eq,
    row_schema,
    state_writes,
)


class JoinSides:
    """Helpers shared by the inner and outer join operators."""

    node = None
    prunes = False  # keep the columns nothing above reads out of the state (an inner join)

    def unused(self) -> set[int]:
        """Output positions left out of the state and output as NULL (Join.unused)."""
        return set(self.node.unused) if self.prunes else set()

    def side_pk(self, side: str) -> list[str]:
        child = self.node.left if side == "left" else self.node.right
        keys = self.node.left_keys if side == "left" else self.node.right_keys
        pk = [cname(k) for k in keys]
        for k in child.stream_key:
            if cname(k) not in pk:
                pk.append(cname(k))
        return pk

    def state_tables(self):
        left, right = row_schema(self.node.left), row_schema(self.node.right)
        return {
            "left": (self.side_pk("left"), pa.schema([left.field(c) for c in self.lcols()])),
            "right": (self.side_pk("right"), pa.schema([right.field(c) for c in self.rcols()])),
        }

    def lcols(self):
        """The left side's columns the join keeps (in its state and its output)."""
        unused = self.unused()
        return [cname(i) for i in range(len(self.node.left.columns)) if i not in unused]

    def rcols(self):
        nl, unused = len(self.node.left.columns), self.unused()
        return [cname(i) for i in range(len(self.node.right.columns)) if nl + i not in unused]

    def lkeys(self):
        return [cname(k) for k in self.node.left_keys]

    def rkeys(self):
        return [cname(k) for k in self.node.right_keys]

    def output_select(self, weight: str) -> str:
        nl, unused = len(self.node.left.columns), self.unused()
        out = []
        for i, col in enumerate(self.node.columns):
            if i in unused:
                out.append(f"CAST(NULL AS {sqltypes.duckdb_type(col.type)}) AS {quote(cname(i))}")
            else:
                out.append(f"{'l' if i < nl else 'r'}.{quote(cname(i if i < nl else i - nl))} AS {quote(cname(i))}")
        return ", ".join(out + [f"{weight} AS {W}"])

    def condition(self) -> str:
        cond = eq(self.lkeys(), self.rkeys(), "l", "r")
        if self.node.residual is not None:
            # the residual numbers right-side columns after the left ones; qualify each column in
            # place (replacing the nodes would drop the types that keep integer division exact)
            nl = len(self.node.left.columns)
            residual = self.node.residual.copy()
            for col in residual.find_all(exp.Column):
                i = int(col.name[1:])
                if i >= nl:
                    col.set("this", exp.to_identifier(cname(i - nl)))
                col.set("table", exp.to_identifier("r" if i >= nl else "l"))
            cond += f" AND ({residual.sql(dialect='duckdb')})"
        return cond

    def stage_sides(self, dl, dr) -> None:
        for side, delta, cols in (("left", dl, self.lcols()), ("right", dr, self.rcols())):
            if isinstance(delta, pa.Table) and not delta.num_rows:
                continue  # (a Spark delta is not counted: that would be a job of its own)
            if self.is_deferred(side):
                continue
            table = self.state(side)
            table.stage(partial(state_writes, self.engine, delta, cols, self.side_pk(side), not table.files))

    def state_name(self, side: str) -> str:
        return f"op{self.node.id}.{side}"

    def is_deferred(self, side: str) -> bool:
        return self.state_name(side) in self.ctx.deferred

    def deferrable(self, side: str) -> str | None:
        """The object a side reads when it is that object's rows through filters and projections
        that record nothing (whose state can be built later from the object's own), else None."""
        node = self.node.left if side == "left" else self.node.right
        while isinstance(node, Map) and node.non_strict is None:
            node = node.child
        if isinstance(node, Scan) and self.ctx.wh.catalog().get(node.source).kind != SOURCE:
            return node.source
        return None

    def side_changed(self, side: str, delta) -> bool:
        """Whether a side's delta has rows (a back-fill's count as none here): counted in-process;
        on Spark (where counting is a job of its own), whether an object it reads committed
        changes in the step's epochs, when nothing else (a clock, a watermark) can change it."""
        if self.ctx.backfill:
            return False
        if isinstance(delta, pa.Table):
            return delta.num_rows > 0
        node = self.node.left if side == "left" else self.node.right
        leaves = [n for n in node.walk() if not n.children]
        if all(isinstance(n, Scan) for n in leaves) and not any(
                isinstance(n, (TemporalFilter, WindowCloseFilter, WindowCloseAggregate)) for n in node.walk()):
            return any(self.ctx.input_changed(n.source) for n in leaves)
        return True

    def defer_at_backfill(self) -> None:
        """A back-fill (on Spark) leaves the larger deferrable side's state unbuilt."""
        if not self.ctx.may_defer("join_state"):
            return
        sizes = {side: self.ctx.object_rows(src) for side in ("left", "right")
                 if (src := self.deferrable(side)) is not None}
        if sizes:
            side = max(sizes, key=lambda s: (sizes[s], s == "left"))
            self.ctx.deferred.append(self.state_name(side))

    def build_deferred(self, side: str):
        """A deferred side's rows as of the step's epoch (its change included), staged as its
        state's first writes: from now on the side is kept."""
        node, cols = (self.node.left, self.lcols()) if side == "left" else (self.node.right, self.rcols())
        rows = self.engine.shared(self.ctx.rows_at_target(node))
        self.ctx.deferred.remove(self.state_name(side))
        table = self.state(side)
        table.stage(partial(state_writes, self.engine, rows, cols, self.side_pk(side), True))
        return rows

    def touched_sides(self, dl, dr):
        """For the joins that recompute the join keys a step touched: each side's rows with a key
        either delta touched, before and after the step, as weighted rows (lo, ro, ln, rn)."""
        lk, rk = self.lkeys(), self.rkeys()
        keys = self.sql(
            f"SELECT {col_list(lk)} FROM kl UNION SELECT {col_list(lk)} FROM kr",
            shared=True, kl=self.keys_of(dl, lk, lk), kr=self.keys_of(dr, rk, lk),
        )
        l_old = self.state("left").lookup(keys, lk)
        r_old = self.state("right").lookup(self.sql(
            "SELECT " + ", ".join(f"{quote(a)} AS {quote(b)}" for a, b in zip(lk, rk)) + " FROM k", k=keys), rk)
        unit = f"CAST(1 AS BIGINT) AS {W}"
        lo, ro = self.shared(self.sql(f"SELECT {col_list(self.lcols())}, {unit} FROM s", s=l_old),
                             self.sql(f"SELECT {col_list(self.rcols())}, {unit} FROM s", s=r_old))
        return lo, ro, self._after(lo, dl, self.lcols(), lk), self._after(ro, dr, self.rcols(), rk)

    def _after(self, old, delta, cols: list[str], keys: list[str]):
        """A side's rows of the touched keys after the step: the old ones and the delta's rows with
        non-NULL keys (NULL keys never match), their weights added up."""
        nonnull = " AND ".join(f"{quote(c)} IS NOT NULL" for c in keys)
        return self.sql(consolidate_sql(cols, "u"), u=self.sql(
            f"SELECT {col_list(cols)}, {W} FROM o UNION ALL SELECT {col_list(cols)}, {W} FROM d WHERE {nonnull}",
            o=old, d=delta))

    def keys_of(self, delta, cols: list[str], as_names: list[str]):
        """The join keys of a delta's rows under the other side's names (NULL keys never match)."""
        if isinstance(delta, pa.Table):
            keys = delta.select(cols).rename_columns(as_names)
            if any(keys.column(c).null_count for c in as_names):
                valid = None
                for c in as_names:
                    v = pc.is_valid(keys.column(c))
                    valid = v if valid is None else pc.and_(valid, v)
                keys = keys.filter(valid)
            return keys
        sel = ", ".join(f"{quote(c)} AS {quote(a)}" for c, a in zip(cols, as_names))
        nonnull = " AND ".join(f"{quote(c)} IS NOT NULL" for c in cols)
        return self.sql(f"SELECT DISTINCT {sel} FROM d WHERE {nonnull}", d=delta)


class InnerJoinOp(JoinSides, Operator):
    prunes = True

    def apply(self, inputs):
        dl, dr = self.shared(*inputs)  # read by the lookups, the join and the state writes
        changed_l, changed_r = (not isinstance(d, pa.Table) or d.num_rows > 0 for d in (dl, dr))
        self.defer_at_backfill()
        if self.is_deferred("left") and self.side_changed("right", dr):  # L_old join dR + dL join dR = L join dR
            return self.with_built_side("left", dl, dr, changed_l)
        if self.is_deferred("right") and self.side_changed("left", dl):
            return self.with_built_side("right", dr, dl, changed_r)
        cond = self.condition()
        parts, rels = [], {"dl": dl, "dr": dr}
        # an empty side's old state joins nothing (a backfill): its term is left out of the plan
        old_l, old_r = bool(self.state("left").files), bool(self.state("right").files)
        if changed_l and old_r:  # dL join R_old
            if not changed_r:
                gathered = self.gather(dl)
                if gathered is not None:
                    self.stage_sides(dl, dr)
                    return self.consolidated(gathered, [cname(i) for i in range(len(self.node.columns))])
            rels["rh"] = self.with_unit_weight(self.matching("right", dl), self.rcols())
            parts.append(f"SELECT {self.output_select('l.' + W)} FROM dl l JOIN rh r ON {cond}")
        if changed_r and old_l:  # L_old join dR
            rels["lh"] = self.with_unit_weight(self.matching("left", dr), self.lcols())
            parts.append(f"SELECT {self.output_select('r.' + W)} FROM lh l JOIN dr r ON {cond}")
        if changed_l and changed_r:  # dL join dR
            parts.append(f"SELECT {self.output_select(f'l.{W} * r.{W}')} FROM dl l JOIN dr r ON {cond}")
        self.stage_sides(dl, dr)
        out_cols = [cname(i) for i in range(len(self.node.columns))]
        if not parts:
            return delta_schema(self.node).empty_table()
        out = self.sql(" UNION ALL ".join(parts), **rels)
        return self.consolidated(out, out_cols)

    def with_built_side(self, side: str, own, other, own_changed: bool):
        """A step whose other side changed while `side` is deferred: the side's state is built, and
        the output is d_side join Other_old (when the side changed) + Side join d_other."""
        rows = self.build_deferred(side)
        cond = self.condition()
        left = side == "left"
        other_side = "right" if left else "left"
        other_cols = self.rcols() if left else self.lcols()
        parts, rels = [], {"own": own, "other": other, "rows": rows}
        l_, r_ = ("own", "oh") if left else ("oh", "own")
        if own_changed and self.state(other_side).files:  # dSide join Other_old
            rels["oh"] = self.with_unit_weight(self.matching(other_side, own), other_cols)
            w = f"{'l' if left else 'r'}.{W}"
            parts.append(f"SELECT {self.output_select(w)} FROM {l_} l JOIN {r_} r ON {cond}")
        l_, r_ = ("rows", "other") if left else ("other", "rows")
        parts.append(f"SELECT {self.output_select(f'l.{W} * r.{W}')} FROM {l_} l JOIN {r_} r ON {cond}")
        table = self.state(other_side)
        table.stage(partial(state_writes, self.engine, other, other_cols, self.side_pk(other_side), not table.files))
        out = self.sql(" UNION ALL ".join(parts), **rels)
        return self.consolidated(out, [cname(i) for i in range(len(self.node.columns))])

    def matching(self, side: str, other_delta):
        """The rows of a side's state that the other side's delta may meet: those with its join
        keys, or all of them when the join has no key (a nested-loop join)."""
        if side == "left":
            on, theirs = self.lkeys(), self.rkeys()
        else:
            on, theirs = self.rkeys(), self.lkeys()
        if not on:
            return self.state(side).read_all()
        return self.state(side).lookup(self.keys_of(other_delta, theirs, on), on)

    def consolidated(self, delta, cols: list[str]):
        """The join's output delta consolidated, unless it feeds an aggregate (which adds up)."""
        if self.node.id in self.ctx.unconsolidated:
            return delta
        return consolidate(self.engine, delta, cols)

    def gather(self, dl):
        """dL join R_old without SQL when each join key matches at most one right row (the join
        key is the right side's primary key, of integers): each left row finds its right row by
        binary search in the right state's files, and the two are put side by side."""
        if not isinstance(dl, pa.Table) or self.node.residual is not None or not self.rkeys() \
                or self.side_pk("right") != self.rkeys():
            return None
        nl, unused, schema = len(self.node.left.columns), self.unused(), delta_schema(self.node)
        # a right key column equals the left one it matched: read only the others from the state
        same = dict(zip(self.rkeys(), self.lkeys()))
        found = self.state("right").find(dl, self.lkeys(), [c for c in self.rcols() if c not in same])
        if found is None:
            return None
        matched, right = found
        # every left row matched, in order (a foreign key into a dimension): no copy needed
        every = len(matched) == dl.num_rows and (not len(matched) or (matched == np.arange(len(matched))).all())
        left = dl if every else dl.take(pa.array(matched))
        columns = [pa.nulls(left.num_rows, schema.field(i).type) if i in unused else
                   left.column(cname(i)) if i < nl else
                   left.column(same[cname(i - nl)]).cast(schema.field(i).type) if cname(i - nl) in same else
                   right.column(cname(i - nl))
                   for i in range(len(self.node.columns))]
        return pa.Table.from_arrays(columns + [left.column(W)], [cname(i) for i in range(len(columns))] + [W])

    def with_unit_weight(self, rel, cols):
        if isinstance(rel, pa.Table):
            return rel.select(cols).append_column(W, pa.array(np.ones(rel.num_rows, np.int64)))
        return self.sql(f"SELECT {col_list(cols)}, CAST(1 AS BIGINT) AS {W} FROM s", s=rel)


def any_null(cols: list[str], prefix: str) -> str:
    """SQL: a row of `prefix` has a NULL in one of `cols` (a join key that meets nothing)."""
    return "(" + " OR ".join(f"{prefix}.{quote(c)} IS NULL" for c in cols) + ")"


__all__ = ["InnerJoinOp", "JoinSides", "any_null"]
