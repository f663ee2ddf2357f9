"""Layers with no cycles, counting every import: module level, function bodies and `TYPE_CHECKING` blocks alike.

The package is layered bottom-up (`LAYERS`; docs/developing.md's layer table is generated from it: `python
tests/project/test_layering.py` rewrites it): a module may import only from its own layer or the layers below
it, and no set
of modules imports itself back (a cycle), even within a layer. Each folder (a sub-package) lies in exactly one layer,
and nothing outside a suite's folder imports it. Plugins and suites are found by name (the registries and the CLI
import them with importlib), which is not an import edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # (a script too: `python tests/project/test_layering.py`)
PACKAGE = REPO / "src" / "haldet"
SRC = PACKAGE
DOCS = REPO / "docs" / "developing.md"

# bottom first; a module belongs to the layer of its longest matching prefix
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("haldet.version", "haldet.errors", "haldet.registry", "haldet.schema", "haldet.endpoint_params",
              "haldet.model_prices",
              "haldet.config", "haldet.config_files", "haldet.defaults", "haldet.signals", "haldet.presets")),
    ("util and text", ("haldet.util", "haldet.text")),
    ("drawing", ("haldet.figures",)),
    ("store", ("haldet.store",)),
    ("evaluation", ("haldet.evaluation", "haldet.papers")),
    ("backends", ("haldet.backends",)),
    ("auxiliary models", ("haldet.models",)),
    ("datasets", ("haldet.datasets",)),
    ("judges", ("haldet.judges",)),
    ("stages", ("haldet.stages",)),
    ("detectors", ("haldet.detectors",)),
    ("suites", ("haldet.suites",)),
    ("run flow", ("haldet.flow",)),
    ("testing", ("haldet.testing",)),
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


# the suites' shared core, which any layer above the suites may import; everything else under suites/ is a folder
SUITE_CORE = ("haldet.suites", "haldet.suites.base", "haldet.suites.report", "haldet.suites.groups",
              "haldet.suites.levels")


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(layers):
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


def suite_intrusions(graph: dict[str, set[str]]) -> list[str]:
    """Imports into a suite's folder (`haldet.suites.<x>.*`) from a module outside that folder."""
    def folder(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:3]) if module not in SUITE_CORE and parts[:2] == ["haldet", "suites"] else None

    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if (f := folder(t)) and folder(m) != f)


def split_folders(modules: set[str], layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> list[str]:
    """Folders (the package's sub-packages, nested ones counted with their top folder) whose modules lie in more
    than one layer, each with the layers it spans."""
    packages = {".".join(m.split(".")[:2]) for m in modules if m.count(".") >= 2}
    found = []
    for package in sorted(packages):
        spans = sorted({layer_of(m, layers) for m in modules
                        if (m == package or m.startswith(package + "."))})
        if len(spans) > 1:
            found.append(f"{package}: {', '.join(layers[i][0] for i in spans)}")
    return found


def layer_table(layers: list[tuple[str, tuple[str, ...]]] = LAYERS, src: Path = SRC) -> str:
    """docs/developing.md's layer table: one row per layer, bottom first, naming its folders (`util/`) and modules."""
    def shown(prefix: str) -> str:
        rel = prefix.split(".")[1:]
        if not rel:
            return "`haldet/__init__`"
        return f"`{'/'.join(rel)}/`" if (src.joinpath(*rel) / "__init__.py").exists() else f"`{'/'.join(rel)}`"

    rows = [f"| {name} | {', '.join(shown(p) for p in prefixes)} |" for name, prefixes in layers]
    return "\n".join(["| layer | folders and modules |", "|---|---|", *rows])


TABLE_START = "<!-- the layer table, generated from LAYERS: python tests/project/test_layering.py -->"
TABLE_END = "<!-- end of the layer table -->"


def documented_table(text: str) -> str:
    """The layer table between the markers of a docs page ('' when the markers are missing)."""
    if TABLE_START not in text or TABLE_END not in text:
        return ""
    return text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()


def write_table(path: Path = DOCS) -> None:
    text = path.read_text()
    before, rest = text.split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    path.write_text(f"{before}{TABLE_START}\n{layer_table()}\n{TABLE_END}{after}")


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


def test_nothing_outside_a_suite_folder_imports_it() -> None:
    assert suite_intrusions(import_graph()) == []


def test_every_folder_is_one_layer() -> None:
    assert split_folders(set(import_graph())) == []


def test_the_docs_layer_table_is_generated_from_layers() -> None:
    assert documented_table(DOCS.read_text()) == layer_table(), "run `python tests/project/test_layering.py`"


def test_the_suite_folder_and_layer_checks_fail_on_a_bad_module() -> None:
    """Negative controls: a command importing a suite folder's module, and one suite folder importing another, are
    reported (a folder importing itself and anything importing the suites' core are not); a folder whose module is
    put in another layer is reported; a docs table missing a row differs from the generated one."""
    planted = {"haldet.cli.x": {"haldet.suites.lens.evaluate", "haldet.suites.base"},
               "haldet.suites.lens.commands": {"haldet.suites.lens.evaluate", "haldet.util.console"},
               "haldet.suites.other.suite": {"haldet.suites.lens.sets", "haldet.suites.report"},
               "haldet.flow.cell": {"haldet.suites.groups"}}
    assert suite_intrusions(planted) == ["haldet.cli.x -> haldet.suites.lens.evaluate",
                                         "haldet.suites.other.suite -> haldet.suites.lens.sets"]
    real = import_graph()
    assert suite_intrusions({**real, "haldet.commands.responses": {"haldet.suites.responses.suite"}}) == [
        "haldet.commands.responses -> haldet.suites.responses.suite"]
    split = [(name, (*prefixes, "haldet.flow.scoring") if name == "detectors" else prefixes)
             for name, prefixes in LAYERS]
    assert split_folders(set(real), split) == ["haldet.flow: detectors, run flow"]
    assert "`flow/scoring`" in layer_table(split)
    docs = DOCS.read_text().replace("| cli |", "| the cli |")
    assert documented_table(docs) != layer_table()


if __name__ == "__main__":  # rewrite docs/developing.md's layer table from LAYERS
    write_table()
