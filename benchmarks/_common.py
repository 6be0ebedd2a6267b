"""What the benchmarks share: the local services the test suite runs (a Tansu Kafka broker, moto's
S3 server over HTTP), the repetition of a timed run, and percentiles. A benchmark runs from the
repository's root as `python benchmarks/<name>.py`; this module sits beside it."""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _suite_module(name: str):
    """A module of the test suite's local services (tests/<name>.py), loaded from its file once."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tests", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def tansu_broker():
    """A Tansu Kafka broker on a free loopback port, started (`.bootstrap`, `.create_topic`, `.stop()`)."""
    return _suite_module("kafka_broker").TansuBroker().start()


def moto_s3():
    """moto's S3 server on a free loopback port, started (`.create_bucket`, `.stop()`)."""
    return _suite_module("s3_server").MotoS3().start()


def best_of(run, times: int = 3) -> float:
    """The fastest of `times` runs of `run()`, in seconds."""
    seconds = []
    for _ in range(times):
        t0 = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - t0)
    return min(seconds)


def percentile(values: list[float], q: float) -> float:
    """The value below or at which a fraction `q` of `values` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def tree_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by a process and all its descendants, living or
    reaped (a Spark driver's JVM, its executors' Python workers): the work a phase did, which
    other load on a shared machine inflates far less than its wall-clock time."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15]) / ticks  # utime stime cutime cstime
    root = os.getpid() if pid is None else pid
    total = 0.0
    for p in times:
        q = p
        while q not in (0, 1, root) and q in parent:
            q = parent[q]
        if q == root:
            total += times[p]
    return total
