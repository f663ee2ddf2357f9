"""Aggregation rules against hand computations and against the paper's own Table 9 (Qwen3-8B, black box)."""

import pytest

from haldet.evaluation.aggregate import (
    FAMILY_AVG,
    OVERALL,
    backbone_summary,
    cost_table,
    dataset_table,
    scenario_group,
    scenario_table,
)

# dataset -> scenario, in Table 9's column order
DATASETS = {
    "arc_challenge": "qa_mcq", "commonsenseqa": "qa_mcq", "triviaqa": "qa_open", "truthfulqa": "qa_open",
    "squad_v2": "qa_reading", "hotpotqa": "qa_multihop", "coqa": "qa_dialogue", "halueval_qa": "qa_grounded",
    "ragtruth": "rag", "xsum": "summarization", "gsm8k": "math", "svamp": "math", "theoremqa": "science",
    "humaneval": "code", "mbpp": "code", "xlam": "agent", "belebele": "multilingual",
}
# Table 9, Qwen3-8B, black-box detectors: the 17 per-dataset AUROCs (%)
TABLE9 = {
    "verbalized": [58.74, 60.17, 57.71, 63.51, 68.05, 62.50, 57.74, 67.08, 63.52, 51.79, 50.00, 57.71, 59.17,
                   59.09, 54.00, 69.36, 51.68],
    "selfcheck_bert": [56.24, 56.91, 64.18, 61.46, 56.46, 72.66, 59.06, 69.47, 53.97, 57.45, 58.20, 55.47, 59.00,
                       51.24, 55.08, 67.17, 54.63],
    "selfcheck_nli": [59.57, 58.09, 83.57, 66.56, 61.20, 62.50, 55.20, 53.84, 67.86, 59.16, 65.09, 71.39, 52.99,
                      67.77, 50.80, 61.56, 64.98],
    "lexical": [51.92, 54.91, 72.91, 62.42, 59.09, 52.34, 59.50, 63.16, 55.87, 55.92, 71.98, 68.16, 71.56, 65.29,
                53.60, 65.10, 51.68],
}
# the paper's printed aggregates for the same rows: (QA Avg., Math Avg., Code Avg., Overall)
PRINTED = {"verbalized": (61.94, 53.86, 56.55, 59.52), "selfcheck_bert": (62.06, 56.84, 53.16, 59.33),
           "selfcheck_nli": (62.57, 68.24, 59.29, 62.48), "lexical": (59.53, 70.07, 59.45, 60.91),
           FAMILY_AVG: (61.52, 62.25, 57.11, 60.56)}
MODEL = "Qwen/Qwen3-8B"


def _rows():
    rows = []
    for det, values in TABLE9.items():
        for (ds, scen), v in zip(DATASETS.items(), values, strict=True):
            for metric in ("auroc", "aupr"):
                rows.append({"dataset": ds, "scenario": scen, "model": MODEL, "detector": det, "family": "black",
                             "metric": metric, "value": v / 100 if metric == "auroc" else 0.5})
    return rows


def test_scenario_groups_follow_table2():
    assert [scenario_group(s) for s in ("qa_mcq", "qa_dialogue", "rag", "math", "multilingual", "new_thing")] == \
        ["QA", "QA", "RAG", "Math", "Multi.", "new_thing"]


def test_reproduces_paper_table9_and_table2_aggregates():
    # inputs are rounded to 0.01 in the paper, so a recomputed mean may differ by one unit in the last place
    t9 = dataset_table(_rows())
    t2 = scenario_table(_rows())
    for det, (qa, math_, code, overall) in PRINTED.items():
        for got, want in [(t9.get(MODEL, det, "QA Avg."), qa), (t9.get(MODEL, det, "Math Avg."), math_),
                          (t9.get(MODEL, det, "Code Avg."), code), (t9.get(MODEL, det, OVERALL), overall),
                          (t2.get(MODEL, det, "QA"), qa), (t2.get(MODEL, det, "Code"), code),
                          (t2.get(MODEL, det, OVERALL), overall)]:
            assert got * 100 == pytest.approx(want, abs=0.0101), (det, want)
    # single-dataset scenarios are reported directly
    assert t2.get(MODEL, "lexical", "RAG") == pytest.approx(0.5587)
    # Overall is the dataset mean, not the mean of the 8 scenario columns (which would be 58.48 here)
    assert t2.get(MODEL, "verbalized", OVERALL) * 100 == pytest.approx(59.52, abs=0.01)
    assert [c.key for c in t2.columns] == ["QA", "RAG", "Sum.", "Math", "Sci.", "Code", "Agent", "Multi.", OVERALL]


