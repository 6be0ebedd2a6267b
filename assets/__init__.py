"""The reference deployment's assets: the SQL project in `assets/shop`, one asset per object."""
from pathlib import Path

from dagster_rw.dagster import DagsterRwTranslator, RwProject, build_rw_assets
from resources import rw_resource

shop = RwProject(Path(__file__).parent / "shop")
# the kinds name the engines the deployment's resource runs steps on
shop_assets = build_rw_assets(shop, translator=DagsterRwTranslator(engines=rw_resource().engine_kinds()))
