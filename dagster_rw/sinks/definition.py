"""CREATE SINK and DROP SINK: checking a sink against what it reads, taking its starting snapshot into
its own log, and committing it to the catalog."""
from __future__ import annotations

import pyarrow as pa

from ..errors import ProgrammingError
from ..operators.base import W
from ..runtime import step
from ..sql.append_only import is_append_only, source_is_append_only
from ..sql.planner import Planner
from ..storage import manifest as manifests
from ..storage.catalog import MATERIALIZED_VIEW, SINK, TABLE, CatalogObject, Column
from ..storage.manifest import Manifest
from ..storage.secrets import seal_options
from ..storage.state_table import write_sst
from . import delivery
from .spec import APPEND_ONLY, build_spec, check_against_input
from ..runtime.interfaces import SinkWarehouse

INTERNAL_OF = "internal_of"  # option of the view planned for CREATE SINK ... AS query


def internal_view_name(sink: str) -> str:
    return f"_sink_{sink}"


def create_sink(wh: SinkWarehouse, s) -> bool:
    """`s` is a parsed CreateSink (its text already redacted)."""
    cat = wh.catalog(reload=True)
    if s.name in cat.objects:
        if s.if_not_exists:
            return False
        raise ProgrammingError(f'relation "{s.name}" already exists')
    # a secret's clear value never reaches the catalog: `key = secret name` is kept as a reference,
    # a literal password encrypted (refused without a key)
    options = seal_options(s.options, set(s.secret_options), cat.secrets or {}, f"sink {s.name!r}")
    spec = build_spec(s.name, options, s.format, s.encode, s.into)
    into_obj = None
    if s.into is not None:
        into_obj = cat.get(s.into)
        if into_obj is None or into_obj.kind != TABLE:
            raise ProgrammingError(f"sink {s.name!r}: INTO {s.into!r} must name an existing table")
    if s.query is not None:
        input_name = internal_view_name(s.name)
        if input_name in cat.objects:
            raise ProgrammingError(f'sink {s.name!r}: relation "{input_name}" already exists')
        view_sql = f"CREATE MATERIALIZED VIEW {input_name} AS {s.query_sql}"
        plan = Planner(cat.get, view_sql, input_name, wh.engine, cat.indexes_of).plan(s.query)
        columns = [c.name for c in plan.columns if not c.hidden]
        append_only = is_append_only(plan, cat.get, wh.plan)
        upstream = sorted({n.source for n in plan.walk() if hasattr(n, "source") and n.source})
    else:
        source = cat.get(s.from_name)
        if source is None:
            raise ProgrammingError(f"sink {s.name!r}: relation {s.from_name!r} does not exist")
        if source.kind == SINK:
            raise ProgrammingError(f"sink {s.name!r}: {s.from_name!r} is a sink; a sink reads a table or a view")
        input_name = s.from_name
        columns = [c.name for c in source.visible_columns]
        append_only = source_is_append_only(s.from_name, cat.get, wh.plan)
        upstream = [s.from_name]
    check_against_input(spec, columns, s.from_name or "its query", append_only, into_obj)
    if into_obj is not None and into_obj.name in {o.name for o in wh.ancestors(upstream)}:
        raise ProgrammingError(f"sink {s.name!r}: it reads from {into_obj.name!r}, so writing into it would "
                               "feed the sink its own output")
    if s.query is not None:
        wh.create_view(input_name, view_sql, s.query)
        cat = wh.catalog(reload=True)
        objects = dict(cat.objects)
        objects[input_name].options = {**objects[input_name].options, INTERNAL_OF: s.name}
        wh.commit_catalog(objects, f"CREATE SINK {s.name} (its query)")
    else:
        for up in wh.ancestors([input_name]):  # the snapshot is taken at the newest epoch
            wh.refresh(up.name)
    source = wh.get(input_name)
    m_in = wh.manifest(input_name)
    start = m_in.epoch if m_in.exists else source.created_epoch
    visible = source.visible_columns
    obj = CatalogObject(name=s.name, kind=SINK, sql=s.sql, columns=[Column(c.name, c.type) for c in visible],
                        pk=list(spec.primary_key), stream_key=list(spec.primary_key), inputs=[input_name],
                        created_epoch=start, append_only=spec.type == APPEND_ONLY, options=spec.to_options(),
                        folder=wh.new_folder(wh.catalog(), s.name))
    wh.clear_leftovers(obj.key_folder)
    wh.forget_manifest(s.name)
    own = []
    if spec.snapshot:
        cols = ", ".join(f'"{c.name}"' for c in visible)
        snap = wh.engine.to_arrow(wh.engine.sql(f"SELECT {cols}, CAST(1 AS BIGINT) AS {W} FROM rw_s",
                                                rw_s=wh.snapshot(input_name)))
        if snap.num_rows:
            snap = snap.cast(pa.schema([*step.object_schema(obj), pa.field(W, pa.int64())]))
            own.append(write_sst(wh.store, wh.engine, snap, f"objects/{obj.key_folder}/changes", [], 0, start))
    # the position is committed before the catalog names the sink: from then on the input keeps its
    # change files after `start` for it
    wh.remember_manifest(manifests.commit(wh.store, Manifest(object=s.name, epoch=start, changelog=own), [], 0))
    objects = dict(wh.catalog(reload=True).objects)
    objects[s.name] = obj
    wh.commit_catalog(objects, f"CREATE SINK {s.name}")
    return True


def drop_sink(wh: SinkWarehouse, name: str, if_exists: bool) -> bool:
    """DROP SINK: the warehouse's own DROP (kind check, catalog commit, files), then the sink's
    open target and the internal view of CREATE SINK ... AS."""
    obj = wh.catalog(reload=True).get(name)
    if not wh.drop(name, SINK, if_exists):
        return False
    delivery.forget_target(wh, name)
    internal = wh.catalog().get(obj.inputs[0]) if obj.inputs else None
    if internal is not None and internal.options.get(INTERNAL_OF) == name:
        wh.drop(internal.name, MATERIALIZED_VIEW, True)
    return True


def is_internal(obj: CatalogObject) -> bool:
    return INTERNAL_OF in (obj.options or {})
