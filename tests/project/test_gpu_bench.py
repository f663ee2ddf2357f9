"""benchmarks/gpu.py's CPU smoke mode: the script that measures haldet on a GPU (built from configs with random
weights, no hub) runs end to end here, with a tiny model and the CPU standing in for CUDA. The GPU numbers
themselves come from running it on a GPU machine (docs/speed.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from repo_paths import REPO

BENCH = REPO / "benchmarks" / "gpu.py"


def test_cpu_smoke_runs_every_part(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--cpu-smoke", "--prompts", "4", "--new-tokens", "4",
                                      "--workdir", str(tmp_path), "--out", str(tmp_path / "gpu.json")])
    bench.main()
    report = json.loads((tmp_path / "gpu.json").read_text())
    eq = report["equivalence"]
    assert eq["fp32"]["identical_greedy_answers"] == "4/4" and eq["fp32"]["within_tolerance"]
    assert eq["bf16"]["max_logprob_gap"] > 0  # bfloat16 really ran: other numbers, within its tolerance
    assert eq["bf16"]["within_tolerance"]
    runs = report["throughput"]
    for name in ("greedy_haldet", "greedy_transformers", "sample_k5_haldet", "sample_k5_transformers"):
        assert runs[name]["tokens"] > 0 and runs[name]["tokens_per_s"] > 0
    assert runs["sample_k5_haldet"]["tokens"] <= 5 * 4 * 4
    # each greedy answer of 4 tokens: one call per token at least, the prompts read in one call (batch 16)
    assert runs["greedy_haldet"]["forward_calls"] >= 4 and runs["greedy_transformers"]["forward_calls"] >= 4
    for name in ("greedy_profiled_haldet", "greedy_profiled_transformers"):
        assert 0 < runs[name]["inside_forward_s"] <= runs[name]["seconds"]
    for name in ("greedy_ops_haldet", "greedy_ops_transformers"):  # the model's matrix products are among them
        assert any(row["op"] in ("aten::mm", "aten::addmm", "aten::linear") for row in runs[name]["host"])
    protocol = report["protocol"]
    assert protocol["error"] == "" and protocol["stage_seconds"]["generate"] > 0
    assert set(protocol["detector_seconds"]) == {"perplexity", "ln_entropy", "saplma"}
    assert protocol["detector_errors"] == {}
