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
