"""The reference deployment's assets: the SQL project in `assets/shop`, one asset per object."""
from pathlib import Path

from dagster_rw.dagster import RwProject, build_rw_assets

shop = RwProject(Path(__file__).parent / "shop")
shop_assets = build_rw_assets(shop)
