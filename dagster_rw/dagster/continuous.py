"""Continuous mode seen from Dagster: every epoch the loop commits is reported to a Dagster
instance as runless materializations, one per object whose rows changed in it, with the metadata a
run's step records (resource.materialization_metadata). An object that only moved to the new epoch
(nothing new reached it) records nothing: its last materialization still holds its data. The asset
pages show the epochs, their plots and lag without a run per epoch; asset checks still run on
whatever schedule the deployment gives them.

    conn.run(interval=1.0, on_epoch=EpochReporter(dg.DagsterInstance.get(), conn, project))

or `dagster-rw run --project DIR --dagster` (the instance of DAGSTER_HOME).
"""
from __future__ import annotations

import dagster as dg

from ..runtime.continuous import Tick
from .asset_decorator import build_rw_specs
from .project import RwProject
from .resource import materialization_metadata, spec_object
from .translator import DagsterRwTranslator


class EpochReporter:
    """`on_epoch` for continuous mode: reports each changed object of `project` (every object of
    the warehouse, keyed by name, without a project) to `instance`."""

    def __init__(self, instance: dg.DagsterInstance, conn, project: RwProject | None = None,
                 translator: DagsterRwTranslator | None = None):
        self.instance = instance
        self.conn = conn
        self.keys: dict[str, dg.AssetKey] | None = None
        if project is not None:
            specs, _ = build_rw_specs(project, translator)
            self.keys = {spec_object(spec)[1]: spec.key for spec in specs}
        self.reported = 0

    def key_of(self, name: str) -> dg.AssetKey | None:
        if self.keys is not None:
            return self.keys.get(name)
        return dg.AssetKey([name])

    def __call__(self, tick: Tick) -> None:
        for name in tick.changed:
            before, after = tick.advanced[name]
            key = self.key_of(name)
            if key is None:
                continue
            seconds = float(self.conn.wh.manifest(name).stats.get("step_seconds") or 0.0)
            metadata = materialization_metadata(self.conn, name, after, True, seconds)
            metadata["dagster_rw/continuous"] = True
            self.instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=key, metadata=metadata,
                description=f"epoch {after} committed by continuous mode"
                            + (f" (from epoch {before})" if before is not None else "")))
            self.reported += 1
