"""The suite's xdist groups hold: tests of one group, named or given by a shared module-scoped fixture
(tests/xdist_groups.py), run on one worker. pytest-xdist 3.8 with pytest 9.2 split every group (pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

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


def test_files_that_run_the_model_go_out_first_each_file_together() -> None:
    def item(nodeid: str, slow: bool = False) -> SimpleNamespace:
        return SimpleNamespace(nodeid=nodeid,
                               get_closest_marker=lambda name: object() if slow and name == "slow" else None)

    items = [item("a.py::t1"), item("a.py::t2"), item("b.py::t1"), item("b.py::t2", slow=True), item("c.py::t1"),
             item("d.py::t1", slow=True)]
    order = [i.nodeid for i in items]
    sys.path.insert(0, str(HERE))
    from xdist_groups import slow_files_first

    slow_files_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "d.py::t1", "a.py::t1", "a.py::t2", "c.py::t1"]
    assert order != [i.nodeid for i in items]  # negative control: the collection order alone fails the check
