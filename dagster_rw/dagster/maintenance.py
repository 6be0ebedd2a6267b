"""Maintenance: merge each object's SST files, remove the files nothing needs any more and sweep the
files a crash left, as a job (one op, so it never competes with the views' runs for more than one
Spark-free process) and a schedule for it."""
from __future__ import annotations

import dagster as dg

from .project import RwProject
from .resource import RwResource


def build_maintenance_job(project: RwProject | None = None, *, name: str = "rw_maintenance",
                          resource_key: str = "rw") -> dg.JobDefinition:
    """Compact every object of `project` (of the whole warehouse when None), then collect garbage
    and sweep the files a crash left (RwResource.maintain)."""

    @dg.op(name=f"{name}_compact", required_resource_keys={resource_key})
    def compact(context):
        rw: RwResource = getattr(context.resources, resource_key)
        done = rw.maintain(project)
        merged = done["merged"]
        removed = sum(merged.values())
        context.log.info(f"compacted {len(merged)} objects, {removed} files merged away; "
                         f"{done['swept']} files a crash left swept")
        context.add_output_metadata({"objects": len(merged), "files_removed": removed,
                                     "files_swept": done["swept"], "per_object": dg.MetadataValue.json(merged)})
        return removed

    @dg.job(name=name, description="Compaction of SST files and removal of files nothing needs any more.",
            executor_def=dg.in_process_executor)
    def _job():
        compact()

    return _job


def build_maintenance_schedule(job: dg.JobDefinition, cron_schedule: str = "*/30 * * * *", *,
                               name: str = "rw_maintenance_schedule",
                               default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED
                               ) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(name=name, job=job, cron_schedule=cron_schedule, default_status=default_status)
