"""The tests mirror the source tree: a test of `src/haldet/<folder>/` sits in `tests/<folder>/`, so a folder's tests
are found next to its name. Tests of the package's top-level modules stay at `tests/` (named in `ROOT_TESTS` with the
module they test); `tests/project/` holds the checks of the repository as a whole (layout, docs, budgets,
benchmarks), which mirror no folder. Test basenames are unique (pytest imports each file by its basename)."""

from __future__ import annotations

from pathlib import Path

from repo_paths import PACKAGE, TESTS

PROJECT = "project"
ROOT_TESTS = {  # test file at tests/ -> the top-level module (or package entry) it tests
    "test_config.py": "config.py",
    "test_model_prices.py": "model_prices.py",
    "test_plugins.py": "registry.py",
    "test_public_api.py": "__init__.py",
    "test_registry_where.py": "registry.py",
    "test_schema.py": "schema.py",
}


def misplaced(tests: Path, package: Path, root_tests: dict[str, str]) -> list[str]:
    """Every test file that breaks the mirror rule, with the reason."""
    found = []
    seen: dict[str, str] = {}
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if "fixtures" in rel.parts:
            continue
        if rel.name in seen:
            found.append(f"{rel}: same basename as {seen[rel.name]}")
        seen[rel.name] = rel.as_posix()
        folder = rel.parent.as_posix()
        if folder == ".":
            module = root_tests.get(rel.name)
            if module is None or not (package / module).is_file():
                found.append(f"{rel}: at tests/ but tests no top-level module (move it to tests/<folder>/)")
        elif folder != PROJECT and not (package / folder).is_dir():
            found.append(f"{rel}: src/haldet/{folder}/ does not exist")
    return found


def test_every_test_file_sits_in_its_source_folder() -> None:
    assert misplaced(TESTS, PACKAGE, ROOT_TESTS) == []


def test_a_misplaced_test_is_found(tmp_path: Path) -> None:
    """Negative control: a root test of no module, a folder the package lacks and a repeated basename are named."""
    package = tmp_path / "pkg"
    (package / "store").mkdir(parents=True)
    (package / "config.py").write_text("")
    tests = tmp_path / "tests"
    for rel in ("test_config.py", "test_stray.py", "store/test_a.py", "nowhere/test_b.py", "project/test_a.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    assert misplaced(tests, package, {"test_config.py": "config.py"}) == [
        "nowhere/test_b.py: src/haldet/nowhere/ does not exist",
        "store/test_a.py: same basename as project/test_a.py",
        "test_stray.py: at tests/ but tests no top-level module (move it to tests/<folder>/)",
    ]
