"""Rejection curves and PRR: known answers, an independent implementation, and the bootstrap rows."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.evaluation.metrics import evaluate
from haldet.evaluation.rejection import rejection_metrics, risk_coverage


def reference_prr(y: np.ndarray, s: np.ndarray, max_rejection: float = 1.0, n_random: int = 400,
                  seed: int = 0) -> float:
    """Independent PRR in the style of lm-polygraph: sort by score, average the kept quality over the first
    int(f * n) rejection steps, random area by Monte-Carlo over random scores (no tie handling: tie-free data)."""
    q = 1.0 - np.asarray(y, dtype=float)
    n = len(q)
    k = int(max_rejection * n)

    def area_of(order: np.ndarray) -> float:
        kept_means = [q[order[: n - j]].mean() for j in range(k)]
        return float(np.mean(kept_means))

    rng = np.random.default_rng(seed)
    detector = area_of(np.argsort(s))
    oracle = area_of(np.argsort(y, kind="stable"))
    random = float(np.mean([area_of(rng.permutation(n)) for _ in range(n_random)]))
    return (detector - random) / (oracle - random)


def one(y, s, metric):
    return float(rejection_metrics(np.asarray(y), np.asarray(s, dtype=float),
                                   np.arange(len(y))[None, :], (metric,))[metric][0])


def test_prr_equals_an_independent_implementation_on_synthetic_scores():
    rng = np.random.default_rng(3)
    y = (rng.random(80) < 0.35).astype(int)
    s = y * 0.8 + rng.normal(size=80)  # informative, tie-free
    for metric, f in (("prr", 1.0), ("prr_50", 0.5)):
        assert one(y, s, metric) == pytest.approx(reference_prr(y, s, f), abs=0.01)


def test_oracle_is_one_random_about_zero_inverted_minus_one():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 100)  # balanced: the inverted oracle is exactly -1
    oracle = y + rng.random(200) * 0.1
    assert one(y, oracle, "prr") == pytest.approx(1.0)
    assert one(y, -oracle, "prr") == pytest.approx(-1.0)
    assert one(y, oracle, "prr_50") == pytest.approx(1.0)
    randoms = [one(y, rng.random(200), "prr") for _ in range(200)]
    assert abs(np.mean(randoms)) < 0.03
    # a constant score is random in expectation: every tie order is equally likely -> exactly 0
    assert one(y, np.zeros(200), "prr") == pytest.approx(0.0)


def test_curve_by_hand_with_a_tie():
    # scores 0.1 (correct), 0.5 (correct), 0.5 (hallucinated), 0.9 (hallucinated)
    y = np.array([0, 0, 1, 1])
    s = np.array([0.1, 0.5, 0.5, 0.9])
    rc = risk_coverage(y, s)
    # kept quality: m=1: 1; m=2: (1 + 0.5)/2; m=3: 2/3; m=4: 2/4 -> risk = 1 - that
    assert rc.risk.tolist() == pytest.approx([0.0, 0.25, 1 / 3, 0.5])
    # area over all 4 points = mean(1, .75, 2/3, .5); oracle = mean(1, 1, 2/3, .5); random = .5
    area = np.mean([1, 0.75, 2 / 3, 0.5])
    oracle = np.mean([1, 1, 2 / 3, 0.5])
    assert one(y, s, "rej_auc") == pytest.approx(area)
    assert one(y, s, "aurc") == pytest.approx(1 - area)
    assert one(y, s, "prr") == pytest.approx((area - 0.5) / (oracle - 0.5))


def test_evaluate_gives_prr_rows_with_bootstrap_cis():
    rng = np.random.default_rng(1)
    y = (rng.random(120) < 0.4).astype(int)
    s = y + rng.normal(size=120)
    s[:6] = np.nan
    rows = {m.metric: m for m in evaluate(y, s, n_boot=200)}
    for name in ("prr", "prr_50", "rej_auc", "aurc"):
        row = rows[name]
        assert row.ci_low is not None and row.ci_low <= row.value <= row.ci_high
        assert row.coverage == pytest.approx(114 / 120)
    valid = np.isfinite(s)
    assert rows["prr"].value == pytest.approx(one(y[valid], s[valid], "prr"))
    assert rows["prr"].value > 0.3



def test_counts_of_a_grouped_resample_give_the_metrics_of_the_repeated_units():
    from haldet.evaluation.rejection import rejection_from_counts

    rng = np.random.default_rng(4)
    y = (rng.random(30) < 0.4).astype(int)
    s = np.round(y + rng.normal(size=30), 1)  # ties
    _, bins = np.unique(s, return_inverse=True)
    for seed in range(5):
        mult = np.random.default_rng(seed).integers(0, 3, size=30)
        reps = np.repeat(np.arange(30), mult)
        cp = np.bincount(bins, weights=mult * (y == 1), minlength=bins.max() + 1)[None, :]
        cn = np.bincount(bins, weights=mult * (y == 0), minlength=bins.max() + 1)[None, :]
        got = rejection_from_counts(cp, cn)
        want = rejection_metrics(y, s, reps[None, :])
        for m in want:
            assert got[m][0] == pytest.approx(want[m][0], rel=1e-9, abs=1e-12), m
