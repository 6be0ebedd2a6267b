"""`RwProjectComponent`: the same integration for `dg` and YAML users.

    # defs/shop/defs.yaml
    type: dagster_rw.dagster.RwProjectComponent
    attributes:
      project: sql            # a folder of .sql files, relative to this file
      warehouse: .dagster_rw  # or s3://bucket/prefix
      spark: local            # or sc://host:15002
      engine: auto            # or duckdb (steps in-process) or spark (every step on Spark)

Or with the Spark settings a deployment's dagster_pyspark resources use (`spark_config`, as a
LazyPySparkResource nested in the resource: the session starts when a step first needs Spark):

    attributes:
      project: sql
      warehouse: s3://lake/rw
      spark_config:
        spark.master: spark://spark-master:7077
        spark.executor.memory: 4g

Freshness declared to Dagster (every asset stale when not materialized for that long):

    attributes:
      project: sql
      freshness_fail_window_minutes: 60
      freshness_warn_window_minutes: 15

Continuous mode (a long-lived run that applies every epoch within seconds; docs/dagster.md) is the
job `<name>_continuous`, kept running by the sensor `<name>_continuous_sensor`, which
`continuous: true` starts with the daemon (`continuous_interval_seconds`, 1 by default):

    attributes:
      project: sql
      continuous: true

`dg scaffold defs dagster_rw.dagster.RwProjectComponent shop` writes `defs/shop/defs.yaml` (the
project named `shop`) and a starter SQL project beside it (`defs/shop/sql/shop.sql`: a table and a
view over it); the options `--project`, `--warehouse` and `--engine` set the attributes it writes.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, Field

from .asset_decorator import build_rw_assets
from .continuous import build_continuous_job, build_continuous_sensor
from .maintenance import build_maintenance_job, build_maintenance_schedule
from .project import RwProject
from .resource import RwResource
from .sensor import build_barrier_sensor
from .translator import DagsterRwTranslator


STARTER_SQL = """\
-- A dagster-rw SQL project: every CREATE statement in this folder becomes an asset. The comment
-- directly above a statement becomes its asset's description; this header, followed by a blank
-- line, documents none.

-- Orders as they are placed; updates and deletes address them by id.
CREATE TABLE orders (
    id       int PRIMARY KEY,
    customer varchar,
    amount   numeric(10, 2)
);

-- Spend per customer, kept up to date incrementally as orders come, change and go.
CREATE MATERIALIZED VIEW customer_spend AS
SELECT customer, count(*) AS orders, sum(amount) AS spent
FROM orders
GROUP BY customer;
"""


class RwProjectScaffoldParams(BaseModel):
    project: str = Field(default="sql", description="The SQL project's folder, relative to defs.yaml.")
    warehouse: str = Field(default=".dagster_rw", description="A local folder or s3://bucket/prefix.")
    engine: str = Field(default="auto", description="'auto' (by step size), 'duckdb' or 'spark'.")


class RwProjectScaffolder(dg.Scaffolder[RwProjectScaffoldParams]):
    """Writes the component's defs.yaml and, when its SQL folder has no .sql file yet, a starter one."""

    @classmethod
    def get_scaffold_params(cls) -> type[RwProjectScaffoldParams]:
        return RwProjectScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[RwProjectScaffoldParams]) -> None:
        params = request.params or RwProjectScaffoldParams()
        folder = Path(params.project)
        if not folder.is_absolute():
            folder = request.target_path / folder
        folder.mkdir(parents=True, exist_ok=True)
        if not any(folder.rglob("*.sql")):
            (folder / f"{request.target_path.name}.sql").write_text(STARTER_SQL)
        attributes = {"project": params.project, "name": request.target_path.name, "warehouse": params.warehouse}
        if params.engine != "auto":
            attributes["engine"] = params.engine
        dg.scaffold_component(request, attributes)


@dg.scaffold_with(RwProjectScaffolder)
class RwProjectComponent(dg.Component, dg.Resolvable, dg.Model):
    """A dagster-rw SQL project: its assets, the barrier sensor, continuous mode, maintenance, and the
    resource."""

    project: str
    name: str | None = None  # the project's name (its assets' group, its sensor's and jobs' prefix); else its folder's
    warehouse: str = ".dagster_rw"
    s3_endpoint_url: str | None = None
    spark: str = "local"
    spark_config: dict[str, Any] | None = None  # a LazyPySparkResource's spark_config, in place of `spark`
    engine: str = "auto"  # 'auto' (by step size), 'duckdb' or 'spark'
    resource_key: str = "rw"
    sensor_interval_seconds: int = 5
    maintenance_cron: str | None = "*/30 * * * *"
    continuous: bool = False  # start the sensor that keeps the continuous job running with the daemon
    continuous_interval_seconds: float = 1.0
    freshness_fail_window_minutes: int | None = None  # each asset's FreshnessPolicy.time_window (at least 1)
    freshness_warn_window_minutes: int | None = None

    def freshness_policy(self) -> dg.FreshnessPolicy | None:
        if self.freshness_fail_window_minutes is None:
            return None
        warn = self.freshness_warn_window_minutes
        return dg.FreshnessPolicy.time_window(fail_window=timedelta(minutes=self.freshness_fail_window_minutes),
                                              warn_window=timedelta(minutes=warn) if warn else None)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        path = Path(self.project)
        if not path.is_absolute():
            path = Path(context.path) / path
        project = RwProject(path, name=self.name)
        pyspark = None
        if self.spark_config is not None:
            from dagster_pyspark import LazyPySparkResource

            pyspark = LazyPySparkResource(spark_config=dict(self.spark_config))
        resource = RwResource(warehouse=self.warehouse, s3_endpoint_url=self.s3_endpoint_url, spark=self.spark,
                              pyspark=pyspark, engine=self.engine)
        assets = build_rw_assets(project, translator=DagsterRwTranslator(engines=resource.engine_kinds(),
                                                                        freshness_policy=self.freshness_policy()),
                                 resource_key=self.resource_key)
        sensor = build_barrier_sensor(assets, name=f"{project.name}_barrier_sensor", resource_key=self.resource_key,
                                      minimum_interval_seconds=self.sensor_interval_seconds)
        continuous = build_continuous_job(assets, name=f"{project.name}_continuous", resource_key=self.resource_key,
                                          interval_seconds=self.continuous_interval_seconds)
        keep_running = build_continuous_sensor(continuous, default_status=dg.DefaultSensorStatus.RUNNING
                                               if self.continuous else dg.DefaultSensorStatus.STOPPED)
        jobs, schedules = [continuous], []
        if self.maintenance_cron:
            job = build_maintenance_job(project, name=f"{project.name}_maintenance", resource_key=self.resource_key)
            jobs.append(job)
            schedules.append(build_maintenance_schedule(job, self.maintenance_cron,
                                                        name=f"{project.name}_maintenance_schedule"))
        return dg.Definitions(assets=assets, sensors=[sensor, keep_running], jobs=jobs, schedules=schedules,
                              resources={self.resource_key: resource}, executor=dg.in_process_executor)
