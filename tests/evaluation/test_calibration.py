"""Calibration: ECE/Brier by hand, monotone maps fitted on validation only, AUROC unchanged through the run's
scoring path, the calibration in the score key."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from haldet.config import RunConfig
from haldet.evaluation.calibration import calibration_on_resamples, evaluate_calibrated, fit_calibrator, reliability
from haldet.flow.scoring import ResponseScoring, score_detector
from haldet.signals import Signal
from haldet.store import CellStore
from haldet.testing.conformance import split_of, synthetic_view


def test_ece_and_brier_by_hand():
    y = np.array([1, 0, 1, 0])
    p = np.array([0.95, 0.05, 0.35, 0.31])  # bins: 9, 0, 3, 3
    # bin 9: |1 - .95| ; bin 0: |0 - .05| ; bin 3: |1 - (.35 + .31)| -> (0.05 + 0.05 + 0.34) / 4
    got = calibration_on_resamples(y, p, np.arange(4)[None, :])
    assert got["ece"][0] == pytest.approx((0.05 + 0.05 + 0.34) / 4)
    assert got["brier"][0] == pytest.approx(np.mean((p - y) ** 2))
    rel = reliability(y, p)
    assert rel["n"][3] == 2 and rel["observed"][3] == pytest.approx(0.5) and rel["confidence"][0] == 0.05
    assert rel["n"][1] == 0 and rel["observed"][1] is None
    # p = 1 falls in the last bin
    assert reliability(np.array([1]), np.array([1.0]))["n"][-1] == 1


def test_maps_are_monotone_and_isotonic_equals_sklearn():
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.4).astype(int)
    s = y + rng.normal(size=200)
    grid = np.sort(rng.normal(size=500) * 3)
    for method in ("platt", "isotonic"):
        p = fit_calibrator(method, s, y).predict(grid)
        assert np.all(np.diff(p) >= 0) and p.min() >= 0 and p.max() <= 1, method
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0, y_max=1).fit(s, y)
    np.testing.assert_allclose(fit_calibrator("isotonic", s, y).predict(grid), iso.predict(grid), atol=1e-12)
    # platt on a score that falls with hallucination: the constant base rate, never a flipped orientation
    flipped = fit_calibrator("platt", -s, y)
    assert flipped.params["slope"] == 0 and flipped.note
    assert np.allclose(flipped.predict(grid), y.mean())
    with pytest.raises(ValueError, match="both classes"):
        fit_calibrator("platt", s[y == 1], y[y == 1])


def test_a_calibrated_model_has_lower_ece_than_a_miscalibrated_one():
    rng = np.random.default_rng(2)
    p_true = rng.random(4000)
    y = (rng.random(4000) < p_true).astype(int)
    good = {m.metric: m for m in evaluate_calibrated(y, p_true, n_boot=100)}
    bad = {m.metric: m for m in evaluate_calibrated(y, p_true ** 3, n_boot=100)}
    assert good["ece"].value < 0.03 < bad["ece"].value
    assert good["ece"].ci_low <= good["ece"].value <= good["ece"].ci_high
    assert good["brier"].value < bad["brier"].value


def _score(tmp_path, calibration):
    view = synthetic_view(frozenset({Signal.TOKEN_LOGPROBS}), n=150)
    config = RunConfig(detectors=["perplexity"], evaluation={"bootstrap": 100, "calibration": calibration})
    store = CellStore(tmp_path / calibration)
    return score_detector("perplexity", "response", ResponseScoring(config), store, view, split_of(view),
                          "synthetic-evidence"), store


def test_calibration_leaves_auroc_and_prr_unchanged_and_keys_the_scores(tmp_path):
    runs = {c: _score(tmp_path, c) for c in ("none", "platt", "isotonic")}
    rows = {c: {m.metric: m for m in run.metrics} for c, (run, _) in runs.items()}
    assert "ece" not in rows["none"]
    for c in ("platt", "isotonic"):
        for m in ("auroc", "aupr", "fpr95", "prr", "prr_50"):
            assert (rows[c][m].value, rows[c][m].ci_low, rows[c][m].ci_high) == (
                rows["none"][m].value, rows["none"][m].ci_low, rows["none"][m].ci_high), (c, m)
        assert rows[c]["ece"].value is not None and 0 <= rows[c]["brier"].value <= 1
        run, store = runs[c]
        assert run.identity["calibration"] == c and run.key != runs["none"][0].key
        saved = store.read_json("scores/perplexity.calibrated.json")
        assert saved["method"] == c and len(saved["probabilities"]) == run.n_scored
        assert run.curves["reliability"]["n"] and run.curves["risk_coverage"]["coverage"][-1] == 1.0
    assert "calibration" not in runs["none"][0].identity
