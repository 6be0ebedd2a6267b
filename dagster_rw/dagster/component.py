"""`RwProjectComponent`: the same integration for `dg` and YAML users.

    # defs/shop/defs.yaml
    type: dagster_rw.dagster.RwProjectComponent
    attributes:
      project: sql            # a folder of .sql files, relative to this file
      warehouse: .dagster_rw  # or s3://bucket/prefix
      spark: local            # or sc://host:15002

Or with the Spark settings a deployment's dagster_pyspark resources use (`spark_config`, as a
LazyPySparkResource nested in the resource: the session starts when a step first needs Spark):

    attributes:
      project: sql
      warehouse: s3://lake/rw
      spark_config:
        spark.master: spark://spark-master:7077
        spark.executor.memory: 4g
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from .asset_decorator import build_rw_assets
from .maintenance import build_maintenance_job, build_maintenance_schedule
from .project import RwProject
from .resource import RwResource
from .sensor import build_barrier_sensor


class RwProjectComponent(dg.Component, dg.Resolvable, dg.Model):
    """A dagster-rw SQL project: its assets, the barrier sensor, maintenance, and the resource."""

    project: str
    warehouse: str = ".dagster_rw"
    s3_endpoint_url: str | None = None
    spark: str = "local"
    spark_config: dict[str, Any] | None = None  # a LazyPySparkResource's spark_config, in place of `spark`
    resource_key: str = "rw"
    sensor_interval_seconds: int = 5
    maintenance_cron: str | None = "*/30 * * * *"

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        path = Path(self.project)
        if not path.is_absolute():
            path = Path(context.path) / path
        project = RwProject(path)
        assets = build_rw_assets(project, resource_key=self.resource_key)
        sensor = build_barrier_sensor(assets, name=f"{project.name}_barrier_sensor", resource_key=self.resource_key,
                                      minimum_interval_seconds=self.sensor_interval_seconds)
        jobs, schedules = [], []
        if self.maintenance_cron:
            job = build_maintenance_job(project, name=f"{project.name}_maintenance", resource_key=self.resource_key)
            jobs.append(job)
            schedules.append(build_maintenance_schedule(job, self.maintenance_cron,
                                                        name=f"{project.name}_maintenance_schedule"))
        pyspark = LazyPySparkResource(spark_config=dict(self.spark_config)) if self.spark_config is not None else None
        resource = RwResource(warehouse=self.warehouse, s3_endpoint_url=self.s3_endpoint_url, spark=self.spark,
                              pyspark=pyspark)
        return dg.Definitions(assets=assets, sensors=[sensor], jobs=jobs, schedules=schedules,
                              resources={self.resource_key: resource}, executor=dg.in_process_executor)
