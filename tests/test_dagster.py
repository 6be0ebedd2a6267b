"""The Dagster integration, through Dagster's own test APIs, on the reference SQL project (assets/shop).

Rows go into the warehouse through a second connection (as `dagster-rw sql` from another terminal
would), the barrier sensor is ticked, the run it requests is executed with `materialize`, and then
the views are compared with DuckDB running the same queries over the same rows.
"""
from __future__ import annotations

import dataclasses
import decimal
import json
import os
import random
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as hst
from oracle import Oracle, assert_same, to_duckdb

import dagster_rw
from dagster_rw.dagster import (
    DagsterRwTranslator,
    RwProject,
    RwProjectComponent,
    RwResource,
    build_barrier_sensor,
    build_maintenance_job,
    build_rw_assets,
    deploy,
    rw_assets,
)
from dagster_rw.sql import statements as st

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "assets" / "shop"
TABLES = ["orders", "items", "visit", "info"]


@pytest.fixture(scope="module")
def shop():
    return RwProject(SHOP)


@pytest.fixture(scope="module")
def shop_assets(shop):
    return build_rw_assets(shop)


# -- a workload applied to the warehouse and to DuckDB alike -----------------------------------
class Workload:
    def __init__(self, project: RwProject, seed: int):
        self.rng = random.Random(seed)
        self.oracle = Oracle()
        self.project = project
        for obj in project.objects.values():
            if obj.kind == "table":
                self.oracle.execute(obj.sql)
            else:
                query = st.parse(obj.sql).query.sql(dialect="postgres")
                self.oracle.db.execute(to_duckdb(f"CREATE VIEW {obj.name} AS {query}"))

    def statements(self, n: int) -> list[tuple[str, str]]:
        """n random DML statements as (rw SQL, DuckDB SQL)."""
        r = self.rng
        out = []
        for _ in range(n):
            kind = r.choice(["order", "order", "item", "visit", "visit", "info", "update", "delete"])
            if kind == "order":
                row = f"({r.randint(1, 30)}, {r.randint(1, 8)}, 'c{r.randint(1, 6)}', {r.randint(1, 9)}, " \
                      f"TIMESTAMP '2026-11-{r.randint(1, 28):02d} 10:00:00')"
                out.append((f"INSERT INTO orders VALUES {row}", f"INSERT OR REPLACE INTO orders VALUES {row}"))
            elif kind == "item":
                row = f"({r.randint(1, 8)}, 'item{r.randint(1, 5)}', {r.randint(1, 5000) / 100:.2f})"
                out.append((f"INSERT INTO items VALUES {row}", f"INSERT OR REPLACE INTO items VALUES {row}"))
            elif kind == "visit":
                row = f"({r.randint(1, 10)}, 'u{r.randint(1, 5)}', {r.randint(1, 100)})"
                out.append((f"INSERT INTO visit VALUES {row}",) * 2)
            elif kind == "info":
                row = f"({r.randint(1, 10)}, 'cat{r.randint(1, 3)}')"
                out.append((f"INSERT INTO info VALUES {row}", f"INSERT OR REPLACE INTO info VALUES {row}"))
            elif kind == "update":
                stmt = r.choice([f"UPDATE orders SET item_id = {r.randint(1, 8)} WHERE id = {r.randint(1, 30)}",
                                 f"UPDATE items SET price = price + 1 WHERE id = {r.randint(1, 8)}",
                                 f"UPDATE visit SET length = length + 50 WHERE product = {r.randint(1, 10)}"])
                out.append((stmt, stmt))
            else:
                stmt = r.choice([f"DELETE FROM orders WHERE id = {r.randint(1, 30)}",
                                 f"DELETE FROM visit WHERE product = {r.randint(1, 10)}",
                                 f"DELETE FROM info WHERE product = {r.randint(1, 10)}"])
                out.append((stmt, stmt))
        return out

    def apply(self, conn, n: int) -> None:
        for rw_sql, duck_sql in self.statements(n):
            conn.execute(rw_sql)
            self.oracle.db.execute(duck_sql)

    def check_views(self, conn) -> None:
        for obj in self.project.objects.values():
            if obj.name == "top_customers":  # ties at the cut may pick other customers: compare amounts
                got = [r[1:] for r in conn.execute("SELECT * FROM top_customers").fetchall()]
                want = [r[1:] for r in self.oracle.rows("SELECT * FROM top_customers")]
            else:
                got = conn.execute(f"SELECT * FROM {obj.name}").fetchall()
                want = self.oracle.rows(f"SELECT * FROM {obj.name}")
            assert_same(got, want, obj.name)


