"""Changelog: each row of the input's delta becomes an inserted row carrying its operation, as
RisingWave's changelog CTE numbers them: 1 insert, 2 delete, 3 the new row of an update (its key
also lost a row in the step), 4 the old row of an update. The step's target epoch is carried as a
hidden column, so a key's changes in different steps are different rows. Stateless."""
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
        return self.sql(f"SELECT {cols}{', ' if cols else ''}{op} AS {quote(cname(n))}, "
                        f"CAST({int(self.ctx.target)} AS BIGINT) AS {quote(cname(n + 1))}, "
                        f"CAST(1 AS BIGINT) AS {W} FROM d", d=d)
