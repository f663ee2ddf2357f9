"""The one-pass bootstrap equals the former per-metric code bit for bit (tests/bootstrap_reference.py is a frozen
copy of it): every resampled value of every metric, hence every CI, on seeded inputs with distinct scores, ties
within one class, ties across classes, few items and many."""

from __future__ import annotations

import numpy as np
import pytest

import bootstrap_reference as ref
from haldet.evaluation import metrics as metrics_module
from haldet.evaluation.bootstrap import Ranked, one_pass, stratified_draws
from haldet.evaluation.calibration import calibration_consumer, evaluate_calibrated
from haldet.evaluation.metrics import METRICS, evaluate, metrics_on_resamples, stratified_indices

CASES = {  # name: (items, positive share, rounding of the scores: None = distinct)
    "distinct": (700, 0.35, None),
    "ties_mixed": (600, 0.4, 1),        # one decimal: most distinct scores hold both classes
    "ties_pure": (500, 0.3, "pure"),    # ties only within a class
    "tiny": (9, 0.45, 0),
    "large": (6000, 0.3, 2),
}


def case(name: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    n, share, rounding = CASES[name]
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < share).astype(int)
    y[:2] = [0, 1]
    s = y + rng.normal(0, 0.8, n)
    if rounding == "pure":
        s = np.round(s, 1) + 0.01 * y  # equal scores only within a class
    elif rounding is not None:
        s = np.round(s, rounding)
    return y, s


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 7])
def test_every_resampled_value_equals_the_former_code(name: str, seed: int) -> None:
    y, s = case(name, seed)
    n_boot = 150 if name != "large" else 60
    idx = ref.draw_indices(y, n_boot, seed + 1)
    draws = stratified_draws(y, n_boot, seed + 1)
    assert np.array_equal(draws.indices, idx) and np.array_equal(stratified_indices(y, n_boot, seed + 1), idx)
    want = ref.metrics_on_resamples(y, s, idx)
    for got in (metrics_on_resamples(y, s, draws), metrics_on_resamples(y, s, idx)):
        for m in METRICS:
            assert np.array_equal(got[m], want[m], equal_nan=True), (name, m)
    p = 1 / (1 + np.exp(-s))
    got_cal = one_pass(Ranked.of(y, p), [calibration_consumer(y, p)], draws=draws)
    want_cal = ref.calibration_on_resamples(y, p, idx)
    for m in ("ece", "brier"):
        assert np.array_equal(got_cal[m], want_cal[m]), (name, m)


@pytest.mark.parametrize("window", [1, 2, 4])
def test_fpr95_window_fallback_equals_the_former_code(window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """FPR@95 looks at a few ranks past the target and falls back to all points where they do not decide: tiny
    windows force the fallback on most rows."""
    monkeypatch.setattr(metrics_module, "_WINDOW", window)
    for name in ("distinct", "ties_mixed", "ties_pure", "tiny"):
        y, s = case(name, 5)
        idx = ref.draw_indices(y, 80, 2)
        got = metrics_on_resamples(y, s, idx, ("fpr95",))["fpr95"]
        assert np.array_equal(got, ref.metrics_on_resamples(y, s, idx)["fpr95"]), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_auroc_alone_equals_the_former_code(name: str) -> None:
    """AUROC alone on stratified draws (the report's paired comparisons) reads the positives' ranks instead of
    counting them: the same values."""
    y, s = case(name, 8)
    idx = ref.draw_indices(y, 90, 5)
    got = metrics_on_resamples(y, s, stratified_draws(y, 90, 5), ("auroc",))["auroc"]
    assert np.array_equal(got, ref.metrics_on_resamples(y, s, idx)["auroc"])


def test_auroc_float_path_equals_the_former_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts too large for the exact whole-number sum take the floating-point sum in ascending order."""
    monkeypatch.setattr(metrics_module, "_EXACT", 0.0)
    for name in ("distinct", "ties_mixed"):
        y, s = case(name, 6)
        idx = ref.draw_indices(y, 50, 4)
        for draws in (idx, stratified_draws(y, 50, 4)):
            got = metrics_on_resamples(y, s, draws, ("auroc",))["auroc"]
            assert np.array_equal(got, ref.metrics_on_resamples(y, s, idx)["auroc"]), name


@pytest.mark.parametrize("name", ["distinct", "ties_mixed", "ties_pure"])
def test_cis_equal_the_former_code(name: str) -> None:
    y, s = case(name, 3)
    s[5] = np.nan  # left out before resampling, as before
    ok = np.isfinite(s)
    want = ref.metrics_on_resamples(y[ok], s[ok], ref.draw_indices(y[ok], 200, 11))
    for row in evaluate(y, s, n_boot=200, seed=11):
        assert (row.ci_low, row.ci_high) == ref.cis(want[row.metric]), row.metric
    p = 1 / (1 + np.exp(-s))
    want_cal = ref.calibration_on_resamples(y[ok], p[ok], ref.draw_indices(y[ok], 200, 11))
    for row in evaluate_calibrated(y, p, n_boot=200, seed=11):
        assert (row.ci_low, row.ci_high) == ref.cis(want_cal[row.metric]), row.metric


def test_the_reference_is_sensitive() -> None:
    """Negative control: one resample's index changed moves the reference's values, so equality above means
    something."""
    y, s = case("distinct", 0)
    idx = ref.draw_indices(y, 20, 1)
    bent = idx.copy()
    bent[0, 0] = bent[0, -1]
    a, b = ref.metrics_on_resamples(y, s, idx), ref.metrics_on_resamples(y, s, bent)
    assert not np.array_equal(a["auroc"], b["auroc"]) and not np.array_equal(a["prr"], b["prr"])
