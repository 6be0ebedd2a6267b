"""How project objects become Dagster asset specs; subclass and override a hook to change one field.

Shaped like dagster-dbt's `DagsterDbtTranslator`: `get_asset_spec` assembles the spec from small
per-field methods (`get_asset_key`, `get_group_name`, `get_description`, `get_metadata`, `get_kinds`,
`get_tags`, `get_owners`, `get_deps`), each taking the `RwObject` and the project.
"""
from __future__ import annotations

import dagster as dg

from .project import RwObject, RwProject

KIND_TAGS = {"table": "table", "materialized_view": "view", "source": "source", "sink": "sink"}


class DagsterRwTranslator:
    def get_asset_key(self, obj: RwObject) -> dg.AssetKey:
        return dg.AssetKey([obj.name])

    def get_group_name(self, obj: RwObject, project: RwProject) -> str | None:
        return project.name

    def get_description(self, obj: RwObject) -> str:
        return f"```sql\n{obj.sql}\n```"

    def get_kinds(self, obj: RwObject) -> set[str]:
        return {"spark", KIND_TAGS.get(obj.kind, obj.kind)}

    def get_tags(self, obj: RwObject) -> dict[str, str]:
        return {"dagster_rw/kind": obj.kind}

    def get_owners(self, obj: RwObject) -> list[str] | None:
        return None

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
            skippable=True,
        )