def _tick(sensor, instance, resource, cursor):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"rw": resource}) as ctx:
        result = sensor.evaluate_tick(ctx)
    return result, result.cursor if result.cursor is not None else cursor


def _run(assets, request, resource, instance):
    """Execute what a RunRequest asks for, as the daemon would (its assets and checks, its tags)."""
    return dg.materialize(assets, selection=request.asset_selection, resources={"rw": resource},
                          instance=instance, tags=request.tags, raise_on_error=False)


def _materializations(result) -> dict[str, dict]:
    out = {}
    for ev in result.get_asset_materialization_events():
        mat = ev.event_specific_data.materialization
        out[mat.asset_key.path[-1]] = {k: v.value for k, v in mat.metadata.items()}
    return out


def _checks(result) -> dict[tuple[str, str], object]:
    return {(e.asset_key.path[-1], e.check_name): e for e in result.get_asset_check_evaluations()}


# -- specs ---------------------------------------------------------------------------------------
def test_specs_carry_lineage_schema_keys_and_checks(shop, shop_assets):
    (assets_def,) = shop_assets
    specs = {s.key.path[-1]: s for s in assets_def.specs}
    assert set(specs) == set(shop.objects) == {"orders", "items", "order_lines", "item_revenue", "top_customers",
                                               "visit", "info", "longest_visit", "unvisited"}
    assert {d.asset_key.path[-1] for d in specs["order_lines"].deps} == {"orders", "items"}
    assert {d.asset_key.path[-1] for d in specs["item_revenue"].deps} == {"order_lines"}
    assert {d.asset_key.path[-1] for d in specs["longest_visit"].deps} == {"visit", "info"}
    assert specs["orders"].kinds == {"sql", "table"} and specs["longest_visit"].kinds == {"sql", "view"}
    assert "CREATE MATERIALIZED VIEW order_lines" in specs["order_lines"].description
    assert specs["order_lines"].group_name == "shop"
    md = specs["order_lines"].metadata
    assert md["dagster_rw/stream_key"] == "order_id, item_id"
    assert md["dagster_rw/primary_key"] == "(none)"
    assert specs["orders"].metadata["dagster_rw/primary_key"] == "id"
    assert [c.name for c in md["dagster/column_schema"].columns] == [
        "order_id", "customer", "item_id", "item", "quantity", "amount", "placed_at"]
    lineage = md["dagster/column_lineage"].deps_by_column
    assert {(d.asset_key.path[-1], d.column_name) for d in lineage["amount"]} == {("orders", "quantity"),
                                                                               ("items", "price")}
    assert {(d.asset_key.path[-1], d.column_name) for d in lineage["item"]} == {("items", "name")}
    checks = {(k.asset_key.path[-1], k.name) for k in assets_def.check_keys}
    assert ("orders", "key_unique_not_null") in checks
    assert ("order_lines", "matches_batch_query") in checks
    assert ("orders", "expect_column_values_to_be_between__quantity") in checks
    assert ("visit", "key_unique_not_null") not in checks  # no visible key: a hidden row id
    assert assets_def.can_subset


def test_translator_hooks_override_fields(shop):
    class Prefixed(DagsterRwTranslator):
        def get_asset_key(self, obj):
            return dg.AssetKey(["rw", obj.name])

        def get_group_name(self, obj, project):
            return "streaming"

    @rw_assets(project=shop, translator=Prefixed(), select=["orders", "items", "order_lines"])
    def subset(context, rw: RwResource):
        yield from rw.refresh(context).stream()

    keys = {s.key for s in subset.specs}
    assert keys == {dg.AssetKey(["rw", n]) for n in ("orders", "items", "order_lines")}
    lines = next(s for s in subset.specs if s.key.path[-1] == "order_lines")
    assert {d.asset_key for d in lines.deps} == {dg.AssetKey(["rw", "orders"]), dg.AssetKey(["rw", "items"])}
    assert lines.group_name == "streaming"


