"""The suite's xdist groups hold: tests of one group, named or given by a shared module-scoped fixture
(tests/xdist_groups.py), run on one worker. pytest-xdist 3.8 with pytest 9.2 split every group (pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # tests/, where xdist_groups.py sits

MODULE = """
import os
from pathlib import Path

import pytest

OUT = Path(os.environ["GROUPS_OUT"])


@pytest.fixture(scope="module")
def shared():
    return 1


def record(name):
    (OUT / name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))


@pytest.mark.parametrize("i", range(6))
def test_shared(shared, i):
    record(f"shared-{i}")


@pytest.mark.xdist_group("named")
@pytest.mark.parametrize("i", range(6))
def test_named(i):
    record(f"named-{i}")


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    record(f"free-{i}")
"""

CONFTEST = f"""
import sys

import pytest

sys.path.insert(0, {str(HERE)!r})
from xdist_groups import group_by_module_fixture


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    group_by_module_fixture(items)
"""


def workers_by_group(tmp_path: Path, dist: str) -> dict[str, set[str]]:
    suite, out = tmp_path / dist / "suite", tmp_path / dist / "out"
    suite.mkdir(parents=True)
    out.mkdir()
    (suite / "test_groups.py").write_text(MODULE)
    (suite / "conftest.py").write_text(CONFTEST)
    env = {**os.environ, "GROUPS_OUT": str(out), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", dist, "-p", "no:cacheprovider",
                           "-c", os.devnull, "--rootdir", str(suite), str(suite)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    seen: dict[str, set[str]] = {}
    for f in out.iterdir():
        seen.setdefault(f.name.split("-")[0], set()).add(f.read_text())
    return seen


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    seen = workers_by_group(tmp_path, "loadgroup")
    assert len(seen["shared"]) == 1 and len(seen["named"]) == 1, seen
    # negative control: without groups the same tests are spread over both workers, so the check above can fail
    spread = workers_by_group(tmp_path, "load")
    assert len(spread["shared"]) == 2 or len(spread["named"]) == 2, spread
