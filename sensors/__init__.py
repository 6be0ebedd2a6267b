"""The reference deployment's sensors, continuous mode and maintenance schedule.

Two ways to apply epochs (docs/dagster.md): the barrier sensor (one run per epoch), or the
continuous job (one long-lived run; its sensor keeps it going). While the continuous job runs, the
barrier sensor's ticks do nothing.
"""
import os

import dagster as dg

from assets import shop, shop_assets
from dagster_rw.dagster import (
    build_barrier_sensor,
    build_continuous_job,
    build_continuous_sensor,
    build_maintenance_job,
    build_maintenance_schedule,
)


def _running(variable: str) -> dg.DefaultSensorStatus:
    """VARIABLE=1 starts the sensor with the daemon (else turn it on in the UI)."""
    return dg.DefaultSensorStatus.RUNNING if os.environ.get(variable) == "1" else dg.DefaultSensorStatus.STOPPED


barrier_sensor = build_barrier_sensor(
    shop_assets, name="shop_barrier_sensor",
    # the daemon looks at sensors every 5 s: at 1 s the sensor ticks at each look (at 5 s it would
    # miss a look whenever the last tick is 4.9 s old, and an epoch would wait up to 10 s)
    minimum_interval_seconds=int(os.environ.get("DAGSTER_RW_SENSOR_INTERVAL", "1")),
    default_status=_running("DAGSTER_RW_SENSOR_RUNNING"))
continuous_job = build_continuous_job(
    shop_assets, name="shop_continuous", interval_seconds=float(os.environ.get("DAGSTER_RW_CONTINUOUS_INTERVAL", "1")))
continuous_sensor = build_continuous_sensor(continuous_job, default_status=_running("DAGSTER_RW_CONTINUOUS"))
maintenance_job = build_maintenance_job(shop, name="shop_maintenance")
maintenance_schedule = build_maintenance_schedule(
    maintenance_job, os.environ.get("DAGSTER_RW_MAINTENANCE_CRON", "*/30 * * * *"), name="shop_maintenance_schedule")
