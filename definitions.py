"""The reference deployment: `dagster dev -w workspace.yaml` loads these definitions."""
import dagster as dg

from assets import shop_assets
from resources import rw_resource
from sensors import barrier_sensor, continuous_job, continuous_sensor, maintenance_job, maintenance_schedule

defs = dg.Definitions(
    assets=shop_assets,
    sensors=[barrier_sensor, continuous_sensor],
    jobs=[continuous_job, maintenance_job],
    schedules=[maintenance_schedule],
    resources={"rw": rw_resource()},
    executor=dg.in_process_executor,  # one process, one Spark session per run
)
