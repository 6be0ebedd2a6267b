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
            if candidate and candidate != name and candidate.split(".")[0] == "dagster_rw":
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


# The layers, top to bottom. A unit is a package of dagster_rw (`runtime`, `sinks`, ...), a
# top-level module (`dbapi`, `errors`, ...), `api` for the package itself (`dagster_rw.connect`),
# and `engine.spark`: the Spark executor writes storage's files, while storage runs its merges
# and lookups through the in-process engine (`engine`: the DuckDB engine and the scans it shares
# with Spark), so the two halves of the engine package sit on either side of storage.
LAYERS = [
    {"cli"},
    {"demo", "slt"},
    {"dagster"},
    {"api"},
    {"dbapi"},
    {"sinks"},
    {"runtime"},
    {"engine.spark", "operators", "sources"},
    {"sql"},
    {"storage"},
    {"engine"},
    {"after_fork", "jsonb", "types"},
    {"errors"},
]

# What each unit may import: the package graph as it stands, every edge pointing down the layers.
# A new edge between units is a decision about the structure: add it here, downwards only.
ALLOWED = {
    "cli": {"api", "dagster", "demo", "slt", "sql"},
    "demo": {"api"},
    "slt": {"api"},
    "api": {"dbapi", "errors"},
    "dagster": {"api", "dbapi", "engine.spark", "errors", "runtime", "sql", "storage"},
    "dbapi": {"engine", "engine.spark", "errors", "jsonb", "runtime", "sinks", "sources", "sql", "storage", "types"},
    "sinks": {"engine", "errors", "operators", "runtime", "sql", "storage", "types"},
    "runtime": {"after_fork", "engine", "errors", "operators", "sources", "sql", "storage", "types"},
    "engine.spark": {"engine", "errors", "storage"},
    "operators": {"engine", "errors", "sql", "storage", "types"},
    "sources": {"engine", "errors", "jsonb", "storage", "types"},
    "sql": {"engine", "errors", "jsonb", "storage", "types"},
    "storage": {"after_fork", "engine", "errors"},
    "engine": {"errors", "jsonb", "types"},
    "types": {"errors"},
    "jsonb": {"errors"},
    "after_fork": set(),
    "errors": set(),
}


def _unit(module: str) -> str:
    if module == "dagster_rw.engine.spark":
        return "engine.spark"
    parts = module.split(".")
    return "api" if len(parts) == 1 else parts[1]


def _unit_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    units: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], str] = {}
    for name, targets in _graph().items():
        for target in targets:
            a, b = _unit(name), _unit(target)
            if a != b:
                units[a].add(b)
                why.setdefault((a, b), f"{name} -> {target}")
    return units, why


def test_allowed_imports_point_down_the_layers():
    tier = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    assert set(tier) == set(ALLOWED)
    upwards = [(a, b) for a, targets in ALLOWED.items() for b in targets if tier[b] <= tier[a]]
    assert upwards == []
    assert _cycles(ALLOWED) == []


def test_every_import_between_packages_is_allowed():
    units, why = _unit_graph()
    assert set(units) <= set(ALLOWED), sorted(set(units) - set(ALLOWED))
    outside = sorted(why[(a, b)] for a, targets in units.items() for b in targets if b not in ALLOWED[a])
    assert outside == []


def test_no_import_cycles_between_packages():
    units, why = _unit_graph()
    cycles = _cycles(units)
    assert cycles == [], [(c, [why[(a, b)] for a in c for b in c if (a, b) in why]) for c in cycles]


def test_the_layer_check_sees_an_upward_import():
    units, _ = _unit_graph()
    units["storage"].add("runtime")  # as if storage imported the runtime
    assert "runtime" not in ALLOWED["storage"]
    assert _cycles(units) != []


# -- the warehouse as steps and sinks see it ----------------------------------------------------
# Steps and sinks take the warehouse as `wh` typed by a narrow Protocol (runtime/interfaces.py);
# what they touch of it must be declared there, so that the interface is the whole truth.
NARROW = {
    "runtime/step.py": "StepWarehouse", "runtime/ingest.py": "StepWarehouse",
    "runtime/file_ingest.py": "StepWarehouse", "runtime/compaction.py": "StepWarehouse",
    "runtime/view_errors.py": "StepWarehouse",
    "sinks/definition.py": "SinkWarehouse", "sinks/delivery.py": "SinkWarehouse", "sinks/table.py": "SinkWarehouse",
}


def _protocol_members() -> dict[str, set[str]]:
    """Each Protocol of runtime/interfaces.py: its members, with those of the protocols it extends."""
    tree = ast.parse((ROOT / "runtime" / "interfaces.py").read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def members(name: str) -> set[str]:
        cls = classes[name]
        own = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        own |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                own |= members(base.id)
        return own

    return {name: members(name) for name in classes}


def _warehouse_uses(path: pathlib.Path) -> set[str]:
    """The attributes read of `wh` or `self.wh` in a module."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "wh") or (
                    isinstance(v, ast.Attribute) and v.attr == "wh" and isinstance(v.value, ast.Name)
                    and v.value.id == "self"):
                used.add(node.attr)
    return used


def test_steps_and_sinks_use_only_their_interface_of_the_warehouse():
    protocols = _protocol_members()
    beyond = {rel: sorted(_warehouse_uses(ROOT / rel) - protocols[proto]) for rel, proto in NARROW.items()}
    assert {rel: attrs for rel, attrs in beyond.items() if attrs} == {}
    assert all(_warehouse_uses(ROOT / rel) for rel in NARROW)  # (the walk finds what each uses)


def test_the_warehouse_implements_its_interfaces():
    from dagster_rw.runtime.warehouse import Warehouse

    tree = ast.parse((ROOT / "runtime" / "warehouse.py").read_text())
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    instance_state = {t.attr for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
                      for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                      if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    assert {"store", "engine", "options"} <= instance_state
    for proto, members in _protocol_members().items():
        if proto == "SinkService":
            continue
        missing = sorted(m for m in members if m not in instance_state and not hasattr(Warehouse, m))
        assert missing == [], (proto, missing)
