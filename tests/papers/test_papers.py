"""The papers' reported numbers (`haldet.papers`): every file loads and validates, hand-picked values equal the seed
texts (quoted), OpenHalDet's scenario averages agree with its per-dataset cells, every mapped name is registered;
`haldet report RUN --paper NAME` compares only the same cells and lists the rest with the reason."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from haldet.datasets.base import DATASETS
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.papers import COLUMNS, paper_names, paper_rows, read_rows
from haldet.papers.compare import compare, markdown
from haldet.store import RunStore
from haldet.testing.synthetic_run import write_synthetic_run


def _one(paper: str, **want: str) -> str:
    hits = [r for r in paper_rows(paper) if all(getattr(r, k) == v for k, v in want.items())]
    assert len(hits) == 1, (want, len(hits))
    return hits[0].printed


def test_every_paper_loads_with_its_row_count() -> None:
    counts = {p: len(paper_rows(p)) for p in paper_names()}
    # OpenHalDet Table 9: 4 backbones x 20 rows (17 detectors, 3 family averages) x 21 columns;
    # HalluEntity Table 1 (5 x 5) + Table 2 (17 models x 10) + Table 3 (17 x 15); VeriGray Table 4 (13 x 5);
    # TRIVIA+ Table 4 (24 x 4, less Dolly's SFT row of '-') + Table 5 (5 x 10 less 2 n/a) + Table 6 (5 x 6 less 4);
    # HalluLens Table 2 (13 x 8) + Table 3 (5 x 3)
    assert counts == {"openhaldet": 1680, "halluentity": 450, "verigray": 65, "triviaplus": 92 + 48 + 26,
                      "hallulens": 119}


def test_hand_picked_values_equal_the_seed_texts() -> None:
    # openhaldet.txt section 4.2: "on Llama-3.2-3B-Instruct, MIND reaches 75.45 overall AUROC, while CCS obtains 56.67"
    assert _one("openhaldet", model="meta-llama/Llama-3.2-3B-Instruct", detector="mind", dataset="Avg.") == "75.45"
    assert _one("openhaldet", model="meta-llama/Llama-3.2-3B-Instruct", detector="ccs", dataset="Avg.") == "56.67"
    # Table 9, Qwen3-14B: "PRISM58.7669.5587.5575.8785.3855.2658.6776.7170.9768.9766.5053.8289.93..." (ARC .. SVAMP)
    assert _one("openhaldet", model="Qwen/Qwen3-14B", detector="prism", dataset="svamp") == "89.93"
    assert _one("openhaldet", model="Qwen/Qwen3-14B", detector="prism", dataset="arc_challenge") == "58.76"
    # section 4.2: "gray-box methods ... averages of 66.47, 66.07, and 65.91" (gray, black, white on Llama-3.2-3B)
    fam = {r.detector: r.printed for r in paper_rows("openhaldet")
           if r.model == "meta-llama/Llama-3.2-3B-Instruct" and r.dataset == "Avg." and "family" in r.detector}
    assert fam == {"gray-box family avg": "66.47", "black-box family avg": "66.07", "white-box family avg": "65.91"}
    # halluentity.txt Table 2 (tab-separated):
    # "[13] microsoft/phi-2 <b>0.619</b> <b>0.656</b> <b>0.571</b> <b>0.705</b> 0.775 ..."
    assert _one("halluentity", table="Table 2", model="microsoft/phi-2", detector="unit_sar", metric="auroc") == "0.705"
    # Table 3: "[6] 0.283 0.277 0.261 0.329 0.484 0.171 0.168 0.15 0.222 ..." (CCP's Precision_Opt: 0.15)
    assert _one("halluentity", table="Table 3", model="BAAI/Aquila2-34B", detector="ccp",
                metric="precision_opt_test") == "0.15"
    # verigray.txt Table 4: "DeepSeek-R1 <b>78.6</b> <b>64.0</b> 63.8 <b>63.9</b> <b>34.4</b>"
    assert _one("verigray", paper_detector="DeepSeek-R1", metric="bacc") == "78.6"
    # "LLM-Check (Hidden Score) 55.0 56.1 18.4 27.7 48.5"
    assert _one("verigray", detector="llmcheck_hidden", metric="rank_loss") == "48.5"
    # triviaplus.txt Table 6: "RF 0.687 0.733 0.656 0.698 0.631 0.732"
    assert _one("triviaplus", table="Table 6", detector="sft", metric="accuracy",
                paper_detector="SFT", convention="trained on RF labels, evaluated on clean test labels") == "0.732"
    # Table 4: "Dolly (NC) ... SFT - - - -": no numbers, so no rows
    assert not [r for r in paper_rows("triviaplus") if r.dataset == "dolly_nc" and r.detector == "sft"]
    # hallulens.txt Table 2: "GPT-40 4.13 45.15 52.59 0.13 84.89 71.03 75.8 42.31" (GPT-4o printed as GPT-40)
    assert _one("hallulens", table="Table 2", model="GPT-4o", metric="f1_at_32") == "75.8"
    # Table 3: "Llama-3.1-405B-Instruct 11.48 2.28 6.88"
    assert _one("hallulens", table="Table 3", model="Llama-3.1-405B-Instruct",
                metric="false_acceptance_rate_generated_entities") == "2.28"


def test_openhaldet_scenario_averages_agree_with_the_dataset_cells() -> None:
    """A transcription check: in every row of Table 9 the QA, Math and Code averages are the means of their
    datasets (to the printed rounding)."""
    cells: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in paper_rows("openhaldet"):
        cells[(r.model, r.paper_detector)][r.paper_dataset] = r.value
    groups = {"QA Avg.": ("ARC", "CSQA", "Trivia", "TruthfulQA", "SQuAD", "Hotpot", "CoQA", "HaluQA"),
              "Math Avg.": ("GSM8K", "SVAMP"), "Code Avg.": ("HEval", "MBPP")}
    assert len(cells) == 80
    for key, row in cells.items():
        for avg, parts in groups.items():
            assert row[avg] == pytest.approx(sum(row[p] for p in parts) / len(parts), abs=0.011), (key, avg)


def test_mapped_names_are_registered_and_unmapped_rows_say_why() -> None:
    for paper in paper_names():
        for r in paper_rows(paper):
            if r.mapped:
                DETECTORS.get(r.detector, where=r.label())
                DATASETS.get(r.dataset, where=r.label())
            else:
                assert r.note, r.label()
    flagged = {r.paper_dataset for r in paper_rows("openhaldet") if not r.mapped}
    assert flagged == {"ARC", "CSQA", "Trivia", "TruthfulQA", "SQuAD", "Hotpot", "CoQA", "HaluQA", "QA Avg.",
                       "RAGTruth", "XSum", "GSM8K", "SVAMP", "Math Avg.", "ThmQA", "HEval", "MBPP", "Code Avg.",
                       "xLAM", "Beleb.", "Avg."}  # family averages on every column, plus the scenario columns


def test_the_loader_refuses_a_bad_file(tmp_path: Path) -> None:
    good = ",".join(COLUMNS) + "\n" + "x,Table 1,m,d,det,Det,D,auroc,AUROC (%),58.74,100,oriented,,yes,\n"
    path = tmp_path / "x.csv"
    path.write_text(good)
    assert read_rows(path, "x")[0].fraction == pytest.approx(0.5874)
    path.write_text(good.replace("58.74", "158.74"))  # out of 0..100
    with pytest.raises(HaldetError, match="outside"):
        read_rows(path, "x")
    path.write_text(good + good.splitlines()[1] + "\n")  # the same cell twice
    with pytest.raises(HaldetError, match="repeats"):
        read_rows(path, "x")
    path.write_text(good.replace(",yes,", ",no,"))  # unmapped without a reason
    with pytest.raises(HaldetError, match="say why"):
        read_rows(path, "x")
    with pytest.raises(HaldetError, match="no reported numbers") as unknown:
        paper_rows("openhaldt")
    assert "openhaldet" in (unknown.value.hint or "")


# --- report --paper ---------------------------------------------------------------------------------------------
LLAMA3B = "meta-llama/Llama-3.2-3B-Instruct"


def _relabel(root: Path, rows: list[dict[str, object]], config: dict[str, object]) -> None:
    """A synthetic run whose results are `rows` (any model, dataset and detector names)."""
    write_synthetic_run(root, n_items=30, n_detectors=1)
    store = RunStore(root)
    cells = sorted({(str(r["dataset"]), str(r["model"])) for r in rows})
    store.write_manifest({"status": "done", "config": config,
                          "cells": [{"dataset": d, "model": m, "scenario": "qa_open", "error": "", "detectors": []}
                                    for d, m in cells]})
    store.write_results(rows)


def _row(model: str, dataset: str, detector: str, value: float, lo: float, hi: float, **extra: object) -> dict:
    return {"dataset": dataset, "scenario": "qa_open", "model": model, "detector": detector, "family": "gray",
            "metric": "auroc", "level": "response", "value": value, "ci_low": lo, "ci_high": hi, "n": 400,
            "n_pos": 120, "coverage": 1.0, "variant": "", "substitute": "", **extra}


def _report(run: Path, paper: str) -> str:
    from typer.testing import CliRunner

    from haldet.cli import app

    result = CliRunner().invoke(app, ["report", str(run), "--paper", paper])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_substitute_model_run_matches_nothing_and_says_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _relabel(run, [_row("smollm2-135m", "triviaqa", "perplexity", 0.8, 0.7, 0.9),
                   _row("smollm2-135m", "halueval_qa", "saplma", 0.7, 0.6, 0.8)], {"models": ["smollm2-135m"]})
    text = _report(run, "openhaldet")
    assert "Nothing matches" in text
    md = (run / "paper_openhaldet.md").read_text()
    assert md.count("another model: the paper reports this cell for") == 2 and "'smollm2-135m'" in md
    table = (run / "paper_openhaldet.csv").read_text().splitlines()
    assert len(table) == 3 and all(line.startswith("not compared") for line in table[1:])
    assert "<b>Nothing matches</b>" in (run / "report.html").read_text()


def test_a_run_labelled_with_the_papers_model_shows_the_known_differences(tmp_path: Path) -> None:
    rows = [
        # Table 9, Llama-3.2-3B-Instruct, Perplexity "73.5172.1483.10...": TriviaQA 83.10
        _row(LLAMA3B, "triviaqa", "perplexity", 0.80, 0.78, 0.85),
        # SAPLMA "69.1170.4882.69...": TriviaQA 82.69; ours 0.20 oriented is 0.80, CI [0.15, 0.25] -> [0.75, 0.85]
        _row(LLAMA3B, "triviaqa", "saplma", 0.20, 0.15, 0.25),
        # Perplexity on ARC: 73.51, outside our CI [0.60, 0.70]
        _row(LLAMA3B, "arc_challenge", "perplexity", 0.65, 0.60, 0.70),
        _row(LLAMA3B, "triviaqa", "self_eval", 0.7, 0.6, 0.8, variant="prompted"),  # the preset runs "raw"
        _row(LLAMA3B, "triviaqa", "selfcheck_nli", 0.7, 0.6, 0.8,
             substitute="roberta-large-mnli -> llm:smollm2-135m"),
        _row(LLAMA3B, "synth_qa", "det0", 0.7, 0.6, 0.8),  # not in the paper's tables
        {**_row(LLAMA3B, "triviaqa", "perplexity", 0.9, None, None), "metric": "aupr"},  # a metric it never reports
    ]
    run = tmp_path / "run"
    _relabel(run, rows, {"models": [LLAMA3B]})
    text = _report(run, "openhaldet")
    comp = compare("openhaldet", rows)
    got = {(m["dataset"], m["detector"]): m for m in comp.matched}
    assert set(got) == {("triviaqa", "perplexity"), ("triviaqa", "saplma"), ("arc_challenge", "perplexity")}
    assert got[("triviaqa", "perplexity")]["paper"] == pytest.approx(0.8310)
    assert got[("triviaqa", "perplexity")]["diff"] == pytest.approx(0.80 - 0.8310)
    assert got[("triviaqa", "perplexity")]["inside_ci"] is True
    saplma = got[("triviaqa", "saplma")]
    assert (saplma["ours"], saplma["ci_low"], saplma["ci_high"]) == pytest.approx((0.80, 0.75, 0.85))
    assert saplma["diff"] == pytest.approx(0.80 - 0.8269) and saplma["inside_ci"] is True
    arc = got[("arc_challenge", "perplexity")]
    assert arc["diff"] == pytest.approx(0.65 - 0.7351) and arc["inside_ci"] is False
    reasons = {(u["detector"], u["metric"]): u["reason"] for u in comp.unmatched}
    assert "variant 'prompted'; the paper ran 'decision'" in reasons[("self_eval", "auroc")]
    assert "substituted auxiliary model (roberta-large-mnli -> llm:smollm2-135m)" in reasons[("selfcheck_nli",
                                                                                               "auroc")]
    assert "reports no such cell" in reasons[("det0", "auroc")]
    assert comp.other_metrics == {"aupr": 1}
    assert markdown(comp) in text
    md = (run / "paper_openhaldet.md").read_text()
    assert "| Table 9 | triviaqa | meta-llama/Llama-3.2-3B-Instruct | perplexity | auroc_max_orientation | 0.831 | " \
           "0.800 [0.780, 0.850] | -0.031 | yes | 400 |" in md
    assert "| Table 9 | arc_challenge |" in md and "| -0.085 | no |" in md
    # Table 2 in the paper's oriented convention, in files of its own (tests/papers/test_papers_table2.py), never in
    # tables.md
    table2 = (run / "paper_openhaldet_table2.md").read_text()
    assert "oriented on the test labels" in table2 and table2 in text and (run / "paper_openhaldet_table2.csv").exists()
    assert "Table 2 in the paper's convention" not in (run / "tables.md").read_text()
    # report.html: the same comparison as a section, inside / outside in words on each compared row, then Table 2
    html = (run / "report.html").read_text()
    section = html[html.index("<h2 id=paper>"):]
    assert '<a href="#paper">paper</a>' in html and section.index("<h2 id=paper>") < section.index("<h2 id=scenarios>")
    assert ('<tr class=inside><td class="l">Table 9</td><td class="l">triviaqa</td><td class="l">'
            'meta-llama/Llama-3.2-3B-Instruct</td><td class="l">perplexity</td>') in section
    assert '<tr class=outside><td class="l">Table 9</td><td class="l">arc_challenge</td>' in section
    assert "Cells that cannot match" in section and "substituted auxiliary model" in section
    # SAPLMA's QA column: triviaqa 0.20 oriented to 80.00, one of the 8 QA datasets; Table 9's QA Avg. 76.04
    assert "Table 2 in the paper's convention" in section and "80.00† (76.04)" in section


def test_config_qualifiers_pick_the_papers_judge_model(tmp_path: Path) -> None:
    """VeriGray's zero-shot rows differ only in the classifier model: the run's `verdict.model` picks the row."""
    row = {**_row("any-proxy", "verigray", "verigray_llm", 0.7, 0.6, 0.8), "metric": "bacc", "level": "sentence"}
    hit = compare("verigray", [row], default_config={"verdict": {"model": "openai:DeepSeek-R1"}})
    assert [m["paper"] for m in hit.matched] == [pytest.approx(0.786)]
    miss = compare("verigray", [row], default_config={"verdict": {"model": "gpt-4o-mini"}})
    assert not miss.matched and "config.verdict.model is 'gpt-4o-mini'" in miss.unmatched[0]["reason"]
    assert json.dumps(miss.unmatched)  # plain data
