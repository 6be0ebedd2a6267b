"""Values: the one row a SELECT without FROM reads, emitted by the step that creates the view."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .base import Operator, W, names


class ValuesOp(Operator):
    def apply(self, inputs):
        n = 1 if self.ctx.backfill else 0
        return pa.table({names(self.node)[0]: pa.array(np.ones(n, np.int32)), W: pa.array(np.ones(n, np.int64))})
