"""VeriGray result rows: Table 4 on test with a validation threshold, classifier rows, breakdowns."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.suites.verigray.evaluate import DetectorOutput, Sentences, evaluate
from haldet.suites.verigray.labels import CLASSES, IMPLICIT
from haldet.suites.verigray.metrics import FLOAT


def classes_to_outputs(detector: str, classes: np.ndarray) -> DetectorOutput:
    """A 7-way classifier's outputs: binary = predicted degree below Implicitly-Supported (the paper's threshold),
    score = 6 - degree (less faithful class = higher score); unparsable replies stay NaN."""
    classes = np.asarray(classes, dtype=FLOAT)
    binary = np.where(np.isfinite(classes), (classes < IMPLICIT).astype(FLOAT), np.nan)
    return DetectorOutput(detector, scores=(len(CLASSES) - 1) - classes, binary=binary, classes=classes)


def sentences(degree: list[int], split: list[str], generator: list[str] | None = None) -> Sentences:
    n = len(degree)
    return Sentences(item=np.array([f"i{k // 2}" for k in range(n)]), degree=np.array(degree),
                     generator=np.array(generator or ["g"] * n), split=np.array(split))


def pick(rows: list[dict], metric: str, group: str = "all") -> dict:
    (row,) = [r for r in rows if r["metric"] == metric and r["group"] == group]
    return row


def test_perfect_classifier_rows() -> None:
    degree = [0, 1, 2, 3, 4, 5, 6, 6, 0, 5]
    s = sentences(degree, ["test"] * 10, ["a"] * 5 + ["b"] * 5)
    rows = evaluate(s, classes_to_outputs("clf", np.array(degree, dtype=float)))
    assert pick(rows, "bacc")["value"] == 1.0 and pick(rows, "f1")["value"] == 1.0
    assert pick(rows, "rank_loss_continuous")["value"] == 0.0
    # binary at Implicitly-Supported: 0..4 vs 5..6 -> every pair inside a side is a tie
    assert pick(rows, "rank_loss")["value"] > pick(rows, "rank_loss_best_binary")["value"] - 1e-12
    assert all(r["value"] == 1.0 for r in rows if r["metric"] == "class_f1")
    assert pick(rows, "selective_risk", "threshold=Implicitly-Supported")["value"] == 0.0
    assert pick(rows, "selective_coverage", "threshold=Out-Dependent")["value"] == pytest.approx(0.5)
    assert pick(rows, "bacc", "generator=a")["n"] == 2  # a: grades 0, 1 enter protocol 1 (2, 3, 4 do not)
    assert pick(rows, "flagged_unfaithful", "class=Out-Dependent")["value"] == 1.0


def test_threshold_comes_from_validation_only() -> None:
    degree = [0, 6, 1, 5, 0, 6, 1, 5]
    split = ["val"] * 4 + ["test"] * 4
    scores = np.array([0.9, 0.1, 0.6, 0.4, 0.5, 0.3, 0.35, 0.2])  # val separates at 0.6
    rows = evaluate(sentences(degree, split), DetectorOutput("d", scores))
    assert pick(rows, "bacc")["note"] == "threshold 0.6 from validation"
    # test: unfaithful 0.5, 0.35 both below 0.6 -> nothing flagged: recall 0, bacc 0.5
    assert pick(rows, "recall")["value"] == 0.0 and pick(rows, "bacc")["value"] == 0.5
    assert pick(rows, "auroc")["value"] == 1.0  # the scores themselves rank test perfectly
    # relabelling test sentences never moves the threshold
    flipped = evaluate(sentences([*degree[:4], 6, 0, 5, 1], split), DetectorOutput("d", scores))
    assert pick(flipped, "bacc")["note"] == "threshold 0.6 from validation"


def test_constant_detector_has_rank_loss_one_half() -> None:
    degree = [0, 6, 1, 5, 0, 6, 3, 4]
    rows = evaluate(sentences(degree, ["val"] * 4 + ["test"] * 4), DetectorOutput("c", np.zeros(8)))
    assert pick(rows, "rank_loss_continuous")["value"] == 0.5 and pick(rows, "rank_loss")["value"] == 0.5


def test_table4_rows_get_item_bootstrap_cis() -> None:
    rng = np.random.default_rng(0)
    degree = rng.integers(0, 7, 200)
    scores = (6 - degree) + rng.normal(0, 2.0, 200)
    s = Sentences(item=np.array([f"i{k // 4}" for k in range(200)]), degree=degree, generator=np.array(["g"] * 200),
                  split=np.array(["val"] * 100 + ["test"] * 100))
    rows = evaluate(s, DetectorOutput("d", scores), n_boot=200, seed=1)
    for metric in ("bacc", "f1", "rank_loss", "rank_loss_continuous"):
        row = pick(rows, metric)
        assert row["ci_low"] < row["value"] < row["ci_high"], (metric, row)
    assert evaluate(s, DetectorOutput("d", scores), n_boot=200, seed=1) == rows  # seeded
    assert pick(evaluate(s, DetectorOutput("d", scores)), "bacc")["ci_low"] is None  # no bootstrap asked
