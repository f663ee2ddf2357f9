"""Layering: stages never import the pipeline or the command modules (the pipeline imports stages; commands
import both), so there is no import cycle to hide behind function-local imports."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "haldet"


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_stages_do_not_import_pipeline_or_commands() -> None:
    offenders = {f"{p.relative_to(SRC)} -> {m}" for p in (SRC / "stages").glob("*.py") for m in imported_modules(p)
                 if m == "haldet.pipeline" or m.startswith("haldet.commands") or m == "haldet.cli"}
    assert not offenders, offenders


def test_the_check_sees_a_function_local_import(tmp_path: Path) -> None:
    """Negative control: an import inside a function body (how the old cycle hid) is found."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from haldet.pipeline import prepare_cell\n    return prepare_cell\n")
    assert "haldet.pipeline" in imported_modules(f)
