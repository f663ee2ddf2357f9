"""A run over the matrix of cells: a failing cell is reported and the others finish; results and manifest after each;
cost columns on every row; cached detectors keep the timings they took when computed."""

from __future__ import annotations

import json

import pytest

import haldet
import haldet.flow.cell
from haldet.config import RunConfig
from haldet.evaluation.cost import stage_stats
from haldet.evaluation.metrics import MetricValue
from haldet.flow.results import result_rows
from haldet.flow.scoring import DetectorRun


def _fake_cell(dataset: str, model: str, *, cached: bool = False) -> haldet.flow.cell.CellResult:
    gen = {f"{dataset}/t/{i}": {"id": f"{dataset}/t/{i}", "n_tokens": 8, "seconds": 0.1} for i in range(10)}
    sample = {k: {"id": k, "samples": ["a", "b", "c"], "logliks": [[-1.0, 4]] * 3, "seconds": 0.9} for k in gen}
    cell = haldet.flow.cell.CellResult(dataset=dataset, scenario="qa_open", model=model)
    cell.evidence = {"generate": stage_stats("generate", gen), "sample": stage_stats("sample", sample)}
    for name, fam in (("perplexity", "gray"), ("lexical_similarity", "black")):
        run = DetectorRun(name=name, family=fam, fit_seconds=0.0 if cached else 0.25, score_seconds=0.0 if cached
                          else 0.05, cached=cached, key=f"key-{name}", n_scored=10)
        run.metrics = [MetricValue(m, 0.7, 0.6, 0.8, 10, 4, 1.0) for m in ("auroc", "aupr", "fpr95")]
        cell.detectors.append(run)
    return cell


def test_failing_cell_reported_others_finish(tmp_path, monkeypatch):
    seen_manifests = []

    def fake_run_cell(config, store, dataset, model, progress, backends, previous=None):
        if dataset == "halueval_dialogue":
            raise RuntimeError("CUDA out of memory (simulated)")
        return _fake_cell(dataset, model)

    monkeypatch.setattr(haldet.flow.cell, "run_cell", fake_run_cell)
    config = RunConfig(datasets=["halueval_qa", "halueval_dialogue", "halueval_summarization"],
                       models=["smollm2-135m"], detectors=["perplexity", "lexical_similarity"])
    rows, cells = haldet.run(config, tmp_path / "run",
                               on_cell=lambda c: seen_manifests.append(
                                   json.loads((tmp_path / "run" / "manifest.json").read_text())))
    assert [c.dataset for c in cells] == ["halueval_qa", "halueval_dialogue", "halueval_summarization"]
    failed = cells[1]
    assert failed.error == "RuntimeError: CUDA out of memory (simulated)"
    assert failed.scenario == "qa_dialogue"  # known from the adapter even though the cell failed
    assert {r["dataset"] for r in rows} == {"halueval_qa", "halueval_summarization"}
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["failed_cells"] == 1
    assert "Traceback" in manifest["cells"][1]["data"]["traceback"]
    # the manifest is written after every cell (a crash keeps finished cells)
    assert [len(m["cells"]) for m in seen_manifests] == [1, 2, 3]
    stored = json.loads((tmp_path / "run" / "results.json").read_text())
    assert len(stored) == len(rows) == 2 * 2 * 3


def test_single_cell_failure_raises(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(haldet.flow.cell, "run_cell", boom)
    with pytest.raises(RuntimeError, match="boom"):
        haldet.run(RunConfig(datasets=["halueval_qa"], detectors=["perplexity"]), tmp_path / "run")


def test_rows_carry_cost_columns_that_sum():
    rows = result_rows(_fake_cell("halueval_qa", "m"))
    by_det = {r["detector"]: r for r in rows if r["metric"] == "auroc"}
    lex, ppl = by_det["lexical_similarity"], by_det["perplexity"]
    assert lex["prep_sample_s_item"] == pytest.approx(0.9) and lex["extra_calls_item"] == 3
    assert lex["extra_tokens_item"] == 12
    assert lex["cost_at_n"] == pytest.approx(100 * 0.9 + 0.25 + 100 * 0.005)
    assert ppl["prep_s_item"] == 0 and ppl["extra_calls_item"] == 0
    assert ppl["cost_at_n"] == pytest.approx(0.25 + 100 * 0.005)
    assert ppl["gen_s_item"] == pytest.approx(0.1) and ppl["evidence"] == "single-generation likelihood"


def test_cached_detector_keeps_previous_timings():
    cell = _fake_cell("halueval_qa", "m", cached=True)
    previous = {"detectors": [{"name": "perplexity", "key": "key-perplexity", "fit_s": 1.5, "score_s": 0.2},
                              {"name": "lexical_similarity", "key": "other-key", "fit_s": 9.0, "score_s": 9.0}]}
    found = [haldet.flow.cell.carry_timings(run, previous) for run in cell.detectors]
    ppl, lex = cell.detectors
    assert found == [True, False]
    assert (ppl.fit_seconds, ppl.score_seconds) == (1.5, 0.2)
    assert (lex.fit_seconds, lex.score_seconds) == (0.0, 0.0)  # a different key: not the same scores
    # an unknown timing gives no cost number (never a cache-read zero)
    cell.untimed.append("lexical_similarity")
    rows = {r["detector"]: r for r in result_rows(cell) if r["metric"] == "auroc"}
    assert rows["lexical_similarity"]["cost_at_n"] is None and "no fit/score" in rows["lexical_similarity"]["cost_note"]
    assert rows["perplexity"]["cost_at_n"] == pytest.approx(1.5 + 100 * 0.02)
