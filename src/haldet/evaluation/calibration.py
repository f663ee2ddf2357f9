"""Calibrated probabilities: a monotone map from a detector's score to P(hallucination), fitted on validation only.

`platt` is a logistic regression on the standardised score (scikit-learn), its slope kept non-negative: a score that
falls with hallucination on validation gets the constant base rate (and a note), never a flipped orientation.
`isotonic` is scikit-learn's non-decreasing isotonic regression, clipped outside the validation range. Both maps are
monotone non-decreasing, so the ranking a detector gives, and hence its AUROC (always computed on the raw score),
cannot change; the probabilities are judged by:

    ECE   = sum over bins b of n_b / n * |mean(y in b) - mean(p in b)|   (ECE_BINS equal-width bins on [0, 1];
                                                                         p = 1 falls in the last bin)
    Brier = mean((p - y)^2)                                              (y = 1 for a hallucination)

on test, with the same stratified bootstrap resamples as every other metric, in the same cache-sized blocks
(`calibration_consumer` reads a block of `haldet.evaluation.bootstrap.one_pass` like the other metric families).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.evaluation.bootstrap import Block, Consumer, Ranked, one_pass, stratified_draws
from haldet.evaluation.metrics import MetricValue, scored_items

CALIBRATIONS = ("none", "platt", "isotonic")
CALIBRATION_METRICS = ("ece", "brier")
ECE_BINS = 10


@dataclass
class Calibrator:
    """A fitted monotone map score -> P(hallucination); `params` say what it is (recorded in the run)."""

    method: str
    params: dict[str, Any]
    note: str = ""

    def predict(self, scores: np.ndarray) -> np.ndarray:
        """Probabilities for `scores`; NaN where the score is NaN (an invalid score stays invalid)."""
        s = np.asarray(scores, dtype=np.float64)
        out = np.full(s.shape, np.nan)
        ok = np.isfinite(s)
        if self.method == "platt":
            z = (s[ok] - self.params["mean"]) / self.params["scale"]
            out[ok] = 1.0 / (1.0 + np.exp(-(self.params["slope"] * z + self.params["intercept"])))
        else:
            out[ok] = np.interp(s[ok], self.params["x"], self.params["y"])  # clipped at both ends
        return out


def fit_calibrator(method: str, scores: np.ndarray, labels: np.ndarray) -> Calibrator:
    """Fit `method` on validation scores and labels (items with a NaN score left out). ValueError when validation
    has no valid score of each class (nothing to fit on)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=int)
    ok = np.isfinite(s)
    s, y = s[ok], y[ok]
    if len(set(y.tolist())) < 2:
        raise ValueError(f"validation has {int(y.sum())} hallucinated of {len(y)} items with a valid score: "
                         f"both classes are needed to fit a {method} calibration")
    if method == "platt":
        from sklearn.linear_model import LogisticRegression

        mean, scale = float(s.mean()), float(s.std()) or 1.0
        model = LogisticRegression(C=1e6).fit(((s - mean) / scale)[:, None], y)
        slope, intercept, note = float(model.coef_[0, 0]), float(model.intercept_[0]), ""
        if slope < 0:
            rate = float(y.mean())
            slope, intercept = 0.0, float(np.log(rate / (1 - rate)))
            note = "score falls with hallucination on validation: constant base-rate probability"
        return Calibrator("platt", {"mean": mean, "scale": scale, "slope": slope, "intercept": intercept}, note)
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        model = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s, y)
        return Calibrator("isotonic", {"x": [float(v) for v in model.X_thresholds_],
                                       "y": [float(v) for v in model.y_thresholds_]})
    raise ValueError(f"unknown calibration {method!r}; known: {', '.join(CALIBRATIONS)}")


def bin_of(p: np.ndarray, bins: int = ECE_BINS) -> np.ndarray:
    return np.minimum((np.asarray(p) * bins).astype(int), bins - 1)


def calibration_on_resamples(y: np.ndarray, p: np.ndarray, idx: np.ndarray,
                             bins: int = ECE_BINS) -> dict[str, np.ndarray]:
    """ECE and Brier per row of resample indices (finite p only)."""
    y, p = np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)
    rows, n = idx.shape
    flat = (np.arange(rows)[:, None] * bins + bin_of(p, bins)[idx]).ravel()
    sum_y = np.bincount(flat, weights=y[idx].ravel(), minlength=rows * bins).reshape(rows, bins)
    sum_p = np.bincount(flat, weights=p[idx].ravel(), minlength=rows * bins).reshape(rows, bins)
    return {"ece": np.abs(sum_y - sum_p).sum(axis=1) / n, "brier": ((p[idx] - y[idx]) ** 2).mean(axis=1)}


def calibration_consumer(y: np.ndarray, p: np.ndarray, bins: int = ECE_BINS) -> Consumer:
    """ECE and Brier of a bootstrap block's resamples (the block's item indices; finite p only)."""
    def consume(block: Block) -> dict[str, np.ndarray]:
        return calibration_on_resamples(y, p, block.idx, bins)
    return consume


def reliability(y: np.ndarray, p: np.ndarray, bins: int = ECE_BINS) -> dict[str, list[Any]]:
    """The reliability diagram's bins: per bin, items, mean predicted probability and observed hallucination rate
    (None for an empty bin)."""
    y, p = np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)
    ok = np.isfinite(p)
    y, p = y[ok], p[ok]
    b = bin_of(p, bins)
    count = np.bincount(b, minlength=bins)
    mean_p = np.bincount(b, weights=p, minlength=bins)
    rate = np.bincount(b, weights=y, minlength=bins)
    return {"edges": [round(i / bins, 6) for i in range(bins + 1)], "n": count.tolist(),
            "confidence": [round(float(mean_p[i] / c), 6) if c else None for i, c in enumerate(count)],
            "observed": [round(float(rate[i] / c), 6) if c else None for i, c in enumerate(count)]}


def evaluate_calibrated(labels: np.ndarray, probabilities: np.ndarray, *, n_boot: int = 1000, ci: float = 0.95,
                        seed: int = 42, bins: int = ECE_BINS, note: str = "") -> list[MetricValue]:
    """ECE and Brier on the test items with a probability, CIs from the stratified bootstrap draws every metric
    uses (the same seed gives the same resamples)."""
    y, p, coverage, why = scored_items(labels, probabilities)
    n, n_pos = len(y), int(y.sum())
    if why:
        return [MetricValue(m, None, None, None, n, n_pos, coverage, why) for m in CALIBRATION_METRICS]
    point = calibration_on_resamples(y, p, np.arange(n)[None, :], bins)
    boots = one_pass(Ranked.of(y, p), [calibration_consumer(y, p, bins)],
                     draws=stratified_draws(y, n_boot, seed)) if n_boot > 0 else {}
    alpha = (1 - ci) / 2
    out = []
    for m in CALIBRATION_METRICS:
        lo = hi = None
        if m in boots:
            lo, hi = (float(q) for q in np.quantile(boots[m], [alpha, 1 - alpha]))
        out.append(MetricValue(m, float(point[m][0]), lo, hi, n, n_pos, coverage, note))
    return out