def test_project_errors_name_file_and_object(tmp_path):
    (tmp_path / "a.sql").write_text("CREATE MATERIALIZED VIEW v AS SELECT x FROM missing_table;")
    with pytest.raises(dagster_rw.ProgrammingError, match=r"a.sql: 'v' reads \"missing_table\""):
        _ = RwProject(tmp_path).objects
    (tmp_path / "a.sql").write_text("CREATE TABLE t (a int); CREATE MATERIALIZED VIEW v AS "
                                    "SELECT a, string_agg(a::text, ',') OVER () FROM t;")
    with pytest.raises(dagster_rw.ProgrammingError, match="a.sql"):
        _ = RwProject(tmp_path).objects
    (tmp_path / "a.sql").write_text("CREATE FUNCTION f(a int) RETURNS int RETURN a + 1; "
                                    "CREATE FUNCTION f(a int) RETURNS int RETURN a + 2;")
    with pytest.raises(dagster_rw.ProgrammingError, match="a.sql: the function f is declared twice"):
        _ = RwProject(tmp_path).objects


def test_project_sql_functions_are_created_before_the_objects_that_call_them(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "functions.sql").write_text(
        "CREATE FUNCTION vat(amount numeric(10,2)) RETURNS numeric(10,2) RETURN amount * 1.2;")
    (folder / "model.sql").write_text(
        "CREATE TABLE orders (id int PRIMARY KEY, amount numeric(10,2)); "
        "CREATE MATERIALIZED VIEW gross AS SELECT id, vat(amount) AS total FROM orders;")
    project = RwProject(folder)
    assert list(project.objects) == ["orders", "gross"]  # the function is no asset
    assert project.get("gross").deps == ["orders"]
    assert [c.name for c in project.get("gross").columns] == ["id", "total"]
    warehouse = str(tmp_path / "wh")
    with dagster_rw.connect(warehouse) as conn:
        assert deploy(conn, project) == ["orders", "gross"]
        assert deploy(conn, project) == []  # in line already
        conn.execute("INSERT INTO orders VALUES (1, 10.00)")
        conn.execute("FLUSH")
        assert conn.execute("SELECT * FROM gross").fetchall() == [(1, decimal.Decimal("12.00"))]
    (folder / "functions.sql").write_text(
        "CREATE FUNCTION vat(amount numeric(10,2)) RETURNS numeric(10,2) RETURN amount * 1.25;")
    with dagster_rw.connect(warehouse) as conn:
        with pytest.raises(dagster_rw.ProgrammingError, match="the function vat exists in the warehouse with another"):
            deploy(conn, RwProject(folder))


# -- sensor, runs, checks ------------------------------------------------------------------------
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=hst.integers(0, 10_000))
@example(seed=282)  # failed once in CI: customers tied at top_customers' LIMIT, the view and the batch
# query took different ones (which one DuckDB's LIMIT takes among ties varies from run to run)
def test_sensor_runs_match_duckdb(shop, shop_assets, tmp_path_factory, seed):
    warehouse = str(tmp_path_factory.mktemp("wh"))
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    sensor = build_barrier_sensor(shop_assets)
    workload = Workload(shop, seed)
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        # first tick: the sensor creates the project's objects; nothing to seal yet
        result, cursor = _tick(sensor, instance, resource, None)
        assert not result.run_requests and result.skip_message
        assert {r["name"] for r in feeder.status()} == set(shop.objects)
        for epoch_round in range(3):
            workload.apply(feeder, 12)
            status_before = {r["name"]: r["epoch"] for r in feeder.status()}
            result, cursor = _tick(sensor, instance, resource, cursor)
            (request,) = result.run_requests
            epoch = json.loads(cursor)["epoch"]
            assert request.run_key == f"rw-epoch-{epoch}" and request.tags["dagster_rw/epoch"] == str(epoch)
            run = _run(shop_assets, request, resource, instance)
            assert run.success
            mats = _materializations(run)
            observed = {ev.event_specific_data.asset_observation.asset_key.path[-1]: ev
                        for ev in run.get_asset_observation_events()}
            # every selected asset either applied something (a materialization) or only moved to the
            # epoch, its inputs having had nothing new (an observation): never both, never neither
            assert set(mats) | set(observed) == {k.path[-1] for k in request.asset_selection}
            assert not set(mats) & set(observed) and mats
            first = min(status_before[k.path[-1]] for k in request.asset_selection) + 1
            assert request.tags["dagster_rw/epochs"] == (f"{first}-{epoch}" if first < epoch else str(epoch))
            for name, md in mats.items():
                assert md["dagster_rw/epoch"] == epoch and md["dagster_rw/lag_epochs"] == 0
                status = {r["name"]: r for r in feeder.status()}[name]
                assert md["dagster/row_count"] == len(feeder.execute(f"SELECT * FROM {name}").fetchall())
                assert md["dagster_rw/state_rows"] == status["state_rows"] and md["dagster_rw/sst_files"] == status["sst_files"]
                assert md["dagster_rw/rows_inserted"] >= 0 and md["dagster_rw/step_seconds"] > 0
            checks = _checks(run)
            selected = {k.path[-1] for k in request.asset_selection}
            assert {a for a, _ in checks} <= selected
            for (asset, check), ev in checks.items():
                if check.startswith("expect_") and asset == "orders":
                    continue  # the workload's random quantities are within bounds; asserted below anyway
                assert ev.passed, (asset, check, ev.metadata)
            batch = [ev for (a, c), ev in checks.items() if c == "matches_batch_query"]
            assert batch and all(ev.metadata["compared"].value for ev in batch)
            workload.check_views(feeder)
        # nothing new: no run
        result, cursor2 = _tick(sensor, instance, resource, cursor)
        assert not result.run_requests and cursor2 == cursor


