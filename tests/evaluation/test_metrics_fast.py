"""The vectorised bootstrap metrics equal scikit-learn on every resample, ties included."""

import numpy as np
import pytest

from haldet.evaluation.metrics import (
    METRIC_FUNCS,
    evaluate,
    metrics_on_resamples,
    stratified_indices,
)


def _per_resample_sklearn(y, s, idx):
    return {m: np.array([f(y[i], s[i]) for i in idx]) for m, f in METRIC_FUNCS.items()}


@pytest.mark.parametrize("levels", [3, 7, 1000])
def test_vectorised_metrics_match_sklearn_with_ties(levels):
    rng = np.random.default_rng(levels)
    y = (rng.random(120) < 0.35).astype(int)
    # few distinct values -> many ties within and across classes
    s = np.round(rng.normal(size=120) + 0.8 * y, 0 if levels == 3 else 1 if levels == 7 else 6)
    idx = stratified_indices(y, 200, seed=3)
    fast = metrics_on_resamples(y, s, idx)
    slow = _per_resample_sklearn(y, s, idx)
    for m in fast:
        np.testing.assert_allclose(fast[m], slow[m], rtol=0, atol=1e-12, err_msg=m)


def test_collinear_roc_points_are_dropped_like_sklearn():
    # a straight diagonal run of the ROC curve: sklearn drops interior points, which moves FPR@95
    y = np.array([1, 0] * 20)
    s = np.repeat(np.arange(20.0), 2)
    idx = np.arange(40)[None, :]
    assert metrics_on_resamples(y, s, idx)["fpr95"][0] == pytest.approx(METRIC_FUNCS["fpr95"](y, s))


def test_evaluate_ci_equals_loop_over_sklearn():
    rng = np.random.default_rng(5)
    y = np.r_[np.ones(30), np.zeros(50)].astype(int)
    s = np.round(y + rng.normal(size=80), 1)
    rows = {m.metric: m for m in evaluate(y, s, n_boot=150, seed=9)}
    slow = _per_resample_sklearn(y, s, stratified_indices(y, 150, seed=9))
    for m, vals in slow.items():
        lo, hi = np.quantile(vals, [0.025, 0.975])
        assert rows[m].ci_low == pytest.approx(lo, abs=1e-12) and rows[m].ci_high == pytest.approx(hi, abs=1e-12)


def test_fpr95_of_every_resample_is_sklearns_value_exactly():
    """FPR@95 of all resamples at once (present bins, collinear points dropped per row) equals sklearn per resample,
    to the last bit, on tied scores and on straight diagonal runs."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(4, 90))
        y = (rng.random(n) < 0.4).astype(int)
        y[:2] = [0, 1]
        s = [rng.normal(size=n), np.round(rng.normal(size=n)), np.repeat(np.arange(n // 2 + 1.0), 2)[:n]][trial % 3]
        idx = stratified_indices(y, 40, seed=trial)
        fast = metrics_on_resamples(y, s, idx, metrics=("fpr95",))["fpr95"]
        assert fast.tolist() == [METRIC_FUNCS["fpr95"](y[i], s[i]) for i in idx]


def test_resample_indices_drawn_once_per_labels():
    """Every detector of a cell is evaluated on the same test labels: the 1,000 draws are made once, read-only."""
    y = np.array([0, 1, 1, 0, 0, 1, 0])
    first = stratified_indices(y, 50, seed=4)
    assert stratified_indices(y.copy(), 50, seed=4) is first and not first.flags.writeable
    assert stratified_indices(y, 50, seed=5) is not first and stratified_indices(y[::-1], 50, seed=4) is not first
    rng = np.random.default_rng(4)   # the draws of the original per-resample loop
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    for row in first:
        assert row.tolist() == rng.choice(pos, len(pos)).tolist() + rng.choice(neg, len(neg)).tolist()
