"""The Dagster integration: SQL projects as assets, the barrier sensor, continuous mode, checks,
maintenance, a component.

    from dagster_rw.dagster import RwProject, RwResource, rw_assets, build_barrier_sensor

`dg` finds `RwProjectComponent` here through the `dagster_dg_cli.registry_modules` entry point, and
code locations report dagster-rw's version among their libraries.
"""
from dagster_shared.libraries import DagsterLibraryRegistry

from .. import __version__
from .asset_decorator import build_rw_assets, build_rw_specs, rw_assets
from .component import RwProjectComponent, RwProjectScaffolder
from .continuous import EpochReporter, build_continuous_job, build_continuous_sensor
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
    "RwProjectScaffolder",
    "EpochReporter",
    "RwResource",
    "build_barrier_sensor",
    "build_continuous_job",
    "build_continuous_sensor",
    "build_maintenance_job",
    "build_maintenance_schedule",
    "build_rw_assets",
    "build_rw_specs",
    "deploy",
    "rw_assets",
]

DagsterLibraryRegistry.register("dagster-rw", __version__, is_dagster_package=False)
