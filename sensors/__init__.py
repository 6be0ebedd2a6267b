"""The reference deployment's barrier sensor and maintenance schedule."""
import os

import dagster as dg

from assets import shop, shop_assets
from dagster_rw.dagster import (
    build_barrier_sensor,
    build_maintenance_job,
    build_maintenance_schedule,
)

barrier_sensor = build_barrier_sensor(
    shop_assets, name="shop_barrier_sensor",
    # the daemon looks at sensors every 5 s: at 1 s the sensor ticks at each look (at 5 s it would
    # miss a look whenever the last tick is 4.9 s old, and an epoch would wait up to 10 s)
    minimum_interval_seconds=int(os.environ.get("DAGSTER_RW_SENSOR_INTERVAL", "1")),
    # DAGSTER_RW_SENSOR_RUNNING=1 starts it with the daemon (else turn it on in the UI)
    default_status=dg.DefaultSensorStatus.RUNNING if os.environ.get("DAGSTER_RW_SENSOR_RUNNING") == "1"
    else dg.DefaultSensorStatus.STOPPED)
maintenance_job = build_maintenance_job(shop, name="shop_maintenance")
maintenance_schedule = build_maintenance_schedule(
    maintenance_job, os.environ.get("DAGSTER_RW_MAINTENANCE_CRON", "*/30 * * * *"), name="shop_maintenance_schedule")
