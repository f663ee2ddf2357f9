"""VeriGray protocol metrics against hand-computed values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from haldet.suites.verigray.metrics import (
    best_binary_ranking_loss,
    choose_threshold,
    per_class_f1,
    protocol1,
    protocol1_scores,
    ranking_loss,
    selective_prediction,
)

nan = np.nan


def test_protocol1_drops_not_sure_and_no_fact() -> None:
    # grade 3 (No-Fact) is dropped: y = [1, 1, 0, 0, 0], pred = [1, 0, 1, 0, 0] -> TP 1, FN 1, FP 1, TN 2
    out = protocol1(np.array([0, 1, 5, 6, 6, 3]), np.array([1, 0, 1, 0, 0, 1]))
    assert out["recall"] == pytest.approx(0.5) and out["precision"] == pytest.approx(0.5)
    assert out["f1"] == pytest.approx(0.5) and out["bacc"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert out["n"] == 5 and out["coverage"] == 1.0
    # an unparsable prediction is left out and lowers coverage
    out = protocol1(np.array([0, 1, 5, 6]), np.array([1, nan, 0, 0]))
    assert out["n"] == 3 and out["coverage"] == 0.75 and out["bacc"] == 1.0
    # nobody predicted unfaithful: precision undefined (NaN), never a made-up number
    assert np.isnan(protocol1(np.array([0, 5]), np.array([0, 0]))["precision"])
    assert protocol1_scores(np.array([0, 1, 2, 5, 6]), np.array([0.9, 0.2, 0.0, 0.4, 0.1]))["auroc"] == 0.75


def test_ranking_loss_hand_computed() -> None:
    # all six pairs differ in grade; only (5 vs 1) is tied -> 0.5 / 6
    assert ranking_loss(np.array([0, 1, 5, 6]), np.array([0.9, 0.5, 0.5, 0.1])) == pytest.approx(1 / 12)
    # grades [0, 0, 3, 6]: 5 pairs (the two 0s are not a pair); (3 vs first 0) is backwards -> 1 / 5
    assert ranking_loss(np.array([0, 0, 3, 6]), np.array([0.2, 0.8, 0.5, 0.1])) == pytest.approx(0.2)
    # perfect and reversed rankings; NaN scores are left out
    g = np.array([0, 1, 2, 3, 4, 5, 6])
    assert ranking_loss(g, -g.astype(float)) == 0.0 and ranking_loss(g, g.astype(float)) == 1.0
    assert ranking_loss(np.array([0, 6, 3]), np.array([1.0, 0.0, nan])) == 0.0
    assert np.isnan(ranking_loss(np.array([5, 5]), np.array([0.1, 0.2])))


def test_constant_predictor_scores_exactly_one_half() -> None:
    rng = np.random.default_rng(0)
    grades = rng.integers(0, 7, 500)
    assert ranking_loss(grades, np.full(500, 0.3)) == 0.5
    assert ranking_loss(grades, np.zeros(500)) == 0.5
    # negative control: an informative predictor does not score 0.5
    assert ranking_loss(grades, -grades + rng.normal(0, 0.1, 500)) < 0.1


def test_ranking_loss_equals_brute_force_pair_count() -> None:
    rng = np.random.default_rng(1)
    grades, scores = rng.integers(0, 7, 60), rng.integers(0, 5, 60).astype(float)
    total = wrong = 0.0
    for i, j in itertools.permutations(range(60), 2):
        if grades[i] > grades[j]:
            total += 1
            wrong += 1.0 if scores[i] > scores[j] else 0.5 if scores[i] == scores[j] else 0.0
    assert ranking_loss(grades, scores) == pytest.approx(wrong / total)


def test_best_binary_ranking_loss_is_the_floor_of_every_binary_predictor() -> None:
    # grades [0, 0, 3, 6]: cut at 3 leaves only (6 vs 3) tied -> 0.5 / 5
    assert best_binary_ranking_loss(np.array([0, 0, 3, 6])) == (pytest.approx(0.1), 3)
    rng = np.random.default_rng(2)
    grades = rng.integers(0, 7, 11)
    brute = min(ranking_loss(grades, np.array(bits, dtype=float)) for bits in itertools.product((0, 1), repeat=11))
    assert best_binary_ranking_loss(grades)[0] == pytest.approx(brute) and brute > 0


def test_per_class_f1_hand_computed() -> None:
    f1 = per_class_f1(np.array([0, 0, 1, 6]), np.array([0, 1, 1, nan]))
    assert f1["Contradicting"] == pytest.approx(2 / 3) and f1["Fabricated"] == pytest.approx(2 / 3)
    assert f1["Explicitly-Supported"] == 0.0  # its only sentence got an unparsable reply
    assert np.isnan(f1["Out-Dependent"])  # absent from gold and predictions


def test_selective_prediction_hand_computed() -> None:
    grades = np.array([0, 1, 4, 5, 6, 6, 2])
    pred = np.array([6, 0, 4, 5, 6, nan, 5])
    rows = {r["threshold"]: r for r in selective_prediction(grades, pred)}
    assert rows["Out-Dependent"]["coverage"] == pytest.approx(5 / 7) and rows["Out-Dependent"]["risk"] == 0.2
    assert rows["Implicitly-Supported"]["coverage"] == pytest.approx(4 / 7)
    assert rows["Implicitly-Supported"]["risk"] == 0.25
    assert rows["Explicitly-Supported"]["coverage"] == pytest.approx(2 / 7)
    assert rows["Explicitly-Supported"]["risk"] == 0.5


def test_threshold_is_chosen_for_balanced_accuracy() -> None:
    assert choose_threshold(np.array([0, 1, 5, 6, 3]), np.array([0.9, 0.6, 0.4, 0.1, 0.99])) == 0.6
    assert np.isnan(choose_threshold(np.array([5, 6]), np.array([0.1, 0.2])))


def test_fast_binary_rates_equal_sklearn() -> None:
    from haldet.suites.verigray.metrics import binary_metrics, binary_rates

    rng = np.random.default_rng(4)
    for _ in range(20):
        y, pred = rng.integers(0, 2, 30), rng.integers(0, 2, 30)
        fast, ref = binary_rates(y, pred), binary_metrics(y, pred)
        assert all(fast[k] == pytest.approx(ref[k], nan_ok=True) for k in ref)
    assert np.isnan(binary_rates(np.array([1, 0]), np.array([0, 0]))["precision"])
