"""docs/developing.md's layout table is generated from the package's own docstrings, so it cannot go stale: one row
per top-level module or folder of `src/haldet` with the first paragraph of its docstring and, for a folder, every
module in it. `python tests/project/test_layout_docs.py` rewrites the table; the test fails when the docs differ (a new
module, a moved one, an edited docstring)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # (a script too: `python tests/project/test_layout_docs.py`)
PACKAGE = REPO / "src" / "haldet"


SRC = PACKAGE
DOCS = REPO / "docs" / "developing.md"
BEGIN = "<!-- the layout table, generated from the package docstrings: python tests/project/test_layout_docs.py -->"
END = "<!-- end of the layout table -->"


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring on one line ('' without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def modules_of(folder: Path) -> list[str]:
    """A folder's modules and sub-folders, relative to it, without __init__ (sub-folders end with '/')."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder)
        if path.name == "__init__.py":
            if rel.parent != Path("."):
                out.append(f"{rel.parent.as_posix()}/")
            continue
        out.append(rel.with_suffix("").as_posix())
    return out


def layout_table(src: Path = SRC) -> str:
    rows = ["| module | holds |", "|---|---|"]
    for path in sorted(src.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            mods = ", ".join(f"`{m}`" for m in modules_of(path))
            rows.append(f"| `{path.name}/` | {summary(path / '__init__.py')}" + (f" Modules: {mods}." if mods else "")
                        + " |")
        elif path.suffix == ".py":
            rows.append(f"| `{path.name}` | {summary(path)} |")
    return "\n".join(rows)


def documented(text: str) -> str:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, flags=re.S)
    return match.group(1) if match else ""


def test_the_layout_table_is_generated_from_the_docstrings() -> None:
    assert documented(DOCS.read_text()) == layout_table(), "run `python tests/project/test_layout_docs.py`"


def test_every_module_and_folder_has_a_docstring() -> None:
    missing = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if not summary(p) and p.stat().st_size]
    assert missing == []


def test_a_new_module_changes_the_table(tmp_path: Path) -> None:
    """Negative control: a module added to a folder shows in the generated table, so the docs' copy goes stale."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A folder."""\n')
    (pkg / "a.py").write_text('"""Module a."""\n')
    before = layout_table(tmp_path)
    (pkg / "b.py").write_text('"""Module b."""\n')
    assert layout_table(tmp_path) != before and "`b`" in layout_table(tmp_path)


if __name__ == "__main__":
    text = DOCS.read_text()
    if BEGIN not in text:
        raise SystemExit(f"{DOCS} has no {BEGIN!r} marker")
    DOCS.write_text(text.replace(documented(text), layout_table()) if documented(text)
                    else text.replace(BEGIN + "\n", BEGIN + "\n" + layout_table() + "\n"))
