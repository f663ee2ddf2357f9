"""Shared test helpers: run the real CLI in a subprocess (as a user would)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def haldet_cmd(*args: str) -> list[str]:
    """`haldet ARGS`; a `run` gets `--min-per-class 0` unless it names one: the tests' runs are tiny (a few items)
    and check other things than whether their test split could rank detectors (tests/report/test_thin_cells.py does)."""
    if args and args[0] == "run" and "--min-per-class" not in args and "--help" not in args:
        args = (*args, "--min-per-class", "0")
    return [sys.executable, "-m", "haldet", *args]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run(haldet_cmd(*args), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli


if os.environ.get("HALDET_GOLDEN_DIR"):  # record golden outputs of every in-process run (tests/golden.py)
    sys.path.insert(0, str(Path(__file__).parent))
    import golden

    golden.install(Path(os.environ["HALDET_GOLDEN_DIR"]))
    # CLI subprocesses inherit the variable; this path makes them load the same hook at start-up
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parent / "golden_site"), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(scope="session")
def tiny_smol_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with the embedded SmolLM2's tokenizer (tests/tiny_llama.py), built once per worker: a
    second real model beside the embedded one, or a fast stand-in where a run needs many model passes."""
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_llama import build_tiny_llama_with_embedded_tokenizer

    return build_tiny_llama_with_embedded_tokenizer(tmp_path_factory.mktemp("tiny_smol_llama"))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from xdist_groups import group_by_module_fixture, slow_files_first

    group_by_module_fixture(items)
    slow_files_first(items)
