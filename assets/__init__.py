"""The reference deployment's assets: the SQL project in `assets/shop`, one asset per object.

Each asset declares a freshness policy to Dagster: stale (failing) when not materialized for
DAGSTER_RW_FRESHNESS_FAIL_MINUTES (60 by default), warning after DAGSTER_RW_FRESHNESS_WARN_MINUTES
(15); a fail window of 0 declares none.
"""
import os
from datetime import timedelta
from pathlib import Path

import dagster as dg

from dagster_rw.dagster import DagsterRwTranslator, RwProject, build_rw_assets
from resources import rw_resource

shop = RwProject(Path(__file__).parent / "shop")
_fail = int(os.environ.get("DAGSTER_RW_FRESHNESS_FAIL_MINUTES", "60"))
_warn = int(os.environ.get("DAGSTER_RW_FRESHNESS_WARN_MINUTES", "15"))
freshness = dg.FreshnessPolicy.time_window(
    fail_window=timedelta(minutes=_fail), warn_window=timedelta(minutes=_warn) if 0 < _warn < _fail else None
) if _fail > 0 else None
# the kinds name the engines the deployment's resource runs steps on
shop_assets = build_rw_assets(shop, translator=DagsterRwTranslator(engines=rw_resource().engine_kinds(),
                                                                   freshness_policy=freshness))
