"""How the suite's tests reach the two xdist workers (`--dist loadgroup`, pyproject.toml): tests that share a
module-scoped fixture run on one worker (split across two, such a fixture, often a whole run of the embedded model,
is computed once in each), and the files that run the embedded model go out first, so the last minutes are not one
long run on one worker while the other waits."""

from __future__ import annotations

import pytest


def group_by_module_fixture(items: list[pytest.Item]) -> None:
    """Mark every test that uses a module-scoped fixture `xdist_group(<its file>)`; tests that name their own group
    keep it (tests/testing/test_conformance.py)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def slow_files_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: every test of a file holding a `slow` test (one that runs the embedded model) before
    the other files, each file's tests kept together and in their order (so a module fixture is set up once)."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)  # stable: files and tests keep their order