def test_lagging_asset_catches_up_in_one_run_and_retried_tick_seals_nothing_twice(shop, shop_assets, tmp_path):
    warehouse = str(tmp_path / "wh")
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    sensor = build_barrier_sensor(shop_assets)
    workload = Workload(shop, 7)
    tables = dg.AssetSelection.assets(*[dg.AssetKey(t) for t in TABLES])
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        _, cursor = _tick(sensor, instance, resource, None)
        for _ in range(4):  # four epochs in which only the tables are materialized
            workload.apply(feeder, 10)
            result, cursor = _tick(sensor, instance, resource, cursor)
            assert result.run_requests
            assert dg.materialize(shop_assets, selection=tables, resources={"rw": resource}, instance=instance).success
        lag = {r["name"]: r["lag_epochs"] for r in feeder.status()}
        assert lag["longest_visit"] == 4 and lag["orders"] == 0
        # a tick that sealed an epoch but died before saving its cursor: the retry seals nothing new
        workload.apply(feeder, 5)
        result, new_cursor = _tick(sensor, instance, resource, cursor)
        epoch = json.loads(new_cursor)["epoch"]
        retried, _ = _tick(sensor, instance, resource, cursor)
        assert [r.run_key for r in retried.run_requests] == [r.run_key for r in result.run_requests] == \
            [f"rw-epoch-{epoch}"]
        assert max(r["epoch"] for r in feeder.status()) <= epoch
        from dagster_rw.runtime import epochs as rw_epochs

        assert rw_epochs.newest_epoch(feeder.wh.store) == epoch
        # one run brings every lagging view over five epochs
        run = _run(shop_assets, result.run_requests[0], resource, instance)
        assert run.success
        mats = _materializations(run)
        assert mats["longest_visit"]["dagster_rw/epochs_processed"] == 5
        assert mats["longest_visit"]["dagster_rw/lag_epochs"] == 0
        workload.check_views(feeder)


def test_failing_checks_report_details(shop, shop_assets, tmp_path):
    warehouse = str(tmp_path / "wh")
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        assert dg.materialize(shop_assets, resources={"rw": resource}, instance=instance).success
        feeder.execute("INSERT INTO items VALUES (1, 'pen', 2.50)")
        feeder.execute("INSERT INTO orders VALUES (10, 1, NULL, 0, TIMESTAMP '2026-11-01 10:00:00')")
        feeder.execute("INSERT INTO orders VALUES (11, 1, 'ann', 3, TIMESTAMP '2026-11-01 11:00:00')")
        feeder.barrier()
        # make the stored definition of item_revenue disagree with what its state was built from
        run = dg.materialize(shop_assets, resources={"rw": resource}, instance=instance, raise_on_error=False)
        checks = _checks(run)
        nulls = checks[("orders", "expect_column_values_to_not_be_null__customer")]
        assert not nulls.passed and nulls.metadata["gx/unexpected_count"].value == 1
        between = checks[("orders", "expect_column_values_to_be_between__quantity")]
        assert not between.passed and between.metadata["gx/partial_unexpected_list"].value == [0]
        assert checks[("orders", "key_unique_not_null")].passed
        assert checks[("item_revenue", "matches_batch_query")].passed
        # the batch check can fail: a view whose stored query no longer matches its contents
        cat = feeder.wh.catalog(reload=True)
        objects = dict(cat.objects)
        tampered = objects["item_revenue"]
        tampered.sql = tampered.sql.replace("sum(quantity) AS units", "sum(quantity) + 1 AS units")
        feeder.wh.commit_catalog(objects, "tamper for a test")
        from dagster_rw.runtime import verify

        with dagster_rw.connect(warehouse) as fresh:
            r = verify.batch_check(fresh, "item_revenue")
        assert r["compared"] and not r["passed"] and r["rows_missing_from_view"] == 1 == r["rows_extra_in_view"]


