"""What the benchmarks share: the local services the test suite runs (a Tansu Kafka broker, moto's
S3 server over HTTP), the repetition of a timed run, percentiles, and the figures a benchmark
writes into docs/performance.md with `--write-docs`: its table between its marker comments
(`<!-- <name>:begin -->` and `<!-- <name>:end -->`), naming the command, the machine and the load.
A benchmark runs from the repository's root as `python benchmarks/<name>.py`; this module sits
beside it."""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import threading
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


class _TreeCpu:
    """The CPU seconds of a process and its descendants, living or gone, by sampling: every process
    seen in the tree is counted at its own user + system time when last seen (every `interval`
    seconds, and at each reading). A parent's count of its reaped children (cutime) is not used:
    PySpark's worker daemon ignores SIGCHLD, so its exited workers are reaped without being added
    there, and a one-shot reading would lose their whole CPU time the moment they exit (an idle
    worker exits about a minute after its last task: within the next phase). What a process spends
    after its last sample, or a process living less than `interval`, is missed."""

    def __init__(self, root: int, interval: float = 0.2):
        self.root = root
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.seen: dict[tuple[int, int], float] = {}  # (pid, start time) -> own CPU seconds when last seen
        self.lock = threading.Lock()
        threading.Thread(target=self._run, args=(interval,), daemon=True).start()

    def _run(self, interval: float) -> None:
        while True:
            time.sleep(interval)
            self.sample()

    def sample(self) -> float:
        parent: dict[int, int] = {}
        own: dict[int, tuple[int, float]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry)] = int(fields[1])
            own[int(entry)] = (int(fields[19]), (int(fields[11]) + int(fields[12])) / self.ticks)
        with self.lock:
            for p, (start, seconds) in own.items():
                q = p
                while q not in (0, 1, self.root) and q in parent:
                    q = parent[q]
                if q == self.root:
                    self.seen[(p, start)] = seconds
            return sum(self.seen.values())


_trees: dict[int, _TreeCpu] = {}


def tree_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by a process and all its descendants, living or
    gone (a Spark driver's JVM, its executors' Python workers), counted from the first call for
    that process on (_TreeCpu): the work a phase did, which other load on a shared machine
    inflates far less than its wall-clock time."""
    root = os.getpid() if pid is None else pid
    if root not in _trees:
        _trees[root] = _TreeCpu(root)
    return _trees[root].sample()


# -- figures written into the docs (--write-docs) ---------------------------------------------------

DOCS = os.path.join(ROOT, "docs", "performance.md")


def add_docs_arguments(parser) -> None:
    """A benchmark's `--write-docs` (write its figures table into the docs between its markers)
    and `--docs-path` (the Markdown file written; docs/performance.md by default)."""
    parser.add_argument("--write-docs", action="store_true",
                        help="write the figures table into --docs-path between this benchmark's marker comments")
    parser.add_argument("--docs-path", default=DOCS, help="the Markdown file --write-docs writes (default %(default)s)")


def machine() -> str:
    """The machine as figures name it: the CPU's model name (/proc/cpuinfo) and its core count (the
    processors the kernel lists)."""
    model, cores = None, 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "processor":
                    cores += 1
                elif key.strip() == "model name" and model is None:
                    model = value.strip()
    except OSError:
        pass
    cores = cores or os.cpu_count() or 0
    return f"{model or 'unknown CPU'}, {cores} core{'s' if cores != 1 else ''}"


def load_average() -> float:
    """The 1-minute load average: how busy the machine was besides the benchmark."""
    return os.getloadavg()[0]


def command(script: str, argv: list[str]) -> str:
    """The command line that measured the figures, without the options that only say where they go."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--write-docs" or arg.startswith("--docs-path="):
            continue
        elif arg == "--docs-path":
            skip = True
        else:
            kept.append(arg)
    return " ".join(["python", f"benchmarks/{os.path.basename(script)}"] + kept)


def markdown_table(head: list[str], rows: list[list]) -> str:
    """A Markdown table: a header row, its separator and one line per row."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def figures_block(cmd: str, load_start: float, body: str) -> str:
    """The figures as the docs show them: what measured them, on which machine, under what load
    (the 1-minute load average at the start and at the end of the run), then `body`."""
    when = time.strftime("%Y-%m-%d", time.gmtime())
    return (f"`{cmd}` on {when}, {machine()}, load average {load_start:.1f} at the start and "
            f"{load_average():.1f} at the end (1 minute):\n\n{body.strip()}\n")


def replace_marked(text: str, name: str, block: str) -> str:
    """`text` with what lies between the marker comments `<!-- name:begin -->` and
    `<!-- name:end -->` (each on a line of its own, once) replaced by `block`."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"expected one line {begin!r} and, after it, one line {end!r} "
                         f"(found {len(starts)} and {len(ends)}): add them where the figures go")
    body = block.strip("\n").split("\n") + [""] if block.strip() else []  # a blank line ends a table
    return "\n".join(lines[:starts[0] + 1] + body + lines[ends[0]:])


def check_docs(path: str, name: str) -> None:
    """Fail now, before the run, if `path` lacks the markers of `name`."""
    with open(path) as f:
        replace_marked(f.read(), name, "")


def write_docs(path: str, name: str, block: str) -> None:
    """Write `block` into the Markdown file `path` between the markers of `name` (replace_marked)."""
    with open(path) as f:
        text = f.read()
    new = replace_marked(text, name, block)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)
    print(f"wrote the figures into {path} between the {name} markers", flush=True)
