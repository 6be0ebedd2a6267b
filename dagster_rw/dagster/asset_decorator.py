"""`@rw_assets`: one subsettable `multi_asset` for the objects of a SQL project, like `@dbt_assets`.

    shop = RwProject("assets/shop")

    @rw_assets(project=shop)
    def shop_assets(context: dg.AssetExecutionContext, rw: RwResource):
        yield from rw.refresh(context).stream()

Every object gets an `AssetSpec` from the translator and its checks (`check_specs`, evaluated in the
step that materializes it). The multi-asset subsets by assets and by checks alike: a run of checks
alone (the UI's "Execute checks", `AssetSelection.checks(...)`) evaluates exactly those checks on the
committed data and materializes nothing. Sinks are left out by default: `build_rw_assets` puts each
in its own step, so a failing sink never fails the run that advances the views.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import dagster as dg

from .checks import check_specs_for
from .project import RwObject, RwProject
from .resource import NAME_KEY, PROJECT_DIR_KEY, remember_project
from .translator import DagsterRwTranslator

SINK = "sink"


def _as_project(project: RwProject | str) -> RwProject:
    return project if isinstance(project, RwProject) else RwProject(project)


def _selected(project: RwProject, select, exclude) -> list[RwObject]:
    def matches(obj: RwObject, sel) -> bool:
        if callable(sel):
            return bool(sel(obj))
        names = {sel} if isinstance(sel, str) else set(sel)
        return obj.name in names or obj.kind in names

    out = []
    for obj in project.objects.values():
        if select is not None and not matches(obj, select):
            continue
        if exclude is not None and matches(obj, exclude):
            continue
        out.append(obj)
    return out


def build_rw_specs(project: RwProject, translator: DagsterRwTranslator | None = None,
                   objects: Iterable[RwObject] | None = None):
    """The asset specs and check specs of `objects` (all of the project's by default)."""
    translator = translator or DagsterRwTranslator()
    remember_project(project)
    specs, check_specs = [], []
    for obj in objects if objects is not None else project.objects.values():
        # skippable: in a sensor's run, an object with nothing to apply records no materialization
        spec = translator.get_asset_spec(obj, project).merge_attributes(
            metadata={NAME_KEY: obj.name, PROJECT_DIR_KEY: str(project.project_dir)}).replace_attributes(
            skippable=True)
        specs.append(spec)
        check_specs.extend(check_specs_for(obj, spec.key))
    return specs, check_specs


def rw_assets(*, project: RwProject | str, name: str | None = None,
              translator: DagsterRwTranslator | None = None,
              select: str | Iterable[str] | Callable[[RwObject], bool] | None = None,
              exclude: str | Iterable[str] | Callable[[RwObject], bool] | None = SINK,
              op_tags: dict | None = None, retry_policy: dg.RetryPolicy | None = None,
              pool: str | None = None, required_resource_keys: set[str] | None = None):
    """Decorate a function `(context, rw)` into the project's assets. `select` / `exclude` take object
    names, kinds ('table', 'materialized_view', 'source', 'sink') or a predicate."""
    project = _as_project(project)
    objects = _selected(project, select, exclude)
    specs, check_specs = build_rw_specs(project, translator, objects)
    return dg.multi_asset(
        specs=specs, check_specs=check_specs, can_subset=True,
        name=name or f"{project.name}_rw_assets", op_tags=op_tags, retry_policy=retry_policy, pool=pool,
        required_resource_keys=required_resource_keys)


def build_rw_assets(project: RwProject | str, translator: DagsterRwTranslator | None = None,
                    resource_key: str = "rw", sink_retry_policy: dg.RetryPolicy | None = None
                    ) -> list[dg.AssetsDefinition]:
    """The whole project as asset definitions, without writing a function: one step for the tables,
    sources and views, and one step per sink (each with `sink_retry_policy`)."""
    project = _as_project(project)
    out = []

    @rw_assets(project=project, translator=translator, required_resource_keys={resource_key})
    def _dataflow(context):
        yield from getattr(context.resources, resource_key).refresh(context, project).stream()

    if _dataflow.specs:
        out.append(_dataflow)
    retry = sink_retry_policy or dg.RetryPolicy(max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL,
                                                jitter=dg.Jitter.PLUS_MINUS)
    for obj in project.objects.values():
        if obj.kind != SINK:
            continue

        @rw_assets(project=project, translator=translator, select=[obj.name], exclude=None,
                   name=f"{project.name}_rw_sink_{obj.name}", retry_policy=retry,
                   required_resource_keys={resource_key})
        def _sink(context):
            yield from getattr(context.resources, resource_key).refresh(context, project).stream()

        out.append(_sink)
    return out
