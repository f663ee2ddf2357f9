"""kill -9 in the middle of generation, start again: every item exactly once."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import haldet_cmd, run_cli

pytestmark = pytest.mark.slow

ARGS = ("run", "--limit", "24", "--max-new-tokens", "16", "--batch-size", "2", "--decode-rows", "2",
        "--detector", "perplexity")


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path):
    out = tmp_path / "run"
    log = out / "halueval_qa" / "smollm2-135m" / "generate.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(haldet_cmd(*ARGS, "--out", str(out)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 600
    while time.time() < deadline and (not log.exists() or log.stat().st_size == 0):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)  # mid-generation: at most the batches appended so far survive
    proc.wait()
    partial = [json.loads(x)["id"] for x in log.read_text().splitlines() if x.endswith("}")]
    assert 0 < len(partial) < 24
    with open(log, "a") as fh:  # and a torn line, as if killed inside a write
        fh.write('{"id": "halueval_qa/data/0", "key": "x", "resp')

    done = run_cli(*ARGS, "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [json.loads(x)["id"] for x in log.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 24
    assert ids[: len(partial)] == partial  # what was written before the kill is kept, not redone
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cells"][0]["computed"]["generate_computed"] == 24 - len(partial)