def test_batch_check_accepts_other_rows_tied_at_a_limit_and_nothing_else(tmp_path, monkeypatch):
    """A top-N view may hold other rows tied at its LIMIT than the batch query returns (both are
    right): the check passes then, and still fails for a row that is not among the ties."""
    from dagster_rw.runtime import verify

    with dagster_rw.connect(str(tmp_path / "wh")) as conn:
        conn.execute("CREATE TABLE spend (customer varchar PRIMARY KEY, spent int)")
        conn.execute("INSERT INTO spend VALUES ('a', 30), ('b', 10), ('c', 10), ('d', 5)")
        conn.execute("CREATE MATERIALIZED VIEW top2 AS SELECT customer, spent FROM spend ORDER BY spent DESC LIMIT 2")
        assert verify.batch_check(conn, "top2")["passed"]
        batch = {r[0] for r in conn.execute(
            "SELECT customer FROM spend ORDER BY spent DESC LIMIT 2").fetchall()}  # 'a' and one of the ties
        other = ({"b", "c"} - batch).pop()
        snapshot = conn.wh.snapshot
        for rows, passes in (([("a", 30), (other, 10)], True), ([("a", 30), ("d", 5)], False),
                             ([("a", 30), ("b", 10), ("c", 10)], False)):
            table = pa.table({"customer": [r[0] for r in rows], "spent": pa.array([r[1] for r in rows], pa.int32())})
            monkeypatch.setattr(conn.wh, "snapshot", lambda name, t=table: t if name == "top2" else snapshot(name))
            r = verify.batch_check(conn, "top2")
            assert r["passed"] is passes, (rows, r)
            assert ("note" in r) is passes


def test_maintenance_job_compacts(shop, shop_assets, tmp_path):
    warehouse = str(tmp_path / "wh")
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        assert dg.materialize(shop_assets, resources={"rw": resource}, instance=instance).success
        workload = Workload(shop, 3)
        for _ in range(4):
            workload.apply(feeder, 8)
            feeder.flush()
        before = sum(r["sst_files"] for r in feeder.status())
        # files a crash left, one past the sweep's grace period and one within it
        strays = [f"objects/orders/state/output/{n:020d}-{n + 1:020d}-0123456789ab.parquet" for n in (90, 91)]
        for key in strays:
            feeder.wh.store.write_bytes(key, b"PAR1")
        old = time.time() - feeder.wh.options["sweep_grace_seconds"] - 60
        os.utime(feeder.wh.store.local_path(strays[0]), (old, old))
        job = build_maintenance_job(shop)
        result = job.execute_in_process(resources={"rw": resource}, instance=instance)
        assert result.success
        feeder.wh.sync()
        after = sum(r["sst_files"] for r in feeder.status())
        assert after < before
        workload.check_views(feeder)
        assert [os.path.exists(feeder.wh.store.local_path(k)) for k in strays] == [False, True]
        output = next(e for e in result.all_events if e.is_successful_output)
        assert output.event_specific_data.metadata["files_swept"].value == 1


def test_component_builds_the_same_definitions(tmp_path):
    # as a YAML user declares it (defs.yaml `attributes:`)
    component = RwProjectComponent.resolve_from_yaml(f"project: {SHOP}\nwarehouse: {tmp_path / 'wh'}\n")
    assert isinstance(component, RwProjectComponent) and component.spark == "local"
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    graph = defs.resolve_asset_graph()
    assert {k.path[-1] for k in graph.get_all_asset_keys()} == set(RwProject(SHOP).objects)
    assert defs.resolve_sensor_def("shop_barrier_sensor") is not None
    assert defs.resolve_schedule_def("shop_maintenance_schedule") is not None


