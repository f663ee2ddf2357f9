"""Module size: no module of the package over `MAX_LINES` lines, so a module stays one concept a reader can hold.
A module that grows past it is split along its concepts (docs/developing.md, "Layout"); the two exceptions are
are named in `EXEMPT` (none today) and leave it when they are split."""

from __future__ import annotations

from pathlib import Path

from repo_paths import PACKAGE

MAX_LINES = 450
EXEMPT: set[str] = set()


def long_modules(root: Path, limit: int = MAX_LINES, exempt: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """{module path relative to `root`: line count} of every .py file under `root` longer than `limit` lines."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit and rel not in exempt:
            found[rel] = lines
    return found


def test_no_module_over_the_limit() -> None:
    assert long_modules(PACKAGE, exempt=EXEMPT) == {}


def test_the_exemptions_still_exist() -> None:
    """An exempt module that was split or removed leaves the list (no stale exemption hides a new long file)."""
    assert all((PACKAGE / rel).is_file() for rel in EXEMPT)


def test_a_planted_long_module_is_found(tmp_path: Path) -> None:
    """Negative control: the check sees a long module, counts its lines, and honours an exemption by path."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path) == {"pkg/long.py": MAX_LINES + 1}
    assert long_modules(tmp_path, exempt={"pkg/long.py"}) == {}
