"""HTML/Markdown/LaTeX reports on a synthetic two-backbone run with known scores (fast, no model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from haldet.evaluation.cost import detector_cost, stage_stats
from haldet.evaluation.metrics import evaluate
from haldet.figures.charts import cost_scatter
from haldet.figures.data import Point
from haldet.report.build import write_reports
from haldet.report.rundata import load_run
from haldet.report.tables import tex_escape
from haldet.signals import Signal
from haldet.stages.plan import stage_provides
from haldet.store import RunStore

DETS = {"perplexity": ("gray", {Signal.TOKEN_LOGPROBS}), "lexical_similarity": ("black", {Signal.SAMPLES}),
        "saplma": ("white", {Signal.HIDDEN_LAST})}
DATASETS = {"halueval_qa": "qa_grounded", "coqa": "qa_dialogue", "gsm8k": "math"}
MODELS = ("smollm2-135m", "org/Other-Model_1")


def make_run(root: Path, seed: int = 0) -> Path:
    """A stored run: per cell split, labels, cached scores with a recorded key, evidence stats, results rows."""
    rng = np.random.default_rng(seed)
    store = RunStore(root)
    rows, cells = [], []
    for model in MODELS:
        for ds, scen in DATASETS.items():
            cell = store.cell(ds, model)
            ids = [f"{ds}/test/{i}" for i in range(40)]
            y = np.array([1] * 15 + [0] * 25)
            cell.write_json("split.json", {"train": [], "val": [], "test": ids})
            cell.log("annotate").append({"id": i, "key": "a", "category": "hallucination" if t else "correct",
                                         "judge": "rule:x"} for i, t in zip(ids, y, strict=True))
            ev = {"generate": stage_stats("generate", {i: {"id": i, "n_tokens": 9, "seconds": 0.05} for i in ids}),
                  "sample": stage_stats("sample", {i: {"id": i, "samples": ["a"] * 5, "logliks": [[-2.0, 6]] * 5,
                                                       "seconds": 0.5} for i in ids}),
                  "features": stage_stats("features", {i: {"id": i} for i in ids}, wall_seconds=4.0, computed=40)}
            entries = []
            for k, (det, (fam, req)) in enumerate(DETS.items()):
                s = y * (0.4 + 0.4 * k) + rng.normal(size=40)
                cell.log(f"scores/{det}").append({"id": i, "key": f"sk-{det}", "value": float(v), "reason": ""}
                                                 for i, v in zip(ids, s, strict=True))
                cost = detector_cost(req, ev, stage_signals=stage_provides(), fit_s=0.3 * k, score_s=0.02, n_scored=40)
                for m in evaluate(y, s, n_boot=50):
                    rows.append({"dataset": ds, "scenario": scen, "model": model, "detector": det, "family": fam,
                                 "metric": m.metric, "value": m.value, "ci_low": m.ci_low, "ci_high": m.ci_high,
                                 "n": m.n, "n_pos": m.n_pos, "coverage": m.coverage, "note": m.note, **cost})
                entries.append({"name": det, "key": f"sk-{det}", "fit_s": 0.3 * k, "score_s": 0.02, "error": ""})
            cells.append({"dataset": ds, "scenario": scen, "model": model, "error": "", "evidence": ev,
                          "labels": {"correct": 25, "hallucination": 15}, "split": {"test": 40},
                          "stage_seconds": {"generate": 2.0}, "detectors": entries})
    store.write_manifest({"config": {"models": list(MODELS), "datasets": list(DATASETS), "detectors": list(DETS)},
                          "config_hash": "cafe", "status": "done", "created": "2026-01-01", "cells": cells,
                          "versions": {"haldet": "0"}})
    store.write_results(rows)
    return root


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("run"))
    out = tmp_path_factory.mktemp("out")
    write_reports(out, [load_run(run)], n_boot=50)
    return out


def test_html_has_one_figure_set_per_backbone(reports):
    html = (reports / "report.html").read_text()
    assert html.count(">AUROC vs Cost@100: ") == len(MODELS)
    assert html.count(">AUROC (%) by scenario: ") == len(MODELS)
    # one ROC curve per scored detector, its legend giving the AUROC results.json holds
    assert html.count(" (AUROC ") == len(MODELS) * len(DATASETS) * len(DETS)
    for row in json.loads((reports / "results.json").read_text()):
        if row["metric"] == "auroc":
            assert f"{row['detector']} (AUROC {100 * row['value']:.1f})" in html
    # per-scenario panels when a backbone has several scenario columns (QA and Math here)
    assert "QA: smollm2-135m" in html and "Math: org/Other-Model_1" in html
    assert "<script" not in html and "https://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    # evidence colours of Figure 2 are named in the legend
    for ev in ("single-generation likelihood", "repeated generation", "internal states"):
        assert ev in html


def test_markdown_and_latex(reports):
    md = (reports / "tables.md").read_text()
    tex = (reports / "tables.tex").read_text()
    assert "| **org/Other-Model_1** |" in md and "| QA | Math | Overall |" in md
    assert "halueval_qa | coqa | QA Avg. | gsm8k | Overall" in md  # Table 9: average after the multi-dataset group
    assert r"org/Other-Model\_1" in tex and tex.count(r"\begin{tabular}") == 3
    # every LaTeX row has as many cells as its header
    for table in tex.split(r"\begin{tabular}")[1:]:
        body = table.split(r"\end{tabular}")[0]
        lines = [ln for ln in body.splitlines() if ln.endswith(r"\\") and "multicolumn" not in ln]
        widths = {ln.count("&") for ln in lines}
        assert len(widths) == 1, widths
    # bold marks exactly one best value per (backbone, column) in Table 2
    t2 = md.split("**AUROC by scenario")[1].split("**AUROC per dataset")[0]
    assert len(re.findall(r"\*\*\d+\.\d+\*\*", t2)) == len(MODELS) * 3


def test_cost_table_numbers(reports):
    md = (reports / "tables.md").read_text()
    cost = md.split("**Detector cost")[1]
    # lexical_similarity: 100 x 0.5 s of samples + fit 0.3 + 100 x 0.02/40 -> 50.35 s; 5 extra calls, 30 tokens
    line = next(ln for ln in cost.splitlines() if ln.startswith("| lexical_similarity"))
    assert "| 50.35 |" in line and "| 5.0 | 30.0 |" in line
    # perplexity: no extra evidence: fit 0 + 100 x 0.0005 = 0.05 s
    line = next(ln for ln in cost.splitlines() if ln.startswith("| perplexity"))
    assert "| 0.05 |" in line and "| 0.0 | 0.0 |" in line


def test_scatter_log_axis_and_floor():
    fig = cost_scatter([Point(0.5, 0.7, "a", "g"), Point(120.0, 0.8, "b", "h"), Point(0.0, 0.6, "c", "g"),
                        Point(None, 0.9, "d", "g")], title="t")
    ax = fig.axes[0]
    # decades from the floor (1e-4, where the zero cost is drawn) to 1000, on a log axis
    assert ax.get_xscale() == "log" and ax.get_xlim() == pytest.approx((1e-4, 1e3))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1e-4", "0.001", "0.01", "0.1", "1", "10", "100", "1000"]
    drawn = np.concatenate([c.get_offsets() for c in ax.collections])  # three drawable points, two groups
    assert sorted(map(tuple, drawn.tolist())) == [(1e-4, 60.0), (0.5, 70.0), (120.0, 80.0)]
    assert len(ax.collections) == 2 and [t.get_text() for t in fig.legends[0].get_texts()] == ["g", "h"]
    assert "drawn at the floor: c" in ax.get_xlabel()
    assert not np.isnan(drawn).any()


def test_tex_escape():
    assert tex_escape("a_b&c%d$e#f{g}h~i^j\\k") == (r"a\_b\&c\%d\$e\#f\{g\}h\textasciitilde{}i\^{}j"
                                                    r"\textbackslash{}k")
