"""A run worker started ahead of its run, for `WarmRunLauncher` (dagster_rw/dagster/launcher.py).

    python -m dagster_rw.dagster.run_worker [--preload MODULE ...] [--instance-ref JSON]

Imports Dagster, the given modules (the libraries the code location's steps use) and the instance's
storage, then waits for one line on stdin: a run's serialized `ExecuteRunArgs`. With it, it runs
exactly what `dagster api execute_run <args>` runs (Dagster's own run worker command), in this
process, and exits with its exit code. An empty stdin (the launcher went away) ends it.

The code location itself is not imported ahead: the run imports it as a new worker would, so a
reloaded code location is never run from an older copy.
"""
from __future__ import annotations

import argparse
import importlib
import runpy
import signal
import sys

# what every run worker imports on Dagster's side: its command line, and the module it loads a code
# location's definitions with (which imports Dagster's test and storage helpers, over a second)
DAGSTER_MODULES = ("dagster._cli", "dagster._utils.test.definitions")


def _preload(modules: list[str], instance_ref: str | None) -> None:
    import dagster  # noqa: F401

    for name in DAGSTER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # another Dagster version: its run worker imports what it needs itself
            pass
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a missing optional library: the run imports what it needs itself
            print(f"dagster-rw run worker: could not preload {name}: {exc}", file=sys.stderr)
    if instance_ref:
        # opening the instance imports its storage (SQLAlchemy, the event log and run storage)
        from dagster import DagsterInstance
        from dagster._serdes import deserialize_value
        from dagster._core.instance.ref import InstanceRef

        with DagsterInstance.from_ref(deserialize_value(instance_ref, InstanceRef)):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dagster_rw.dagster.run_worker")
    parser.add_argument("--preload", action="append", default=[])
    parser.add_argument("--instance-ref")
    args = parser.parse_args(argv)
    # idle, a Ctrl-C meant for `dagster dev` does not print a traceback here; the launcher ends an
    # idle worker with SIGTERM, or by closing its stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _preload(args.preload, args.instance_ref)
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["dagster", "api", "execute_run", line.strip()]
    try:
        runpy.run_module("dagster", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