def test_hand_computed_partial_means_and_families():
    rows = [
        # model m: two QA datasets and one math dataset
        {"dataset": "a", "scenario": "qa_open", "model": "m", "detector": "p", "family": "gray", "metric": "auroc",
         "value": 0.6},
        {"dataset": "b", "scenario": "qa_mcq", "model": "m", "detector": "p", "family": "gray", "metric": "auroc",
         "value": 0.8},
        {"dataset": "c", "scenario": "math", "model": "m", "detector": "p", "family": "gray", "metric": "auroc",
         "value": 0.9},
        {"dataset": "a", "scenario": "qa_open", "model": "m", "detector": "q", "family": "gray", "metric": "auroc",
         "value": 0.5},
        {"dataset": "b", "scenario": "qa_mcq", "model": "m", "detector": "q", "family": "gray", "metric": "auroc",
         "value": None},  # one class: no number
        {"dataset": "c", "scenario": "math", "model": "m", "detector": "q", "family": "gray", "metric": "auroc",
         "value": 0.7},
        {"dataset": "a", "scenario": "qa_open", "model": "m", "detector": "w", "family": "white",
         "metric": "auroc", "value": 0.75},
        # a second backbone with one dataset
        {"dataset": "a", "scenario": "qa_open", "model": "n", "detector": "p", "family": "gray", "metric": "auroc",
         "value": 0.55},
    ]
    t2 = scenario_table(rows)
    assert t2.get("m", "p", "QA") == pytest.approx(0.7)               # (0.6 + 0.8) / 2
    assert t2.get("m", "p", OVERALL) == pytest.approx(2.3 / 3)        # dataset mean
    assert t2.get("m", "q", "QA") == pytest.approx(0.5)               # b missing: mean of what exists
    qa_q = next(r for r in t2.rows if r.model == "m" and r.detector == "q").values["QA"]
    assert qa_q.partial and (qa_q.n, qa_q.expected) == (1, 2)
    assert t2.get("m", "q", OVERALL) == pytest.approx(0.6)            # (0.5 + 0.7) / 2
    assert t2.get("m", FAMILY_AVG, "QA", family="gray") == pytest.approx(0.6)       # (0.7 + 0.5) / 2
    assert t2.get("m", FAMILY_AVG, "Math", family="gray") == pytest.approx(0.8)     # (0.9 + 0.7) / 2
    assert t2.get("m", FAMILY_AVG, OVERALL, family="gray") == pytest.approx((2.3 / 3 + 0.6) / 2)
    assert t2.get("m", "w", "Math") is None and t2.get("m", "w", OVERALL) == pytest.approx(0.75)
    assert t2.get("n", "p", OVERALL) == pytest.approx(0.55)
    # family rows follow their detectors, gray before white
    assert [(r.detector, r.kind) for r in t2.rows if r.model == "m"] == [
        ("p", "detector"), ("q", "detector"), (FAMILY_AVG, "family"), ("w", "detector"), (FAMILY_AVG, "family")]
    summary = {s["model"]: s for s in backbone_summary(rows)}
    assert summary["m"]["gray"] == pytest.approx((2.3 / 3 + 0.6) / 2)
    assert summary["m"]["white"] == pytest.approx(0.75)
    assert summary["m"]["best_detector"] == "p" and summary["n"]["n_datasets"] == 1
    assert summary["m"]["all"] == pytest.approx((2.3 / 3 + 0.6 + 0.75) / 3)


def test_cost_table_means_over_datasets():
    rows = [{"dataset": d, "scenario": "qa_open", "model": "m", "detector": "p", "family": "gray",
             "metric": "auroc", "value": v, "cost_at_n": c, "extra_calls_item": 5.0, "infer_s_item": None}
            for d, v, c in [("a", 0.6, 10.0), ("b", 0.8, 30.0)]]
    (entry,) = cost_table(rows)
    assert entry["auroc"] == pytest.approx(0.7) and entry["cost_at_n"] == pytest.approx(20.0)
    assert entry["extra_calls_item"] == 5.0 and entry["infer_s_item"] is None and entry["n_datasets"] == 2
