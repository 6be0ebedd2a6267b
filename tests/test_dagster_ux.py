"""What a Dagster user meets: checks run on their own, the catalog's descriptions and kinds, the
component in `dg`, and failing expectations that name their rows. Through Dagster's own APIs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
import yaml
from test_dagster import SHOP, _checks, _materializations

import dagster_rw
from dagster_rw.dagster import RwProject, RwProjectComponent, RwResource, build_rw_assets

ORDERS = dg.AssetKey("orders")
BETWEEN = dg.AssetCheckKey(ORDERS, "expect_column_values_to_be_between__quantity")
NOT_NULL = dg.AssetCheckKey(ORDERS, "expect_column_values_to_not_be_null__customer")
ORDERS_KEY = dg.AssetCheckKey(ORDERS, "key_unique_not_null")
LINES_BATCH = dg.AssetCheckKey(dg.AssetKey("order_lines"), "matches_batch_query")


@pytest.fixture(scope="module")
def shop():
    return RwProject(SHOP)


@pytest.fixture(scope="module")
def shop_assets(shop):
    return build_rw_assets(shop)


def _epochs(conn) -> dict[str, int]:
    conn.wh.sync()
    return {r["name"]: r["epoch"] for r in conn.status()}


def _latest_status(instance, check_key: dg.AssetCheckKey, run_id: str):
    (record,) = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=1)
    assert record.run_id == run_id
    return record.status.value  # PLANNED while a check never reported, SUCCEEDED or FAILED


# -- checks selected without their asset -------------------------------------------------------
@pytest.fixture(scope="module")
def failing_orders(shop_assets, tmp_path_factory):
    """A warehouse whose committed `orders` hold a quantity of 0 (outside the declared 1..1000), and
    a later epoch, sealed but never applied, that sets it right. The tests using it never refresh
    `orders`: its checks keep seeing the quantity of 0."""
    warehouse = str(tmp_path_factory.mktemp("wh"))
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        assert dg.materialize(shop_assets, resources={"rw": resource}, instance=instance).success
        feeder.execute("INSERT INTO items VALUES (1, 'pen', 2.50)")
        feeder.execute("INSERT INTO orders VALUES (10, 1, 'ann', 0, TIMESTAMP '2026-11-01 10:00:00'), "
                       "(11, 1, 'bob', 2, TIMESTAMP '2026-11-01 11:00:00')")
        feeder.barrier()
        run = dg.materialize(shop_assets, resources={"rw": resource}, instance=instance, raise_on_error=False)
        assert not _checks(run)[("orders", BETWEEN.name)].passed
        feeder.execute("UPDATE orders SET quantity = 5 WHERE id = 10")
        feeder.barrier()
        yield {"resource": resource, "instance": instance, "feeder": feeder}


def test_a_failing_check_run_alone_fails_without_materializing(shop_assets, failing_orders):
    instance, feeder, resource = failing_orders["instance"], failing_orders["feeder"], failing_orders["resource"]
    before = _epochs(feeder)
    run = dg.materialize(shop_assets, selection=dg.AssetSelection.checks(BETWEEN), resources={"rw": resource},
                         instance=instance, raise_on_error=False)
    assert not run.get_asset_materialization_events() and not _materializations(run)
    (evaluation,) = run.get_asset_check_evaluations()
    assert evaluation.asset_check_key == BETWEEN
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    # the committed epoch was checked (quantity 0), not the sealed epoch that sets it to 5
    assert evaluation.metadata["gx/unexpected_count"].value == 1
    assert evaluation.metadata["dagster_rw/epoch"].value == before["orders"]
    assert _latest_status(instance, BETWEEN, run.run_id) == "FAILED"
    assert not any("did not yield or return expected outputs" in (e.message or "") for e in run.all_events)
    assert _epochs(feeder) == before  # nothing was refreshed


def test_a_subset_of_checks_reports_exactly_those(shop_assets, failing_orders):
    """A job of checks only (as the UI's "Execute checks" launches): each selected check reports,
    from one or several assets, and no other check or asset runs."""
    instance, feeder, resource = failing_orders["instance"], failing_orders["feeder"], failing_orders["resource"]
    before = _epochs(feeder)
    selected = {BETWEEN, NOT_NULL, ORDERS_KEY, LINES_BATCH}
    defs = dg.Definitions(assets=shop_assets, resources={"rw": resource},
                          jobs=[dg.define_asset_job("shop_checks", selection=dg.AssetSelection.checks(*selected))])
    run = defs.resolve_job_def("shop_checks").execute_in_process(instance=instance, raise_on_error=False)
    assert not run.get_asset_materialization_events()
    got = {e.asset_check_key: e for e in run.get_asset_check_evaluations()}
    assert set(got) == selected
    assert not got[BETWEEN].passed
    assert got[NOT_NULL].passed and got[ORDERS_KEY].passed and got[LINES_BATCH].passed
    assert got[LINES_BATCH].metadata["compared"].value
    for key in selected:
        assert _latest_status(instance, key, run.run_id) == ("FAILED" if key == BETWEEN else "SUCCEEDED")
    assert _epochs(feeder) == before


def test_a_check_of_an_unselected_asset_beside_a_materialization(shop_assets, failing_orders):
    """Materializing `items` and checking `orders` in one run: items advances, orders is checked as
    committed and left where it is."""
    instance, feeder, resource = failing_orders["instance"], failing_orders["feeder"], failing_orders["resource"]
    before = _epochs(feeder)
    feeder.execute("INSERT INTO items VALUES (2, 'ink', 7.00)")
    feeder.barrier()
    selection = dg.AssetSelection.assets("items").without_checks() | dg.AssetSelection.checks(BETWEEN)
    run = dg.materialize(shop_assets, selection=selection, resources={"rw": resource}, instance=instance,
                         raise_on_error=False)
    assert set(_materializations(run)) == {"items"}
    assert {e.asset_check_key for e in run.get_asset_check_evaluations()} == {BETWEEN}
    after = _epochs(feeder)
    assert after["items"] > before["items"] and after["orders"] == before["orders"]


def test_a_check_on_an_object_not_yet_created_fails_and_says_why(shop_assets, tmp_path):
    resource = RwResource(warehouse=str(tmp_path / "wh"), engine="duckdb")
    with dg.instance_for_test() as instance:
        run = dg.materialize(shop_assets, selection=dg.AssetSelection.checks(ORDERS_KEY),
                             resources={"rw": resource}, instance=instance, raise_on_error=False)
        (evaluation,) = run.get_asset_check_evaluations()
        assert not evaluation.passed and "does not exist in the warehouse yet" in evaluation.description
        assert not run.get_asset_materialization_events()


# -- the catalog: descriptions, comments, kinds ----------------------------------------------------
def _rendered(description: str):
    """The description as a CommonMark renderer parses it (Dagster renders descriptions as markdown)."""
    from markdown_it import MarkdownIt

    return [t for t in MarkdownIt("commonmark").parse(description) if t.type in ("inline", "fence")]


def test_descriptions_are_a_sentence_then_the_sql_as_code(shop, shop_assets):
    specs = {s.key.path[-1]: s for a in shop_assets for s in a.specs}
    for name, obj in shop.objects.items():
        description = specs[name].description
        first_line = description.splitlines()[0]
        # the catalog's lists show the raw first line: plain words, no markdown
        assert first_line and not any(c in first_line for c in "`#*[") and "\\" not in description, description
        (paragraph, code) = _rendered(description)
        assert paragraph.type == "inline" and code.type == "fence" and code.info == "sql"
        assert code.content.startswith("CREATE ") and "--" not in code.content.split("\n")[0]
        assert code.content.strip() == obj.sql[obj.sql.index("CREATE"):].strip()
    assert specs["unvisited"].description.startswith("Products nobody visited yet (an outer join).\n\n```sql\n")
    # a wrapped comment is one paragraph
    assert _rendered(specs["longest_visit"].description)[0].content.startswith(
        "The longest visit per category, kept right when visits are deleted (MAX keeps every value per\ngroup")
    # the files' headers document no object
    assert not any("A shop:" in s.description or "Visits to products, and" in s.description for s in specs.values())


def test_only_the_comment_directly_above_a_statement_documents_it(tmp_path):
    (tmp_path / "model.sql").write_text("""-- Header of the file: about everything below, see the wiki.
-- Still the header.

-- The accounts.
CREATE TABLE accounts (id int PRIMARY KEY, owner varchar); -- trailing: about accounts, not what follows
CREATE TABLE plain (id int PRIMARY KEY, n int);

-- An orphan, followed by a blank line.

/* Owners with their number
   of accounts. */
CREATE MATERIALIZED VIEW owners AS SELECT owner, count(*) AS n FROM accounts GROUP BY owner;
-- Sums of n:
-- a `backticked` word and ``` three backticks.
CREATE MATERIALIZED VIEW sums AS SELECT sum(n) AS total FROM plain;
""")
    project = RwProject(tmp_path)
    assert {n: o.comment for n, o in project.objects.items()} == {
        "accounts": "The accounts.",
        "plain": "",
        "owners": "Owners with their number\nof accounts.",
        "sums": "Sums of n:\na `backticked` word and ``` three backticks.",
    }
    specs = {s.key.path[-1]: s for a in build_rw_assets(project) for s in a.specs}
    assert specs["plain"].description.startswith("Table with primary key (id).\n\n")
    assert specs["sums"].description.startswith("Sums of n:")
    for spec in specs.values():
        fences = [t for t in _rendered(spec.description) if t.type == "fence"]
        assert len(fences) == 1 and fences[0].content.startswith("CREATE")


def test_comments_are_no_part_of_a_definition(tmp_path):
    """Rewording the comment above a statement leaves the deployed object as it is."""
    from dagster_rw.dagster import deploy

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "a.sql").write_text("-- The first words.\nCREATE TABLE t (id int PRIMARY KEY);")
    with dagster_rw.connect(str(tmp_path / "wh")) as conn:
        assert deploy(conn, RwProject(folder)) == ["t"]
        (folder / "a.sql").write_text("-- A header.\n\n-- Other words.\nCREATE TABLE t (id int PRIMARY KEY);")
        assert deploy(conn, RwProject(folder)) == []
        (folder / "a.sql").write_text("-- Other words.\nCREATE TABLE t (id int PRIMARY KEY, n int);")
        with pytest.raises(dagster_rw.ProgrammingError, match="another definition"):
            deploy(conn, RwProject(folder))


def test_kinds_name_the_engines_the_resource_runs(shop, tmp_path):
    from dagster_pyspark import LazyPySparkResource

    from dagster_rw.dagster import DagsterRwTranslator

    wh = str(tmp_path / "wh")
    cases = [
        (RwResource(warehouse=wh), {"duckdb"}),  # 'auto' with nothing configured: steps in-process
        (RwResource(warehouse=wh, engine="duckdb"), {"duckdb"}),
        (RwResource(warehouse=wh, engine="spark"), {"spark"}),
        (RwResource(warehouse=wh, spark="sc://spark:15002"), {"duckdb", "spark"}),
        (RwResource(warehouse=wh, pyspark=LazyPySparkResource(spark_config={"spark.master": "local[1]"})),
         {"duckdb", "spark"}),
    ]
    for resource, engines in cases:
        assert resource.engine_kinds() == engines
        (assets_def,) = build_rw_assets(shop, translator=DagsterRwTranslator(engines=resource.engine_kinds()))
        kinds = {s.key.path[-1]: s.kinds for s in assets_def.specs}
        assert kinds["orders"] == {"sql", "table", *engines} and kinds["order_lines"] == {"sql", "view", *engines}
    component = RwProjectComponent.resolve_from_yaml(f"project: {SHOP}\nwarehouse: {wh}\nengine: duckdb\n")
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    assert defs.resources["rw"].engine == "duckdb"
    assert defs.resolve_assets_def("orders").specs_by_key[ORDERS].kinds == {"sql", "table", "duckdb"}


