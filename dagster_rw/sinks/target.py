"""What every connector offers the delivery loop: write one batch of changes, all or nothing as far
as the target allows, and say what it is (without secrets) for messages."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


class TargetError(Exception):
    """The target did not acknowledge a batch. `integrity` marks a constraint the data violated."""

    def __init__(self, message: str, integrity: bool = False):
        super().__init__(message)
        self.integrity = integrity


@dataclass
class Changes:
    """One batch for the target: the sink's columns plus `_op` (+1 insert/upsert, -1 delete by key)."""

    table: pa.Table
    columns: list[str]
    key: list[str]
    epoch_from: int
    epoch_to: int
    upsert: bool


class Target:
    description = ""  # e.g. postgres table "public"."orders" at user@host:5432/db

    def write(self, changes: Changes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass
