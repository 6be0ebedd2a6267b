"""What Dagster is told beyond materializations: freshness policies on the specs, and each object's
own start and end inside the one step that refreshes them all (engine events with step markers)."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.freshness import TimeWindowFreshnessPolicy

import dagster_rw
from dagster_rw.dagster import DagsterRwTranslator, RwProject, RwProjectComponent, RwResource, build_rw_assets

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "assets" / "shop"


def _policies(assets) -> dict[str, object]:
    return {spec.key.path[-1]: spec.freshness_policy for a in assets for spec in a.specs}


def test_no_freshness_policy_unless_given():
    assert set(_policies(build_rw_assets(RwProject(SHOP))).values()) == {None}


def test_the_translator_declares_a_freshness_policy_per_object():
    policy = dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=1), warn_window=timedelta(minutes=10))

    class ViewsOnly(DagsterRwTranslator):
        def get_freshness_policy(self, obj):
            return self.freshness_policy if obj.kind == "materialized_view" else None

    project = RwProject(SHOP)
    every = _policies(build_rw_assets(project, translator=DagsterRwTranslator(freshness_policy=policy)))
    assert set(every) == set(project.objects) and set(every.values()) == {policy}
    views = _policies(build_rw_assets(project, translator=ViewsOnly(freshness_policy=policy)))
    view_names = {n for n, o in project.objects.items() if o.kind == "materialized_view"}
    assert view_names and {n for n, p in views.items() if p == policy} == view_names
    assert {n for n, p in views.items() if p is None} == set(project.objects) - view_names >= {"orders", "items"}


def test_the_component_and_the_reference_deployment_declare_one(tmp_path):
    component = RwProjectComponent.resolve_from_yaml(
        f"project: {SHOP}\nwarehouse: {tmp_path / 'wh'}\n"
        "freshness_fail_window_minutes: 30\nfreshness_warn_window_minutes: 5\n")
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    (policy,) = set(_policies(defs.assets).values())
    assert isinstance(policy, TimeWindowFreshnessPolicy)
    assert policy.fail_window.to_timedelta() == timedelta(minutes=30)
    assert policy.warn_window.to_timedelta() == timedelta(minutes=5)
    # the reference deployment (as its code server loads it): 60 min to fail, 15 to warn
    out = subprocess.run([sys.executable, "-c", (
        "import definitions\n"
        "ps = {s.freshness_policy for a in definitions.shop_assets for s in a.specs}\n"
        "(p,) = ps\n"
        "print(p.fail_window.to_timedelta().total_seconds(), p.warn_window.to_timedelta().total_seconds())")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DAGSTER_RW_WAREHOUSE": str(tmp_path / "ref")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["3600.0", "900.0"]


def test_each_object_and_check_has_its_own_start_and_end_in_the_step(tmp_path):
    project = RwProject(SHOP)
    assets = build_rw_assets(project)
    resource = RwResource(warehouse=str(tmp_path / "wh"), engine="duckdb")
    with dg.instance_for_test() as instance:
        assert dg.materialize(assets, resources={"rw": resource}, instance=instance).success
        with dagster_rw.connect(str(tmp_path / "wh")) as feeder:
            feeder.execute("INSERT INTO items VALUES (1, 'pen', 2.50)")
            feeder.execute("INSERT INTO orders VALUES (10, 1, 'ann', 0, TIMESTAMP '2026-11-01 10:00:00')")
            feeder.barrier()
        run = dg.materialize(assets, resources={"rw": resource}, instance=instance, raise_on_error=False)
        events = [e for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
                  if e.dagster_event.engine_event_data.marker_start or e.dagster_event.engine_event_data.marker_end]
    starts = {e.dagster_event.engine_event_data.marker_start: e for e in events
              if e.dagster_event.engine_event_data.marker_start}
    ends = {e.dagster_event.engine_event_data.marker_end: e for e in events
            if e.dagster_event.engine_event_data.marker_end}
    step_objects = [n for n, o in project.objects.items() if o.kind != "sink"]
    checks = {f"check {project.objects[k.asset_key.path[-1]].name}:{k.name}"
              for a in assets for k in a.check_keys if k.asset_key.path[-1] in step_objects}
    assert set(starts) == set(ends) == {f"refresh {n}" for n in step_objects} | checks
    assert all(e.dagster_event.step_key for e in events)  # markers of the step, drawn in its bar
    # the objects are refreshed one after another in the project's order, each ending before the next starts
    for before, after in zip(step_objects, step_objects[1:]):
        assert ends[f"refresh {before}"].timestamp <= starts[f"refresh {after}"].timestamp
    epochs = {m.asset_key.path[-1]: m.metadata["dagster_rw/epoch"].value
              for m in run.asset_materializations_for_node(assets[0].node_def.name)}
    for name in step_objects:
        start, end = starts[f"refresh {name}"], ends[f"refresh {name}"]
        meta = end.dagster_event.engine_event_data.metadata
        assert start.timestamp <= end.timestamp
        assert meta["dagster_rw/started"].value <= meta["dagster_rw/finished"].value
        assert meta["dagster_rw/seconds"].value >= 0 and meta["dagster_rw/outcome"].value == "done"
        assert meta["dagster_rw/epoch"].value == epochs[name]
    # the failing expectation's span says so
    between = ends["check orders:expect_column_values_to_be_between__quantity"].dagster_event.engine_event_data
    assert between.metadata["dagster_rw/passed"].value == "False"
    assert ends["check items:key_unique_not_null"].dagster_event.engine_event_data.metadata[
        "dagster_rw/passed"].value == "True"
