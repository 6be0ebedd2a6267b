"""RwResource with a nested dagster_pyspark resource, through Dagster's own APIs.

The Spark test runs on the test run's one Spark session (the `spark` fixture, on the standalone
cluster): a LazyPySparkResource builds its session with `SparkSession.builder...getOrCreate()`, which
returns the session already running in the process (its static settings, such as the master, are
those of the running session), so no second JVM starts.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

import dagster as dg
import dagster_pyspark
import pytest
from dagster_pyspark import LazyPySparkResource
from oracle import assert_same
from packaging.requirements import Requirement
from test_dagster import SHOP, Workload, _materializations

import dagster_rw
from dagster_rw.dagster import RwProject, RwProjectComponent, RwResource, deploy, rw_assets

ROOT = Path(__file__).resolve().parent.parent
SUBSET = ["orders", "items", "order_lines"]


@pytest.fixture(scope="module")
def shop():
    return RwProject(SHOP)


def _recording_assets(project: RwProject, seen: list):
    """The project's tables and order_lines as one multi-asset that records, after each step, the
    nested pyspark resource's session (None while it was never built) and the connection's."""
    @rw_assets(project=project, select=SUBSET)
    def shop_subset(context, rw: RwResource):
        yield from rw.refresh(context).stream()
        conn = rw.get_connection()
        seen.append({"pyspark": rw.pyspark, "session": rw.pyspark._spark_session, "conn_spark": conn.spark,
                     "spark_start_seconds": rw.spark_start_seconds})

    return shop_subset


def test_dagster_pyspark_is_the_release_paired_with_dagster():
    """dagster-pyspark 0.X.Y is released with dagster 1.(X-16).Y and pins it: a resolver that picked
    another pair (or an old dagster-pyspark that pins nothing) installed something untested."""
    major, minor, patch = dagster_pyspark.__version__.split(".", 2)
    assert major == "0" and int(minor) >= 29, dagster_pyspark.__version__
    assert dg.__version__ == f"1.{int(minor) - 16}.{patch}", (dg.__version__, dagster_pyspark.__version__)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("dagster", "test"):
        (req,) = [Requirement(r) for r in extras[extra] if Requirement(r).name == "dagster-pyspark"]
        assert not req.specifier.contains("0.28.99") and req.specifier.contains(dagster_pyspark.__version__), extra


def test_small_steps_start_no_spark(shop, tmp_path):
    """With engine 'auto' and steps far below the threshold, the nested lazy resource never builds
    its session: a run that needs no Spark starts none."""
    warehouse = str(tmp_path / "wh")
    seen: list = []
    assets = _recording_assets(shop, seen)
    resource = RwResource(warehouse=warehouse, pyspark=LazyPySparkResource(spark_config={"spark.master": "local[1]"}))
    workload = Workload(shop, 5)
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse, engine="duckdb") as feeder:
        deploy(feeder, shop)
        workload.apply(feeder, 20)
        feeder.barrier()
        run = dg.materialize([assets], resources={"rw": resource}, instance=instance)
        assert run.success
        mats = _materializations(run)
        assert set(mats) == set(SUBSET)
        assert {md["dagster_rw/engine"] for md in mats.values()} == {"duckdb"}
        (step,) = seen
        assert isinstance(step["pyspark"], LazyPySparkResource)
        assert step["session"] is None and step["spark_start_seconds"] is None
        assert not hasattr(step["conn_spark"], "sql")  # still the factory, never called
        got = feeder.execute("SELECT * FROM order_lines").fetchall()
        assert_same(got, workload.oracle.rows("SELECT * FROM order_lines"), "order_lines")


@pytest.mark.spark
def test_spark_steps_run_on_the_nested_resources_session(spark, shop, tmp_path):
    """Steps forced to Spark run on the session the nested LazyPySparkResource built, in every run,
    and give the same views as DuckDB over the same rows."""
    warehouse = str(tmp_path / "wh")
    seen: list = []
    assets = _recording_assets(shop, seen)
    resource = RwResource(warehouse=warehouse, engine="spark",
                          pyspark=LazyPySparkResource(spark_config={"spark.master": "local[1]",
                                                                    "spark.app.name": "dagster-rw-tests"}))
    workload = Workload(shop, 17)
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse, engine="duckdb") as feeder:
        deploy(feeder, shop)
        for n in (25, 15):
            workload.apply(feeder, n)
            feeder.barrier()
            run = dg.materialize([assets], resources={"rw": resource}, instance=instance)
            assert run.success
            mats = _materializations(run)
            assert set(mats) == set(SUBSET)
            assert {md["dagster_rw/engine"] for md in mats.values()} == {"spark"}
            assert all(ev.passed for ev in run.get_asset_check_evaluations()
                       if not ev.check_name.startswith("expect_"))
            step = seen[-1]
            # the lazy resource built its session on the first Spark step; every step used it
            assert step["session"] is not None and step["conn_spark"] is step["session"]
            assert step["spark_start_seconds"] is not None
            # getOrCreate() gave the process's running session rather than start another one
            assert step["session"] is spark
            assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
            got = feeder.execute("SELECT * FROM order_lines").fetchall()
            assert_same(got, workload.oracle.rows("SELECT * FROM order_lines"), "order_lines")
        assert len(seen) == 2


def test_spark_settings_given_twice_are_an_error(tmp_path):
    resource = RwResource(warehouse=str(tmp_path / "wh"), spark="sc://127.0.0.1:15002",
                          pyspark=LazyPySparkResource(spark_config={"spark.master": "local[1]"}))
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="not both"):
        resource.get_connection()


def test_component_nests_a_lazy_pyspark_resource(tmp_path):
    """YAML users give the pyspark resource's spark_config; the component nests it in the resource."""
    component = RwProjectComponent.resolve_from_yaml(
        f"project: {SHOP}\nwarehouse: {tmp_path / 'wh'}\n"
        "spark_config:\n  spark.master: spark://spark-master:7077\n  spark.executor.memory: 4g\n")
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    resource = defs.resources["rw"]
    assert isinstance(resource.pyspark, LazyPySparkResource)
    assert resource.pyspark.spark_config == {"spark.master": "spark://spark-master:7077",
                                             "spark.executor.memory": "4g"}
    assert resource.pyspark._spark_session is None
    plain = RwProjectComponent.resolve_from_yaml(f"project: {SHOP}\nwarehouse: {tmp_path / 'wh'}\n")
    assert plain.build_defs(dg.ComponentTree.for_test().load_context).resources["rw"].pyspark is None
