"""How project objects become Dagster asset specs; subclass and override a hook to change one field.

Shaped like dagster-dbt's `DagsterDbtTranslator`: `get_asset_spec` assembles the spec from small
per-field methods (`get_asset_key`, `get_group_name`, `get_description`, `get_metadata`, `get_kinds`,
`get_tags`, `get_owners`, `get_deps`), each taking the `RwObject` and the project.

A description is markdown, as Dagster renders it: a first paragraph in plain words (the comment
written above the statement, or a sentence saying what the object is), which the catalog's lists
show as text, then the statement in a fenced SQL block, which an asset's page renders as code.

Kinds say what an asset is (`sql`, and `table`, `view`, `source` or `sink`) and, when the translator
is given them, which engines run its steps (`engines=rw.engine_kinds()`: `duckdb` for steps run
in-process, `spark` when the resource is configured with Spark). The engine that ran a given step is
in its materialization's metadata, `dagster_rw/engine`.

Freshness: given a `freshness_policy` (`dg.FreshnessPolicy.time_window(fail_window=..., warn_window=...)`),
every asset declares it and Dagster's freshness daemon marks the asset stale when its last
materialization is older than the window; `get_freshness_policy(obj)` chooses per object (none by
default). Dagster measures the window from the last materialization, and an object whose inputs had
nothing new records none, so a window shorter than the inputs' quiet spells flags assets that are
current (their `lag_seconds` is 0).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import dagster as dg

from .project import RwObject, RwProject, statement_body

KIND_TAGS = {"table": "table", "materialized_view": "view", "source": "source", "sink": "sink"}
_KIND_WORDS = {"table": "Table", "materialized_view": "Materialized view", "source": "Source", "sink": "Sink"}


def sql_block(sql: str) -> str:
    """`sql` as a fenced markdown code block (the fence longer than any run of backticks inside)."""
    longest = max((len(run) for run in re.findall(r"`+", sql)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}sql\n{sql}\n{fence}"


class DagsterRwTranslator:
    def __init__(self, engines: Iterable[str] = (), freshness_policy: dg.FreshnessPolicy | None = None):
        self.engines = tuple(engines)
        self.freshness_policy = freshness_policy

    def get_asset_key(self, obj: RwObject) -> dg.AssetKey:
        return dg.AssetKey([obj.name])

    def get_group_name(self, obj: RwObject, project: RwProject) -> str | None:
        return project.name

    def get_summary(self, obj: RwObject) -> str:
        """One plain sentence on what the object is, for objects with no comment above them."""
        kind = _KIND_WORDS.get(obj.kind, obj.kind.replace("_", " ").capitalize())
        if obj.kind == "table":
            if obj.append_only:
                kind = "Append-only table"
            key = f"primary key ({', '.join(obj.primary_key)})" if obj.primary_key else "no primary key"
            return f"{kind} with {key}."
        reads = ", ".join(obj.deps)
        if obj.kind == "materialized_view":
            return f"{kind} over {reads}, maintained incrementally." if reads else f"{kind}."
        if obj.kind == "sink":
            return f"{kind} delivering the changes of {reads}." if reads else f"{kind}."
        return f"{kind} reading {reads}." if reads else f"{kind}."

    def get_description(self, obj: RwObject) -> str:
        return f"{obj.comment or self.get_summary(obj)}\n\n{sql_block(statement_body(obj.sql))}"

    def get_kinds(self, obj: RwObject) -> set[str]:
        return {"sql", KIND_TAGS.get(obj.kind, obj.kind), *self.engines}

    def get_tags(self, obj: RwObject) -> dict[str, str]:
        return {"dagster_rw/kind": obj.kind}

    def get_owners(self, obj: RwObject) -> list[str] | None:
        return None

    def get_freshness_policy(self, obj: RwObject) -> dg.FreshnessPolicy | None:
        return self.freshness_policy

    def get_deps(self, obj: RwObject, project: RwProject) -> list[dg.AssetKey]:
        return [self.get_asset_key(project.get(d)) for d in obj.deps]

    def get_metadata(self, obj: RwObject, project: RwProject) -> dict:
        schema = dg.TableSchema(columns=[
            dg.TableColumn(c.name, c.type, constraints=dg.TableColumnConstraints(
                nullable=c.nullable, unique=obj.primary_key == [c.name] or obj.stream_key == [c.name]))
            for c in obj.columns])
        metadata = {
            "dagster/column_schema": schema,
            "dagster_rw/kind": obj.kind,
            "dagster_rw/primary_key": ", ".join(obj.primary_key) or "(none)",
            "dagster_rw/stream_key": ", ".join(obj.stream_key) or "(hidden row id)",
            "dagster_rw/sql_file": obj.path,
        }
        if obj.column_lineage:
            metadata["dagster/column_lineage"] = dg.TableColumnLineage(deps_by_column={
                col: [dg.TableColumnDep(asset_key=self.get_asset_key(project.get(src)), column_name=c)
                      for src, c in deps]
                for col, deps in obj.column_lineage.items()})
        return metadata

    def get_asset_spec(self, obj: RwObject, project: RwProject) -> dg.AssetSpec:
        return dg.AssetSpec(
            key=self.get_asset_key(obj),
            deps=self.get_deps(obj, project),
            description=self.get_description(obj),
            metadata=self.get_metadata(obj, project),
            group_name=self.get_group_name(obj, project),
            kinds=self.get_kinds(obj),
            tags=self.get_tags(obj),
            owners=self.get_owners(obj),
            freshness_policy=self.get_freshness_policy(obj),
            skippable=True,
        )
