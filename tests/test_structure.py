"""The package's structure: no import cycles between modules (imports inside functions count),
and none between its packages (layers), so that each layer can be read, tested and replaced on
its own. The imports are read from the source with `ast`, not by importing."""
from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parent.parent / "dagster_rw"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path, modules: dict) -> set[str]:
    """The package's modules that `name` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from package import module` imports the module; `from module import name`, the module
            candidates = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name and candidate.startswith("dagster_rw."):
                found.add(candidate)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_import_walk_sees_imports_inside_functions():
    graph = _graph()
    assert "dagster_rw.runtime.step" in graph["dagster_rw.runtime.warehouse"]
    # runtime.ingest imports the sources' splits inside a function only
    assert "dagster_rw.sources.splits" in graph["dagster_rw.runtime.ingest"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_between_modules():
    assert _cycles(_graph()) == []


# The one cycle between packages left: storage runs its merges and lookups through the engines
# (engine.duck, engine.base.ParquetScan) while the Spark engine writes storage's files
# (storage.executor_io, storage.manifest.SstFile). Any other cycle fails the test.
KNOWN_PACKAGE_CYCLES = [["engine", "storage"]]


def test_no_import_cycles_between_packages():
    packages: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], str] = {}
    for name, targets in _graph().items():
        if name.count(".") < 2:  # dagster_rw itself and its top-level modules
            continue
        for target in targets:
            a, b = name.split(".")[1], target.split(".")[1]
            if target.count(".") >= 2 and a != b:
                packages[a].add(b)
                why.setdefault((a, b), f"{name} -> {target}")
    cycles = [c for c in _cycles(packages) if c not in KNOWN_PACKAGE_CYCLES]
    assert cycles == [], [(c, [why[(a, b)] for a in c for b in c if (a, b) in why]) for c in cycles]
