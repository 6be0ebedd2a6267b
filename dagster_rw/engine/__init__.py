"""Compute engines that evaluate the incremental rules: DuckDB in-process for small epochs, Spark for large ones.

Both take the same SQL text (written in DuckDB's dialect and carried to Spark SQL by sqlglot) over
named relations, so one set of rules serves both paths.
"""
from .base import Engine, ParquetScan
from .duck import DuckEngine

__all__ = ["DuckEngine", "Engine", "ParquetScan"]
