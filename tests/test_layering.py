"""Layers with no cycles, counting every import: module level, function bodies and `TYPE_CHECKING` blocks alike.

The package is layered bottom-up (`LAYERS`, also in docs/developing.md): a module may import only from its own layer or
the layers below it, and no set of modules imports itself back (a cycle), even within a layer. Plugins and suites
are found by name (the registries import them with importlib), which is not an import edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "haldet"

# bottom first; a module belongs to the layer of its longest matching prefix
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("haldet.version", "haldet.errors", "haldet.registry", "haldet.schema", "haldet.config",
              "haldet.signals", "haldet.presets")),
    ("util and text", ("haldet.util", "haldet.text", "haldet.report.svg", "haldet.report.marks")),
    ("store", ("haldet.store",)),
    ("evaluation", ("haldet.evaluation",)),
    ("backends", ("haldet.backends",)),
    ("auxiliary models", ("haldet.models",)),
    ("datasets", ("haldet.datasets",)),
    ("judges", ("haldet.judges",)),
    ("stages", ("haldet.stages",)),
    ("detectors", ("haldet.detectors",)),
    ("scoring path", ("haldet.flow.scoring",)),
    ("testing", ("haldet.testing",)),
    ("suites", ("haldet.suites",)),
    ("run flow", ("haldet.flow",)),
    ("commands and reports", ("haldet.commands", "haldet.report", "haldet.explorer")),
    ("cli", ("haldet.cli", "haldet.__main__")),
    ("public API", ("haldet",)),
]


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the haldet modules it imports anywhere in its file (relative imports resolved)."""
    modules = {module_name(p, src): p for p in src.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {m for a in node.names if (m := known(a.name))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for a in node.names:  # `from pkg import module` imports the module, else the name's module
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    if (m := known(target)):
                        found.add(m)
        graph[name] = found - {name}
    return graph


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and docs/developing.md)")
    return rank


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
                  for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_imports(import_graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_checks_see_hidden_imports_and_fail_on_a_bad_edge(tmp_path: Path) -> None:
    """Negative controls: an import inside a function or under TYPE_CHECKING is an edge; an upward edge and a
    cycle are reported."""
    pkg = tmp_path / "haldet"
    (pkg / "stages").mkdir(parents=True)
    (pkg / "flow").mkdir()
    for f in ("__init__.py", "stages/__init__.py", "flow/__init__.py", "flow/cell.py"):
        (pkg / f).write_text("")
    (pkg / "stages" / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from haldet.flow import cell\n"
        "def f():\n    from ..flow.cell import x\n")
    graph = import_graph(pkg)
    assert graph["haldet.stages.base"] == {"haldet.flow.cell"}
    assert upward_imports(graph) == ["haldet.stages.base (stages) -> haldet.flow.cell (run flow)"]
    real = import_graph()
    real["haldet.flow.cell"] = real["haldet.flow.cell"] | {"haldet.flow.run"}  # run imports cell: now a cycle
    assert any("haldet.flow.run" in c and "haldet.flow.cell" in c for c in cycles(real))
