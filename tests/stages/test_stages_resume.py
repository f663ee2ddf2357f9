"""A stage killed mid-way (real subprocess, SIGKILL) resumes with no duplicate and no missing item."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import haldet_cmd, run_cli
from haldet.config import RunConfig
from haldet.store import RunStore

N_ITEMS = 6


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_sample_stage_killed_midway_resumes_exactly(tmp_path):
    run_dir = tmp_path / "run"
    # two items per appended batch (batch_size // k * 2, and 4 * decode_rows // k), so the log grows in three steps
    config = RunConfig.model_validate({"limit": N_ITEMS, "decode_rows": 1, "generation": {"max_new_tokens": 4},
                                       "sample": {"k": 2, "batch_size": 2, "max_new_tokens": 4,
                                                  "hidden_layer": -1}})
    RunStore(run_dir).write_manifest({"config": config.canonical(), "config_hash": config.hash()})
    log = run_dir / "halueval_qa" / "smollm2-135m" / "sample.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(haldet_cmd("sample", str(run_dir)), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None and not _records(log):
        time.sleep(0.2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    killed_with = len(_records(log))
    assert 0 < killed_with < N_ITEMS, f"kill landed outside the stage ({killed_with} records)"

    result = run_cli("sample", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    records = _records(log)
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == N_ITEMS  # nothing duplicated, nothing missing
    assert summary[0]["computed"] == N_ITEMS - killed_with
    assert summary[0]["not_computed"] == []  # the default detectors include EigenScore: states are read
    assert all(len(r["samples"]) == 2 and r["shard"] for r in records)

    report = run_cli("inspect", str(run_dir), "--json")
    assert report.returncode == 0, report.stderr[-2000:]
    cell = json.loads(report.stdout)[0]
    assert cell["signals"]["samples"] == N_ITEMS and cell["signals"]["sample_hidden"] == N_ITEMS
    assert cell["checks"]["sample"]["duplicate_records"] == 0
    assert cell["checks"]["sample"]["missing_or_mismatched_arrays"] == 0
    assert not cell["problems"]

    # a lost shard is caught: inspect names the problem and exits 1
    next((run_dir / "halueval_qa" / "smollm2-135m" / "sample").glob("*.h5")).unlink()
    broken = run_cli("inspect", str(run_dir), "--json")
    assert broken.returncode == 1
    problems = json.loads(broken.stdout)[0]["problems"]
    assert any(p.startswith("sample: missing_or_mismatched_arrays") for p in problems)

    # a damaged shard (truncated) is reported by inspect, then repaired by the next command that needs the stage
    damaged = next((run_dir / "halueval_qa" / "smollm2-135m" / "sample").glob("*.h5"))
    damaged.write_bytes(damaged.read_bytes()[:200])
    broken = run_cli("inspect", str(run_dir), "--json")
    assert broken.returncode == 1 and "Traceback" not in broken.stderr, broken.stderr[-2000:]
    assert any("damaged shard" in p and damaged.name in p for p in json.loads(broken.stdout)[0]["problems"])
    repaired = run_cli("sample", str(run_dir), "--json")
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    assert f"{damaged.name} is damaged" in repaired.stderr and (damaged.parent / f"{damaged.name}.damaged").exists()
    assert 0 < json.loads(repaired.stdout)[0]["computed"] < N_ITEMS  # the lost and the damaged shards' items
    assert run_cli("inspect", str(run_dir)).returncode == 0
    ids = [r["id"] for r in _records(log)]
    assert len(ids) == len(set(ids)) == N_ITEMS


def test_two_writers_on_one_stage_take_turns(tmp_path):
    """Two concurrent `ensure` calls on the same cell and stage: every item is written exactly once."""
    import threading
    from collections import Counter

    from haldet.schema import Instance
    from haldet.stages.base import CellContext, Item, Stage
    from haldet.store import CellStore

    class Slow(Stage):
        name = "slow"

        def key(self, item: Item) -> str:
            return "k"

        def items_per_batch(self) -> int:
            return 1

        def compute(self, batch: list[Item]) -> list[dict]:
            time.sleep(0.05)
            return [{"id": item.id} for item in batch]

    items = [Item(instance=Instance(id=f"t/x/{i}", dataset="t", scenario="qa_open", task_type="short_answer",
                                    question="q"), prompt="p") for i in range(8)]

    def run() -> None:
        ctx = CellContext(config=RunConfig(), dataset="t", model="m", store=CellStore(tmp_path),
                          backend_factory=lambda: None)  # type: ignore[arg-type,return-value]
        Slow(ctx).ensure(items)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(r["id"] for r in _records(tmp_path / "slow.jsonl"))
    assert set(counts) == {i.id for i in items} and set(counts.values()) == {1}
