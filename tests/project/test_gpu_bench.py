"""benchmarks/gpu.py's CPU smoke mode: the script that measures haldet on a GPU (built from configs with random
weights, no hub) runs end to end here, with a tiny model and the CPU standing in for CUDA. The GPU numbers
themselves come from running it on a GPU machine (docs/speed.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import haldet.models.provenance as provenance
from haldet.config import RunConfig
from repo_paths import REPO

BENCH = REPO / "benchmarks" / "gpu.py"


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_cpu_smoke_runs_every_part(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    bench = load_bench()
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
    # the default table (every package is installed here) over the decoding alone, both modes on the tiny model
    ratio = report["protocol_ratio"]
    assert ratio["detectors"] == len(RunConfig().detectors) and ratio["left_out"] == {}
    assert set(ratio["modes"]) == {"haldet-separate", "haldet"}
    assert all(mode["detector_errors"] == {} for mode in ratio["modes"].values())
    # the statements, questions and the prompt-free pass are read beyond the decoding
    assert ratio["decoding_alone_positions"] > 0 and ratio["ratio_positions_over_decoding_alone"] > 1
    alone, default = ratio["modes"]["haldet-separate"], ratio["modes"]["haldet"]
    decoding = alone["stage_wall_s"]["generate"] - alone["token_pass_s"] + alone["stage_wall_s"]["sample"]
    assert ratio["ratio_over_decoding_alone"] == round(default["wall_s"] / decoding, 3)  # the default's whole run


def test_the_ratio_leaves_out_the_detectors_whose_packages_or_models_are_missing(monkeypatch: Any) -> None:
    """The lent GPU machine has neither spaCy nor bert-score, nor the hub or the packaged MiniLM: the detectors
    that split sentences or compute BERTScore, and SAR, are left out of its default table, each with what it
    lacks, and nothing else is."""
    bench = load_bench()
    monkeypatch.setattr(bench, "installed", lambda package: package not in ("spacy", "bert_score"))
    real_locate = provenance.locate
    monkeypatch.setattr(provenance, "locate", lambda name: None if name in (
        "cross-encoder/stsb-distilroberta-base", "minilm") else real_locate(name))
    kept, left_out = bench.runnable_defaults()
    assert left_out == {"selfcheck_bertscore": ["package bert_score", "package spacy"],
                        "selfcheck_ngram": ["package spacy"], "sar": ["model cross-encoder/stsb-distilroberta-base"]}
    assert kept == [name for name in RunConfig().detectors if name not in left_out]
    monkeypatch.setattr(bench, "installed", lambda package: True)
    monkeypatch.setattr(provenance, "locate", real_locate)
    assert bench.runnable_defaults() == (RunConfig().detectors, {})
