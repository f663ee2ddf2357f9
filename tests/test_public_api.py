"""The public API (`import haldet`): every exported name resolves, importing it loads no torch, and a run's results
come back as a DataFrame with the stored rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import haldet
from haldet.store import RunStore


def test_every_exported_name_resolves() -> None:
    for name in haldet.__all__:
        assert getattr(haldet, name) is not None, name
    assert haldet.Detector.__module__ == "haldet.detectors.base"
    assert haldet.Signal.TOKEN_LOGPROBS.value == "token_logprobs"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = haldet.nothing_here


def test_import_haldet_loads_no_torch() -> None:
    code = "import sys, haldet; haldet.RunConfig; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_load_results_returns_the_stored_rows(tmp_path: Path) -> None:
    rows = [{"dataset": "d", "detector": "perplexity", "metric": "auroc", "value": 0.75, "n": 20},
            {"dataset": "d", "detector": "verbalized", "metric": "auroc", "value": 0.5, "n": 20}]
    RunStore(tmp_path).write_results(rows)
    frame = haldet.load_results(tmp_path)
    assert frame.to_dict("records") == rows


def test_run_rejects_an_unknown_detector_before_any_work(tmp_path: Path) -> None:
    config = haldet.load_config(None, datasets=["halueval_qa"], detectors=["no_such_detector"], limit=2)
    with pytest.raises(Exception, match="no_such_detector"):
        haldet.run(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_load_scores_gives_raw_scores_and_calibrated_probabilities_of_the_evaluated_key(tmp_path: Path) -> None:
    import json

    store = RunStore(tmp_path)
    cell = store.cell("d", "m")
    cell.write_json("split.json", {"train": [], "val": [], "test": ["a", "b"]})
    (cell.root / "annotate.jsonl").write_text("".join(json.dumps({"id": i, "category": c}) + "\n"
                                                      for i, c in (("a", "hallucination"), ("b", "correct"))))
    (cell.root / "scores").mkdir()
    (cell.root / "scores" / "perplexity.jsonl").write_text(
        "".join(json.dumps({"id": i, "key": k, "value": v}) + "\n"
                for i, k, v in (("a", "old", 9.0), ("a", "k1", 2.0), ("b", "k1", 1.0))))
    cell.write_json("scores/perplexity.calibrated.json", {"key": "k1", "probabilities": {"a": 0.8, "b": 0.3}})
    store.write_manifest({"cells": [{"dataset": "d", "model": "m",
                                     "detectors": [{"name": "perplexity", "key": "k1"}]}]})
    store.write_results([])
    frame = haldet.load_scores(tmp_path, "d", "m")
    assert frame.to_dict("list") == {"id": ["a", "b"], "label": [1, 0], "perplexity": [2.0, 1.0],
                                     "perplexity.p": [0.8, 0.3]}
    # probabilities filed under another key (another calibration or older scores) are not these scores'
    cell.write_json("scores/perplexity.calibrated.json", {"key": "old", "probabilities": {"a": 0.1, "b": 0.1}})
    assert "perplexity.p" not in haldet.load_scores(tmp_path, "d", "m")


def test_load_run_reads_items_judge_labels_and_the_recorded_scores(tmp_path: Path) -> None:
    """A hand-written run: the newest judge label per item wins, and only scores under the manifest's key count."""
    store = RunStore(tmp_path)
    store.write_manifest({"config": {}, "cells": [{"dataset": "d", "model": "m", "detectors": [
        {"name": "perplexity", "level": "response", "key": "new"}]}]})
    store.write_results([{"dataset": "d", "model": "m", "detector": "perplexity", "metric": "auroc", "value": 1.0}])
    cell = store.cell("d", "m")
    cell.write_json("split.json", {"train": [], "val": ["b"], "test": ["a"]})
    cell.log("generate").append([{"id": i, "key": "g", "prompt": f"Q{i}", "response": f"A{i}", "n_tokens": 2,
                                  "finish_reason": "stop", "provided": False} for i in ("a", "b")])
    cell.log("annotate").append([{"id": "a", "key": "j", "category": "correct", "judge": "rule", "reasoning": "r1"},
                                 {"id": "b", "key": "j", "category": "correct", "judge": "rule", "reasoning": ""},
                                 {"id": "a", "key": "j", "category": "hallucination", "judge": "llm",
                                  "reasoning": "wrong year"}])
    cell.log("scores/perplexity").append([{"id": "a", "key": "new", "value": 1.5, "reason": ""},
                                          {"id": "b", "key": "new", "value": None, "reason": "no answer tokens"},
                                          {"id": "a", "key": "other", "value": 9.0, "reason": ""}])  # other setting
    run = haldet.load_run(tmp_path)
    table = run.table().set_index("id")
    assert table.loc["a", "perplexity"] == 1.5 and table.loc["a", "label"] == 1
    assert table.loc["a", "reasoning"] == "wrong year" and table.loc["a", "label_source"] == "judge llm"
    assert np.isnan(table.loc["b", "perplexity"]) and table.loc["b", "split"] == "val"
    assert run.scores.set_index("id").loc["b", "reason"] == "no answer tokens"
    assert run.results["value"].tolist() == [1.0] and run.notes == []
