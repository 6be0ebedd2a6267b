"""A SQL project's plan is kept in a file keyed by the project's files and the planner: another
process loading the same definitions reads it instead of planning the folder again, any edit of the
folder plans it again, and the statements as written (which may carry credentials) stay out of it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dagster_rw.dagster import RwProject, build_rw_assets
from dagster_rw.errors import ProgrammingError

SHOP = Path(__file__).resolve().parent.parent / "assets" / "shop"


@pytest.fixture
def project_dir(tmp_path):
    shutil.copytree(SHOP, tmp_path / "shop")
    return tmp_path / "shop"


def _kept(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json"))


def test_a_second_load_reads_the_kept_plan_equal_to_planning(project_dir, tmp_path):
    cache = tmp_path / "plans"
    planned = RwProject(project_dir, plan_cache=cache).objects
    (kept,) = _kept(cache)
    fresh = RwProject(project_dir, plan_cache=None).objects
    assert planned == fresh
    loaded = RwProject(project_dir, plan_cache=cache).objects
    assert loaded == fresh  # deploy_sql included: read back from the files
    assert [a.keys for a in build_rw_assets(RwProject(project_dir, plan_cache=cache))] == \
        [a.keys for a in build_rw_assets(RwProject(project_dir, plan_cache=None))]
    # what is read is the file's content: a change made there shows (it is not planned again)
    doc = json.loads(kept.read_text())
    doc["objects"][0]["comment"] = "read from the kept plan"
    kept.write_text(json.dumps(doc))
    assert RwProject(project_dir, plan_cache=cache).objects[doc["objects"][0]["name"]].comment == \
        "read from the kept plan"


def test_an_edited_folder_is_planned_again(project_dir, tmp_path):
    cache = tmp_path / "plans"
    before = RwProject(project_dir, plan_cache=cache).objects
    (project_dir / "extra.sql").write_text(
        "-- Orders of two or more.\nCREATE MATERIALIZED VIEW big_orders AS SELECT id, quantity FROM orders "
        "WHERE quantity >= 2;\n")
    after = RwProject(project_dir, plan_cache=cache).objects
    assert "big_orders" not in before and after["big_orders"].deps == ["orders"]
    assert after["big_orders"].comment == "Orders of two or more."
    assert len(_kept(cache)) == 2
    (project_dir / "extra.sql").write_text("CREATE MATERIALIZED VIEW big_orders AS SELECT nope FROM orders;\n")
    with pytest.raises(ProgrammingError):  # a plan that fails is not kept, and fails every time
        RwProject(project_dir, plan_cache=cache).objects
    with pytest.raises(ProgrammingError):
        RwProject(project_dir, plan_cache=cache).objects
    assert len(_kept(cache)) == 2


def test_an_unreadable_kept_plan_is_planned_again(project_dir, tmp_path):
    cache = tmp_path / "plans"
    planned = RwProject(project_dir, plan_cache=cache).objects
    (kept,) = _kept(cache)
    kept.write_text('{"format": 1, "objects": [{"name": "orders"')
    assert RwProject(project_dir, plan_cache=cache).objects == planned
    kept.write_text(json.dumps({"format": 1, "objects": [{"name": "orders", "unknown_field": 1}]}))
    assert RwProject(project_dir, plan_cache=cache).objects == planned


def test_statements_as_written_stay_out_of_the_kept_plan(tmp_path, monkeypatch):
    from cryptography.fernet import Fernet

    monkeypatch.setenv("DAGSTER_RW_SECRET_KEY", Fernet.generate_key().decode())  # a clear value is accepted
    cache = tmp_path / "plans"
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.sql").write_text(
        "CREATE TABLE t (a INT PRIMARY KEY, b INT);\n"
        "CREATE SINK s FROM t WITH (connector = 'postgres', host = 'h', database = 'db', user = 'u', "
        "password = 'clear-text-pw', table = 't', type = 'upsert', primary_key = 'a');\n")
    planned = RwProject(tmp_path / "p", plan_cache=cache).objects
    assert "clear-text-pw" in planned["s"].deploy_sql
    (kept,) = _kept(cache)
    assert "clear-text-pw" not in kept.read_text()
    assert RwProject(tmp_path / "p", plan_cache=cache).objects["s"].deploy_sql == planned["s"].deploy_sql