@pytest.mark.spark
def test_run_on_spark_uses_one_session(spark, shop, shop_assets, tmp_path):
    """A run whose steps go to Spark (forced here; by size in production) gives the same views."""
    warehouse = str(tmp_path / "wh")
    resource = RwResource(warehouse=warehouse, engine="spark")
    workload = Workload(shop, 11)
    subset = dg.AssetSelection.assets("orders", "items", "order_lines")
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse, engine="duckdb") as feeder:
        deploy(feeder, shop)
        assert dg.materialize(shop_assets, selection=subset, resources={"rw": resource}, instance=instance).success
        workload.apply(feeder, 25)
        feeder.barrier()
        run = dg.materialize(shop_assets, selection=subset, resources={"rw": resource}, instance=instance)
        assert run.success
        mats = _materializations(run)
        assert set(mats) == {"orders", "items", "order_lines"}
        assert {md["dagster_rw/engine"] for md in mats.values()} == {"spark"}
        assert all(ev.passed for ev in run.get_asset_check_evaluations()
                   if not ev.check_name.startswith("expect_"))
        got = feeder.execute("SELECT * FROM order_lines").fetchall()
        assert_same(got, workload.oracle.rows("SELECT * FROM order_lines"), "order_lines")


# -- sinks: their own runs, their metadata and the stuck check ----------------------------------
def _project_with_sinks(tmp_path, pg_schema_name: str, out_dir: Path) -> RwProject:
    folder = tmp_path / "project"
    folder.mkdir()
    for f in SHOP.glob("*.sql"):
        (folder / f.name).write_text(f.read_text())
    (folder / "sinks.sql").write_text(f"""
CREATE SINK revenue_pg FROM item_revenue WITH (
    connector = 'postgres', host = '127.0.0.1', port = '5432', user = 'postgres', database = 'test',
    schema = '{pg_schema_name}', table = 'item_revenue', auto_create = 'true',
    type = 'upsert', primary_key = 'item_id');
CREATE SINK lines_file AS SELECT order_id, customer, amount FROM order_lines WHERE amount > 10
WITH (connector = 'file', path = '{out_dir}', encode = 'jsonl', type = 'upsert', primary_key = 'order_id');
""")
    return RwProject(folder)


def test_sinks_run_apart_with_their_metadata_and_stuck_check(tmp_path):
    import pg_target

    pg = pg_target.PgSchema()
    try:
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        project = _project_with_sinks(tmp_path, pg.name, out_dir)
        assets = build_rw_assets(project, sink_retry_policy=dg.RetryPolicy(max_retries=1, delay=0))
        assert len(assets) == 3  # the dataflow step, and one step per sink
        sink_assets = [a for a in assets if any(s.key.path[-1] in ("revenue_pg", "lines_file") for s in a.specs)]
        assert all(a.op.retry_policy is not None for a in sink_assets)
        lines = next(s for a in assets for s in a.specs if s.key.path[-1] == "lines_file")
        assert {d.asset_key.path[-1] for d in lines.deps} == {"order_lines"}  # not its internal view
        warehouse = str(tmp_path / "wh")
        resource = RwResource(warehouse=warehouse, engine="duckdb",
                              warehouse_options={"sink_retry_attempts": "2", "sink_retry_initial_seconds": "0.01"})
        sensor = build_barrier_sensor(assets)
        workload = Workload(RwProject(SHOP), 5)
        with dg.instance_for_test() as instance, dagster_rw.connect(warehouse, flush_delivers_sinks=False) as feeder:
            _, cursor = _tick(sensor, instance, resource, None)
            workload.apply(feeder, 30)
            result, cursor = _tick(sensor, instance, resource, cursor)
            views_request, sinks_request = result.run_requests
            epoch = json.loads(cursor)["epoch"]
            assert sinks_request.run_key == f"rw-epoch-{epoch}-sinks"
            assert {k.path[-1] for k in sinks_request.asset_selection} == {"revenue_pg", "lines_file"}
            assert _run(assets, views_request, resource, instance).success
            run = _run(assets, sinks_request, resource, instance)
            assert run.success
            mats = _materializations(run)
            assert mats["revenue_pg"]["dagster_rw/delivered_epoch"] == epoch
            assert mats["revenue_pg"]["dagster_rw/backlog_epochs"] == 0
            assert all(ev.passed for ev in run.get_asset_check_evaluations())
            want = feeder.execute("SELECT item_id, item, orders, units, revenue FROM item_revenue").fetchall()
            assert_same(pg.rows("item_revenue", "item_id, item, orders, units, revenue"), want, "revenue_pg")
            # the target refuses writes: the sink's run fails (after its retries), the views' run does not
            pg.execute(f'ALTER TABLE "{pg.name}"."item_revenue" ADD CONSTRAINT no_writes CHECK (revenue < 0) NOT VALID')
            workload.apply(feeder, 20)
            result, cursor = _tick(sensor, instance, resource, cursor)
            views_request, sinks_request = result.run_requests
            assert _run(assets, views_request, resource, instance).success
            strict = RwResource(warehouse=warehouse, engine="duckdb", sink_stuck_after_seconds=0.0,
                                warehouse_options={"sink_retry_attempts": "2", "sink_retry_initial_seconds": "0.01"})
            failed = _run(assets, sinks_request, strict, instance)
            assert not failed.success
            stuck = _checks(failed)[("revenue_pg", "sink_not_stuck")]
            assert not stuck.passed and "revenue_pg" in stuck.metadata["last_error"].value
            status = {r["name"]: r for r in feeder.status()}
            assert status["revenue_pg"]["backlog_epochs"] >= 1 and status["item_revenue"]["lag_epochs"] == 0
            # the target accepts writes again: the next run catches the sink up
            pg.execute(f'ALTER TABLE "{pg.name}"."item_revenue" DROP CONSTRAINT no_writes')
            assert _run(assets, sinks_request, resource, instance).success
            want = feeder.execute("SELECT item_id, item, orders, units, revenue FROM item_revenue").fetchall()
            assert_same(pg.rows("item_revenue", "item_id, item, orders, units, revenue"), want, "revenue_pg")
    finally:
        pg.drop()


