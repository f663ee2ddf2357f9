"""OpenHalDet's Table 2 in the paper's oriented convention (`haldet report RUN --paper openhaldet`): a separately
labelled export of max(AUROC, 1 - AUROC) averaged per scenario, the paper's value beside each paper cell;
orientation and averages checked by hand on a synthetic run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from test_papers import _row

from haldet.papers.table2 import FAMILY_AVG, LABEL, table2, table2_markdown, write_table2

QWEN8 = "Qwen/Qwen3-8B"


def _rows(model: str) -> list[dict]:
    scen = {"triviaqa": "qa_open", "arc_challenge": "qa_mcq", "gsm8k": "math", "ragtruth": "rag", "mbpp": "code",
            "synth_qa": "qa_open"}

    def r(ds: str, det: str, v: float, family: str = "gray", **kw: object) -> dict:
        return {**_row(model, ds, det, v, v - 0.05, v + 0.05, **kw), "scenario": scen[ds], "family": family}

    return [r("triviaqa", "perplexity", 0.30), r("arc_challenge", "perplexity", 0.60), r("gsm8k", "perplexity", 0.45),
            r("ragtruth", "perplexity", 0.80), r("mbpp", "perplexity", 0.90, thin=True),
            r("synth_qa", "perplexity", 0.99),
            r("triviaqa", "self_eval", 0.90, variant="normalized"),  # the preset runs `decision`: no paper value
            r("triviaqa", "saplma", 0.20, family="white"),
            {**r("triviaqa", "perplexity", 0.7), "metric": "aupr"}]  # another metric: not in the table


def test_oriented_scenario_averages_by_hand() -> None:
    t2, outside = table2(_rows(QWEN8))
    got = {(r.family, r.detector): r for r in t2}
    ppl = got[("gray", "perplexity")].cells
    # triviaqa 0.30 -> 0.70, arc 0.60; QA = 0.65 over 2 of the paper's 8 QA datasets; Table 9 QA Avg. 66.64
    assert (ppl["QA"].value, ppl["QA"].n, ppl["QA"].expected, ppl["QA"].paper) == pytest.approx((0.65, 2, 8, 0.6664))
    assert (ppl["Math"].value, ppl["Math"].paper) == pytest.approx((0.55, 0.6304))  # gsm8k 0.45 -> 0.55
    assert (ppl["RAG"].value, ppl["RAG"].paper) == pytest.approx((0.80, 0.6897))
    assert ppl["Code"].value is None  # the thin mbpp cell is never averaged
    assert ppl["Avg."].value == pytest.approx((0.70 + 0.60 + 0.55 + 0.80) / 4) and ppl["Avg."].expected == 17
    assert outside == ["synth_qa"]
    self_eval = got[("gray", "self_eval")]
    assert not self_eval.paper_cell and self_eval.cells["QA"].paper is None
    gray_avg = got[("gray", FAMILY_AVG)]
    assert gray_avg.cells["QA"].value == pytest.approx((0.65 + 0.90) / 2) and gray_avg.cells["QA"].paper is None
    white = got[("white", FAMILY_AVG)]  # SAPLMA alone: 0.20 -> 0.80; Table 9's white-box QA Avg. 66.53
    assert (white.cells["QA"].value, white.cells["QA"].paper) == pytest.approx((0.80, 0.6653))
    assert [r.detector for r in t2] == ["perplexity", "self_eval", FAMILY_AVG, "saplma", FAMILY_AVG]


def test_the_labelled_table2_files(tmp_path: Path) -> None:
    """What `haldet report RUN --paper openhaldet` writes beside paper_openhaldet.md (the CLI wiring: test_papers.py's
    report test checks the files appear)."""
    text, files = write_table2(tmp_path, _rows(QWEN8))
    md = files["paper_table2_md"].read_text()
    assert md == text and LABEL in md and f"## Backbone: {QWEN8}" in md
    assert "outside the paper's 17 (left out): synth_qa" in md
    assert ("| perplexity |  | 65.00† (66.64) | 80.00 (68.97) | — (55.29) | 55.00† (63.04) | — (64.79) | — (57.80) "
            "| — (78.60) | — (59.88) | 66.25† (64.84) |") in md
    assert "| self_eval | normalized | 90.00† | — |" in md
    rows = list(csv.DictReader(files["paper_table2_csv"].open()))
    qa = next(r for r in rows if r["detector"] == "saplma" and r["column"] == "QA")
    assert float(qa["ours_oriented"]) == pytest.approx(0.80) and qa["convention"] == "oriented on test labels"
    # a substitute backbone: the table is ours alone, no paper value
    other = table2_markdown(*table2(_rows("smollm2-135m")))
    assert "| perplexity |  | 65.00† | 80.00 | — | 55.00† |" in other and "(66.64)" not in other
