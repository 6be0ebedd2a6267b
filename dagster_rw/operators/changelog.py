"""Changelog: each row of the input's delta becomes an inserted row carrying its operation, as
RisingWave's changelog CTE numbers them: 1 insert, 2 delete, 3 the new row of an update (its key
also lost a row in the step), 4 the old row of an update. The step's target epoch is carried as a
hidden column, so a key's changes in different steps are different rows; or, where the view reads
`_changelog_row_id`, the epoch times 2**32 plus the change's number in the step, ordered by the
input's key (all columns without one) with a key's removal first: increasing in the order of the
changes, across steps too. (Numbering is one sort of the step's changes: on Spark, in one task.)
Stateless."""
from __future__ import annotations

from ..engine.duck import quote
from ..sql.plan import cname
from .base import Operator, W


class ChangelogOp(Operator):
    def apply(self, inputs):
        (d,) = inputs
        node = self.node
        n = len(node.child.columns)
        cols = ", ".join(quote(cname(i)) for i in range(n))
        key = ", ".join(quote(cname(i)) for i in node.child.stream_key)
        over = f" OVER (PARTITION BY {key})" if key else " OVER ()"
        deleted = f"max(CASE WHEN {W} < 0 THEN 1 ELSE 0 END){over}"
        inserted = f"max(CASE WHEN {W} > 0 THEN 1 ELSE 0 END){over}"
        op = (f"CAST(CASE WHEN {W} > 0 THEN CASE WHEN {deleted} = 1 THEN 3 ELSE 1 END "
              f"ELSE CASE WHEN {inserted} = 1 THEN 4 ELSE 2 END END AS SMALLINT)")
        last = f"CAST({int(self.ctx.target)} AS BIGINT)"
        if node.row_ids:
            order = ", ".join([quote(cname(i)) for i in (node.child.stream_key or range(n))] + [W])
            last = f"CAST({int(self.ctx.target) << 32} + row_number() OVER (ORDER BY {order}) - 1 AS BIGINT)"
        return self.sql(f"SELECT {cols}{', ' if cols else ''}{op} AS {quote(cname(n))}, "
                        f"{last} AS {quote(cname(n + 1))}, CAST(1 AS BIGINT) AS {W} FROM d", d=d)