# -- Kafka sources: the sensor cuts barriers on new records -------------------------------------
def test_sensor_cuts_barriers_on_kafka_records(kafka_broker, tmp_path):
    import datetime
    import uuid

    import duckdb

    topic = f"clicks-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    folder = tmp_path / "streams"
    folder.mkdir()
    (folder / "clicks.sql").write_text(f"""
CREATE SOURCE clicks (page int, ms int, ts timestamp) WITH (
    connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{kafka_broker.bootstrap}',
    scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON;
CREATE MATERIALIZED VIEW clicks_per_minute AS
SELECT page, window_start, count(*) AS clicks, max(ms) AS slowest
FROM TUMBLE(clicks, ts, INTERVAL '1' MINUTE) GROUP BY page, window_start;
""")
    project = RwProject(folder)
    assets = build_rw_assets(project)
    specs = {s.key.path[-1]: s for a in assets for s in a.specs}
    assert specs["clicks"].kinds == {"sql", "source"}
    assert {d.asset_key.path[-1] for d in specs["clicks_per_minute"].deps} == {"clicks"}
    resource = RwResource(warehouse=str(tmp_path / "wh"), engine="duckdb")
    sensor = build_barrier_sensor(assets)
    rng = random.Random(4)
    events = []
    t0 = datetime.datetime(2026, 11, 22, 8, 0, 0)
    with dg.instance_for_test() as instance:
        result, cursor = _tick(sensor, instance, resource, None)
        assert not result.run_requests
        for round_ in range(2):
            for p in range(3):
                batch = [{"page": rng.randint(1, 4), "ms": rng.randint(1, 900),
                          "ts": (t0 + datetime.timedelta(seconds=rng.randint(0, 300))).isoformat(sep=" ")}
                         for _ in range(rng.randint(1, 15))]
                events.extend(batch)
                kafka_broker.produce(topic, [json.dumps(e) for e in batch], partition=p)
            result, cursor = _tick(sensor, instance, resource, cursor)
            (request,) = result.run_requests
            assert {k.path[-1] for k in request.asset_selection} == {"clicks", "clicks_per_minute"}
            run = _run(assets, request, resource, instance)
            assert run.success
            mats = _materializations(run)
            assert mats["clicks"]["dagster_rw/consumer_lag"] == 0
            assert sum(mats["clicks"]["dagster_rw/source_end_offsets"].values()) == len(events)
            with dagster_rw.connect(str(tmp_path / "wh")) as conn:
                got = conn.execute("SELECT page, window_start, clicks, slowest FROM clicks_per_minute").fetchall()
            db = duckdb.connect()
            db.execute("CREATE TABLE ev (page INT, ms INT, ts TIMESTAMP)")
            db.executemany("INSERT INTO ev VALUES (?, ?, ?)", [(e["page"], e["ms"], e["ts"]) for e in events])
            want = db.sql("SELECT page, time_bucket(INTERVAL '1 minute', ts) AS ws, count(*), max(ms) "
                          "FROM ev GROUP BY ALL").fetchall()
            assert_same(got, want, "clicks_per_minute")
        result, _ = _tick(sensor, instance, resource, cursor)
        assert not result.run_requests  # every record is sealed and applied


