"""Metrics and splits against hand-computed values."""

import numpy as np
import pytest

from haldet.evaluation.metrics import aupr, auroc, evaluate, fpr_at_95_tpr
from haldet.evaluation.splits import stratified_split

Y = np.array([0, 0, 1, 1])
S = np.array([0.1, 0.4, 0.35, 0.8])


def test_hand_computed_values():
    # pairs (pos, neg): (0.35>0.1) (0.35<0.4) (0.8>0.1) (0.8>0.4) -> 3/4
    assert auroc(Y, S) == pytest.approx(0.75)
    # ranked: 0.8(+) 0.4(-) 0.35(+) 0.1(-): AP = 0.5*1 + 0.5*(2/3)
    assert aupr(Y, S) == pytest.approx(0.5 + 0.5 * 2 / 3)
    # TPR first reaches 95% at threshold 0.35, where one of two negatives is above: FPR 0.5
    assert fpr_at_95_tpr(Y, S) == pytest.approx(0.5)


def test_auroc_below_half_stays_below_half():
    flipped = 1 - S
    assert auroc(Y, flipped) == pytest.approx(0.25)
    rows = {m.metric: m for m in evaluate(Y, flipped, n_boot=200)}
    assert rows["auroc"].value == pytest.approx(0.25)


def test_invalid_scores_reduce_coverage_not_values():
    scores = np.array([0.1, 0.4, 0.35, 0.8, np.nan, np.nan])
    labels = np.array([0, 0, 1, 1, 1, 0])
    rows = {m.metric: m for m in evaluate(labels, scores, n_boot=0)}
    assert rows["auroc"].value == pytest.approx(0.75)
    assert rows["auroc"].n == 4 and rows["auroc"].n_pos == 2
    assert rows["auroc"].coverage == pytest.approx(4 / 6)
    assert rows["auroc"].ci_low is None


def test_single_class_gives_no_number():
    rows = evaluate(np.array([1, 1, 1]), np.array([0.2, 0.3, 0.4]), n_boot=10)
    assert all(r.value is None for r in rows)
    assert "one class" in rows[0].note


def test_bootstrap_ci_brackets_point_and_is_seeded():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60), np.zeros(90)].astype(int)
    s = y * 1.0 + rng.normal(size=y.size)
    a = {m.metric: m for m in evaluate(y, s, n_boot=300, seed=1)}
    b = {m.metric: m for m in evaluate(y, s, n_boot=300, seed=1)}
    assert a["auroc"].ci_low == b["auroc"].ci_low
    assert a["auroc"].ci_low < a["auroc"].value < a["auroc"].ci_high
    assert 0.7 < a["auroc"].value < 0.9  # separation of 1 sd: theoretical AUROC = Phi(1/sqrt 2) = 0.76


def test_stratified_split_proportions_and_determinism():
    labels = {f"d/s/{i}": int(i < 50) for i in range(150)}
    split = stratified_split(labels, (0.6, 0.2, 0.2), seed=42)
    counts = {k: (sum(labels[i] for i in v), len(v)) for k, v in split.items()}
    assert counts == {"train": (30, 90), "val": (10, 30), "test": (10, 30)}
    assert not set(split["train"]) & set(split["test"]) and not set(split["val"]) & set(split["test"])
    shuffled = dict(reversed(list(labels.items())))
    assert stratified_split(shuffled, (0.6, 0.2, 0.2), seed=42) == split
    assert stratified_split(labels, (0.6, 0.2, 0.2), seed=7) != split
