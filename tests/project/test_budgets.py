"""Budgets the code base keeps, each with its count and the places that spend it, so a new `# type: ignore`
is a decision made in review rather than a habit."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from repo_paths import PACKAGE

SRC = PACKAGE
IGNORE = re.compile(r"#\s*type:\s*ignore")
TYPE_IGNORE_BUDGET = 19  # `# type: ignore` comments in src/haldet: fewer than 20 (10 when this test was written)


def type_ignores(root: Path) -> list[str]:
    """`file:line` of every `# type: ignore` comment under `root` (comments only: a string that mentions one does
    not count)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        found += [f"{path.relative_to(root)}:{tok.start[0]}" for tok in tokens
                  if tok.type == tokenize.COMMENT and IGNORE.search(tok.string)]
    return found


def test_type_ignore_budget() -> None:
    found = type_ignores(SRC)
    assert len(found) <= TYPE_IGNORE_BUDGET, f"{len(found)} `# type: ignore` (budget {TYPE_IGNORE_BUDGET}): {found}"


def test_type_ignores_are_counted_in_comments_only(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('x: int = "1"  # type: ignore[assignment]\ny = "# type: ignore"\n'
                                   "z = f()  #type: ignore\n", encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_text("w = g()  # noqa: E501  # type: ignore\n", encoding="utf-8")
    assert type_ignores(tmp_path) == ["a.py:1", "a.py:3", "pkg/b.py:1"]