# -- temporal filters: the sensor cuts epochs for the time when no input changes -----------------
class _ClockedResource(RwResource):
    """The resource with the test's clock for now() and the barriers' time."""

    def get_connection(self):
        conn = super().get_connection()
        conn.wh.options = dataclasses.replace(conn.wh.options, clock=lambda: _CLOCK[0])
        return conn


_CLOCK = [0.0]


def test_the_sensor_cuts_a_barrier_for_the_time_when_inputs_are_quiet(tmp_path):
    """A view with a temporal filter changes as time passes with no input: while no input brings
    anything, a tick cuts a barrier once the newest is `time_barrier_seconds` old and requests the
    run that brings the view (and its quiet input) to it; rows leave the view as DuckDB says."""
    import datetime as dt

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "events.sql").write_text(
        "CREATE TABLE ev (id INT PRIMARY KEY, ts TIMESTAMP);\n"
        "CREATE MATERIALIZED VIEW recent AS SELECT id, ts FROM ev WHERE ts > now() - INTERVAL '1 hour';\n"
        "CREATE MATERIALIZED VIEW per_hour AS SELECT count(*) AS n FROM ev;\n")
    assets = build_rw_assets(RwProject(folder))
    sensor = build_barrier_sensor(assets, time_barrier_seconds=60)
    warehouse = str(tmp_path / "wh")
    resource = _ClockedResource(warehouse=warehouse, engine="duckdb")
    start = dt.datetime(2026, 1, 1, 12, 0, 0)
    _CLOCK[0] = start.replace(tzinfo=dt.timezone.utc).timestamp()
    oracle = Oracle()
    oracle.execute("CREATE TABLE ev (id INT PRIMARY KEY, ts TIMESTAMP)")
    rows = ", ".join(f"({i}, TIMESTAMP '{start - dt.timedelta(minutes=10 * i)}')" for i in range(1, 6))

    def recent_now():
        now = dt.datetime.fromtimestamp(_CLOCK[0], dt.timezone.utc).replace(tzinfo=None)
        return oracle.rows(f"SELECT id, ts FROM ev WHERE ts > TIMESTAMP '{now}' - INTERVAL '1 hour'")

    with dg.instance_for_test() as instance:
        _, cursor = _tick(sensor, instance, resource, None)  # deploys the project
        with dagster_rw.connect(warehouse) as feeder:
            feeder.execute(f"INSERT INTO ev VALUES {rows}")
        oracle.execute(f"INSERT INTO ev VALUES {rows}")
        result, cursor = _tick(sensor, instance, resource, cursor)
        (request,) = result.run_requests
        assert _run(assets, request, resource, instance).success
        with dagster_rw.connect(warehouse) as reader:
            assert_same(reader.execute("SELECT * FROM recent").fetchall(), recent_now(), "recent")
            assert len(recent_now()) == 5
        # nothing new, the newest barrier 30 s old: no barrier yet
        _CLOCK[0] += 30
        result, cursor = _tick(sensor, instance, resource, cursor)
        assert not result.run_requests
        # 25 minutes on (12:25:30): the rows of 11:20 and 11:10 are older than an hour; a barrier for the time alone
        _CLOCK[0] += 25 * 60
        epoch_before = json.loads(cursor)["epoch"]
        result, cursor = _tick(sensor, instance, resource, cursor)
        (request,) = result.run_requests
        assert json.loads(cursor)["epoch"] == epoch_before + 1
        assert {k.path[-1] for k in request.asset_selection} == {"ev", "recent"}  # per_hour is not changed by time
        run = _run(assets, request, resource, instance)
        assert run.success
        # the batch check reads now() as the view's epoch saw it, not as the check's own time
        assert _checks(run)[("recent", "matches_batch_query")].passed
        with dagster_rw.connect(warehouse) as reader:
            assert_same(reader.execute("SELECT * FROM recent").fetchall(), recent_now(), "recent after the time passed")
            assert len(recent_now()) == 3
            assert reader.execute("SELECT * FROM per_hour").fetchall() == [(5,)]
        # right after it: nothing to do
        result, cursor = _tick(sensor, instance, resource, cursor)
        assert not result.run_requests
