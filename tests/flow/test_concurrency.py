"""Two haldet processes on one run directory (real subprocesses, the embedded model): they take turns, so no
item is generated, judged or scored twice, no record is duplicated, the LLM judge is called once per item, and
the manifest keeps the real counts and timings.

To make the overlap certain rather than likely, the test holds the run's lock while it starts both processes,
waits until each says the run is busy, then lets them go."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import haldet_cmd
from haldet.util.locking import file_lock
from mock_openai import FakeOpenAI

N_ITEMS = 4
CELL = ("halueval_qa", "smollm2-135m")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("concurrent") / "run"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _together(run_dir: Path, *args: str) -> list[tuple[int, str, str]]:
    """Start two identical haldet commands while this test holds the run lock; release it once both wait."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = [run_dir.parent / f"{run_dir.name}-{args[0]}-{n}.err" for n in range(2)]
    with file_lock(run_dir / "run.lock", what="test"):
        procs = [subprocess.Popen(haldet_cmd(*args), env=env, stdout=subprocess.PIPE, stderr=log.open("w"),
                                  text=True) for log in logs]
        deadline = time.time() + 300
        while time.time() < deadline and not all("is busy" in log.read_text() for log in logs):
            assert all(p.poll() is None for p in procs), [log.read_text()[-2000:] for log in logs]
            time.sleep(0.2)
        assert all("is busy" in log.read_text() for log in logs)
    out = []
    for proc, log in zip(procs, logs, strict=True):
        stdout, _ = proc.communicate(timeout=600)
        out.append((proc.returncode, stdout, log.read_text()))
    return out


@pytest.mark.slow
def test_two_identical_runs_on_one_dir_take_turns(run_dir: Path) -> None:
    results = _together(run_dir, "run", "--dataset", "halueval_qa", "--limit", str(N_ITEMS), "--max-new-tokens", "8",
                        "--batch-size", "4", "--detector", "perplexity", "--out", str(run_dir), "--json")
    for rc, _, err in results:
        assert rc == 0, err[-2000:]
        assert "Traceback" not in err
    cell = run_dir.joinpath(*CELL)
    for log in ("generate.jsonl", "annotate.jsonl", "scores/perplexity.jsonl"):
        counts = Counter((r["id"], r["key"]) for r in _lines(cell / log))
        assert counts and set(counts.values()) == {1}, f"duplicate records in {log}: {counts}"
    assert len(_lines(cell / "generate.jsonl")) == N_ITEMS
    # the second run found everything cached; the manifest still holds what the work cost when it was done
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "done"
    entry = manifest["cells"][0]
    assert entry["computed"]["generate_computed"] == 0
    assert entry["evidence"]["generate"]["seconds_per_item"] > 0
    assert all(d["timing_known"] and d["score_s"] > 0 for d in entry["detectors"])
    rows = [json.loads(stdout) for _, stdout, _ in results]
    assert rows[0] == rows[1]  # both print the same numbers


@pytest.mark.slow
def test_two_concurrent_annotates_call_the_judge_once_per_item(run_dir: Path, server: FakeOpenAI) -> None:
    if not (run_dir / "manifest.json").exists():
        pytest.skip("needs the run of the test above")
    server.reset()
    results = _together(run_dir, "annotate", str(run_dir), "--judge", "llm", "--judge-model", "judge-test",
                        "--judge-base-url", server.base_url, "--json")
    for rc, _, err in results:
        assert rc == 0, err[-2000:]
    assert len(server.requests) == N_ITEMS  # not 2 x N_ITEMS: the second process judged nothing
    llm = [r for r in _lines(run_dir.joinpath(*CELL, "annotate.jsonl")) if r["judge"] == "llm:judge-test"]
    assert sorted(Counter(r["id"] for r in llm).values()) == [1] * N_ITEMS
    reports = [json.loads(stdout)[0] for _, stdout, _ in results]
    assert reports[0]["total"] == reports[1]["total"] == {"correct": N_ITEMS}
