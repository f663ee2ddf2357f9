"""Tests that share a module-scoped fixture run on one xdist worker (`--dist loadgroup`, pyproject.toml): split
across two workers, such a fixture (often a whole run of the embedded model) is computed once in each."""

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
