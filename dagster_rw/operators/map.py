"""Map (filter, then project): linear, so its delta is the rule applied to the input delta.

Expressions are evaluated non-strictly (sql.non_strict): a value that cannot be computed (an
integer overflow, a bad cast, a division by zero) is NULL, the row is kept, and the failures are
counted in the `errors` state table, one row per failing expression and step, committed with the
step (queryable as `rw_view_errors`).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .. import types as sqltypes
from ..engine.duck import quote
from ..sql.plan import cname
from ..storage.state_table import DELETED
from .arrow_eval import evaluate
from .base import Operator, W, render

ERRORS = "errors"  # the state table of the values a view's expressions could not compute
ERROR_SCHEMA = pa.schema([("epoch", pa.int64()), ("check", pa.int32()), ("expression", pa.string()),
                          ("error", pa.string()), ("count", pa.int64()), ("example", pa.string())])
ERROR_KEY = ["epoch", "check"]
_KEEP = "_rw_keep"


class MapOp(Operator):
    def state_tables(self):
        return {ERRORS: (ERROR_KEY, ERROR_SCHEMA)} if self.node.non_strict is not None else {}

    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        if isinstance(d, pa.Table) and node.where is None and all(
                isinstance(e, exp.Column) and not e.table for e in node.exprs):
            # a pure projection: select and rename the columns, no SQL needed
            return d.select([e.name for e in node.exprs] + [W]).rename_columns(
                [cname(i) for i in range(len(node.exprs))] + [W])
        if isinstance(d, pa.Table):
            # Arrow's kernels where they can, for deltas of any size (they give up on any value that
            # cannot be computed: what they answer has none, so the non-strict form has nothing to count)
            types = [sqltypes.arrow_type(c.type) for c in node.columns]
            done = evaluate(d, node.exprs, node.where, types)
            if done is not None:
                columns, mask = done
                w = d.column(W) if mask is None else d.column(W).filter(mask)
                return pa.table(columns + [w], names=[cname(i) for i in range(len(columns))] + [W])
        if node.non_strict is not None:
            return self.apply_non_strict(d)
        select = ", ".join(f"{render(e)} AS {quote(cname(i))}" for i, e in enumerate(node.exprs))
        where = f" WHERE {render(node.where)}" if node.where is not None else ""
        return self.sql(f"SELECT {select + ', ' if select else ''}{W} FROM d{where}", d=d)

    def apply_non_strict(self, d):
        """The map in its non-strict form: every row's values and, per check, whether it failed
        there and the failing values; the counts go to the errors table, the rows kept on."""
        ns = self.node.non_strict
        keep = f"COALESCE({render(ns.where)}, FALSE)" if ns.where is not None else "TRUE"
        parts = [f"{render(e)} AS {quote(cname(i))}" for i, e in enumerate(ns.exprs)]
        parts += [W, f"{keep} AS {_KEEP}"]
        for k, check in enumerate(ns.checks):
            failed = render(check.condition) if check.in_where else f"{keep} AND ({render(check.condition)})"
            parts.append(f"CASE WHEN {failed} THEN {render(check.example)} END AS {quote(f'_rw_x{k}')}")
        rel = self.sql(f"SELECT {', '.join(parts)} FROM d", d=d)
        out = [cname(i) for i in range(len(ns.exprs))] + [W]
        examples = [f"_rw_x{k}" for k in range(len(ns.checks))]
        if isinstance(rel, pa.Table):
            failures = [(rel.num_rows - rel.column(x).null_count, pc.min(rel.column(x)).as_py()) for x in examples]
            kept = rel.filter(rel.column(_KEEP)).select(out)
        else:
            stats = self.engine.to_arrow(self.sql(
                "SELECT " + ", ".join(f"count({quote(x)}) AS {quote(f'n{k}')}, min({quote(x)}) AS {quote(f'm{k}')}"
                                      for k, x in enumerate(examples)) + " FROM r", r=rel))
            failures = [(stats.column(f"n{k}")[0].as_py(), stats.column(f"m{k}")[0].as_py())
                        for k in range(len(examples))]
            kept = self.sql(f"SELECT {', '.join(quote(c) for c in out)} FROM r WHERE {_KEEP}", r=rel)
        self.record(failures)
        return kept

    def record(self, failures: list[tuple[int, str | None]]) -> None:
        """Stage one row per check that failed in this step: its count and the least failing values."""
        checks = self.node.non_strict.checks
        rows = [(k, n, example) for k, (n, example) in enumerate(failures) if n]
        if not rows:
            return
        table = pa.table([
            pa.array(np.full(len(rows), self.ctx.target, np.int64)),
            pa.array([k for k, _, _ in rows], pa.int32()),
            pa.array([checks[k].expression for k, _, _ in rows], pa.string()),
            pa.array([checks[k].error for k, _, _ in rows], pa.string()),
            pa.array([n for _, n, _ in rows], pa.int64()),
            pa.array([x for _, _, x in rows], pa.string()),
            pa.array(np.zeros(len(rows), bool)),
        ], names=ERROR_SCHEMA.names + [DELETED])
        self.state(ERRORS).stage(table)
