"""The Dagster integration: SQL projects as assets, the barrier sensor, checks, maintenance, a component.

    from dagster_rw.dagster import RwProject, RwResource, rw_assets, build_barrier_sensor
"""
from .asset_decorator import build_rw_assets, build_rw_specs, rw_assets
from .component import RwProjectComponent
from .deploy import deploy
from .maintenance import build_maintenance_job, build_maintenance_schedule
from .project import RwObject, RwProject
from .resource import RwResource
from .sensor import build_barrier_sensor
from .translator import DagsterRwTranslator

__all__ = [
    "DagsterRwTranslator",
    "RwObject",
    "RwProject",
    "RwProjectComponent",
    "RwResource",
    "build_barrier_sensor",
    "build_maintenance_job",
    "build_maintenance_schedule",
    "build_rw_assets",
    "build_rw_specs",
    "deploy",
    "rw_assets",
]