def test_materializations_record_the_engine_of_their_step(shop_assets, tmp_path):
    warehouse = str(tmp_path / "wh")
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        assert dg.materialize(shop_assets, resources={"rw": resource}, instance=instance).success
        feeder.execute("INSERT INTO items VALUES (1, 'pen', 2.50)")
        feeder.barrier()
        run = dg.materialize(shop_assets, selection=["items"], resources={"rw": resource}, instance=instance)
        assert _materializations(run)["items"]["dagster_rw/engine"] == "duckdb"
        run = dg.materialize(shop_assets, selection=["items"], resources={"rw": resource}, instance=instance)
        assert _materializations(run)["items"]["dagster_rw/engine"].startswith("none")  # nothing new to apply


# -- the component in `dg` ---------------------------------------------------------------------------
def _dg(project: Path, *args: str):
    """`dg` (dagster-dg-cli) run by this interpreter in the dg project at `project`."""
    import subprocess
    import sys

    env = {**os.environ, "DAGSTER_HOME": str(project.parent / "dagster_home")}
    out = subprocess.run([sys.executable, "-m", "dagster_dg_cli.cli", *args], cwd=project, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, f"dg {' '.join(args)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _dg_project(root: Path, module: str) -> Path:
    """The smallest project `dg` accepts: a pyproject.toml naming the root module, whose
    definitions load the components under its `defs` folder."""
    (root / module / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"""\
[project]
name = "{module}"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["dagster-rw[dagster]"]

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "{module}"
""")
    (root / module / "__init__.py").write_text("")
    (root / module / "defs" / "__init__.py").write_text("")
    (root / module / "definitions.py").write_text("""\
from pathlib import Path

import dagster as dg


@dg.definitions
def defs():
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
""")
    return root


def test_dg_lists_scaffolds_checks_and_loads_the_component(tmp_path):
    """Through the real CLI, in a new dg project: the component is listed, scaffolded with a starter
    SQL file, checked, and its definitions listed."""
    project = _dg_project(tmp_path / "myshop", "myshop")
    listed = json.loads(_dg(project, "list", "components", "--json").stdout)
    assert "dagster_rw.dagster.RwProjectComponent" in {c["key"] for c in listed["items"]}
    _dg(project, "scaffold", "defs", "dagster_rw.dagster.RwProjectComponent", "shop", "--engine", "duckdb")
    folder = project / "myshop" / "defs" / "shop"
    assert yaml.safe_load((folder / "defs.yaml").read_text()) == {
        "type": "dagster_rw.dagster.RwProjectComponent",
        "attributes": {"project": "sql", "name": "shop", "warehouse": ".dagster_rw", "engine": "duckdb"}}
    starter = RwProject(folder / "sql")
    assert [p.name for p in starter.sql_files()] == ["shop.sql"]
    checked = _dg(project, "check", "defs")
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    defs = json.loads(_dg(project, "list", "defs", "--json").stdout)
    assets = {a["asset_key"]: a for a in defs["assets"]}
    assert set(assets) == set(starter.objects) == {"orders", "customer_spend"}
    assert assets["customer_spend"]["dependency_keys"] == ["orders"]
    assert {a["group_name"] for a in assets.values()} == {"shop"}
    assert set(assets["orders"]["kinds"]) == {"sql", "table", "duckdb"}
    assert assets["customer_spend"]["description"].startswith("Spend per customer")
    assert sorted(s["name"] for s in defs["sensors"]) == ["shop_barrier_sensor", "shop_continuous_sensor"]
    assert {j["name"] for j in defs["jobs"]} >= {"shop_continuous", "shop_maintenance"}
    assert {c["key"] for c in defs["asset_checks"]} >= {"orders:key_unique_not_null",
                                                         "customer_spend:matches_batch_query"}


def test_scaffolder_keeps_an_existing_sql_project_and_registers_the_library(tmp_path):
    from dagster.components.component_scaffolding import scaffold_object
    from dagster_shared.libraries import DagsterLibraryRegistry

    assert DagsterLibraryRegistry.get()["dagster-rw"] == dagster_rw.__version__
    target = tmp_path / "defs" / "shop"
    scaffold_object(target, "dagster_rw.dagster.RwProjectComponent", json.dumps({"project": str(SHOP)}), "yaml",
                    project_root=tmp_path)
    assert sorted(p.name for p in SHOP.glob("*.sql")) == ["shop.sql", "visits.sql"]  # no starter added
    attributes = yaml.safe_load((target / "defs.yaml").read_text())["attributes"]
    assert attributes == {"project": str(SHOP), "name": "shop", "warehouse": ".dagster_rw"}
    defs = RwProjectComponent.resolve_from_yaml(yaml.safe_dump(attributes)).build_defs(
        dg.ComponentTree.for_test().load_context)
    assert {k.path[-1] for k in defs.resolve_asset_graph().get_all_asset_keys()} == set(RwProject(SHOP).objects)
    assert defs.resolve_sensor_def("shop_barrier_sensor") is not None
    assert defs.resolve_sensor_def("shop_continuous_sensor").default_status == dg.DefaultSensorStatus.STOPPED
    assert defs.resolve_job_def("shop_continuous").name == "shop_continuous"
    continuous = RwProjectComponent.resolve_from_yaml(yaml.safe_dump({**attributes, "continuous": True})).build_defs(
        dg.ComponentTree.for_test().load_context)
    assert continuous.resolve_sensor_def("shop_continuous_sensor").default_status == dg.DefaultSensorStatus.RUNNING


# -- failing expectations name their rows --------------------------------------------------------------
def _table(markdown: str) -> list[list[str]]:
    """The cells of a markdown table, as CommonMark with tables (GFM) parses it."""
    from markdown_it import MarkdownIt

    rows, row = [], None
    for t in MarkdownIt("commonmark").enable("table").parse(markdown):
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(t.content)
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    return rows


def test_a_failing_expectation_names_its_rows_by_key(failing_orders, shop_assets):
    instance, resource = failing_orders["instance"], failing_orders["resource"]
    run = dg.materialize(shop_assets, selection=dg.AssetSelection.checks(BETWEEN, NOT_NULL),
                         resources={"rw": resource}, instance=instance, raise_on_error=False)
    got = {e.asset_check_key: e for e in run.get_asset_check_evaluations()}
    between = got[BETWEEN]
    assert _table(between.metadata["unexpected_rows"].value) == [["id", "quantity"], ["10", "0"]]
    assert between.description == "1 of 2 rows unexpected, e.g. id = 10"
    assert between.metadata["gx/partial_unexpected_index_list"].value == [{"quantity": 0, "id": 10}]
    assert got[NOT_NULL].passed and "unexpected_rows" not in got[NOT_NULL].metadata


def test_unexpected_rows_by_composite_key_or_whole_row_at_most_ten(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "model.sql").write_text("""
CREATE TABLE stock (shop int, sku varchar, units int, PRIMARY KEY (shop, sku));
CREATE TABLE notes (who varchar, note varchar);
""")
    (folder / "expectations.yaml").write_text("""
stock:
  - expect_column_values_to_be_between: {column: units, min_value: 0}
notes:
  - expect_column_values_to_not_be_null: {column: note}
""")
    project = RwProject(folder)
    assets = build_rw_assets(project)
    warehouse = str(tmp_path / "wh")
    resource = RwResource(warehouse=warehouse, engine="duckdb")
    with dg.instance_for_test() as instance, dagster_rw.connect(warehouse) as feeder:
        assert dg.materialize(assets, resources={"rw": resource}, instance=instance).success
        feeder.execute("INSERT INTO stock VALUES " + ", ".join(f"(1, 's|{i:02d}', {-i})" for i in range(1, 14))
                       + ", (2, 'ok', 5)")
        feeder.execute("INSERT INTO notes VALUES ('ann', NULL), ('bob', 'fine')")
        feeder.barrier()
        run = dg.materialize(assets, resources={"rw": resource}, instance=instance, raise_on_error=False)
        checks = _checks(run)
        stock = checks[("stock", "expect_column_values_to_be_between__units")]
        rows = _table(stock.metadata["unexpected_rows"].value)
        assert rows[0] == ["shop", "sku", "units"] and len(rows) == 1 + 10  # the first ten of 13
        # every offending row by its key, a '|' in a value kept inside its cell
        assert all(r[0] == "1" and r[1] == f"s|{-int(r[2]):02d}" for r in rows[1:])
        assert stock.description.startswith("13 of 14 rows unexpected, e.g. shop = 1, sku = s|")
        assert stock.description.endswith("; ...")
        notes = checks[("notes", "expect_column_values_to_not_be_null__note")]  # no key: the whole row
        assert _table(notes.metadata["unexpected_rows"].value) == [["who", "note"], ["ann", "NULL"]]
        assert notes.description == "1 of 2 rows unexpected, e.g. who = ann, note = NULL"
