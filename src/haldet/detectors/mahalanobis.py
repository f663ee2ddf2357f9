"""Mahalanobis distance (Lee et al. 2018, "A Simple Unified Framework for Detecting Out-of-Distribution Samples
and Adversarial Attacks"; applied to LLM answers' hidden states by Vazhentsev et al. 2023 and lm-polygraph): how far
an answer's pooled hidden state lies from the states of answers known to be correct.

Fit (train view only): the mean-pooled hidden state (HIDDEN_MEAN) of `layer` for every training answer judged
correct (label 0) gives the mean mu and the maximum-likelihood covariance Sigma = (1/N) sum (h - mu)(h - mu)^T.
Score: MD(h) = (h - mu)^T Sigma^+ (h - mu), Sigma^+ the pseudo-inverse over the eigen-directions whose variance
exceeds D * eps * the largest (scikit-learn's `pinvh` cut-off; with fewer answers than dimensions the covariance
is singular and a direction the training answers never vary in is not measured). Computed from the thin SVD of the
centred training matrix, so a 4,096-wide state fits in O(N^2 D).

`layer`: a hidden-state row (default -1, the last layer, as lm-polygraph's sequence-level estimator reads it) or
"val": every row is fitted and the one with the best validation AUROC is kept (validation labels only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.probe import layer_row, stack, unfitted_scores
from haldet.detectors.probe_training import MIN_TRAIN, safe_auroc
from haldet.signals import Signal, SignalView


@dataclass
class Gaussian:
    """A mean and the pseudo-inverse covariance in its principal directions (basis [D, r], variances [r])."""

    mean: np.ndarray
    basis: np.ndarray
    variance: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray) -> Gaussian:
        X = np.asarray(X, dtype=np.float64)
        mean = X.mean(axis=0)
        _, s, vt = np.linalg.svd(X - mean, full_matrices=False)
        variance = s**2 / len(X)
        keep = variance > X.shape[1] * np.finfo(np.float64).eps * (variance.max() if variance.size else 0.0)
        return cls(mean, vt[keep].T, variance[keep])

    def distance(self, X: np.ndarray) -> np.ndarray:
        """(x - mu)^T Sigma^+ (x - mu) per row of X."""
        z = (np.asarray(X, dtype=np.float64) - self.mean) @ self.basis
        return (z**2 / self.variance).sum(axis=1)


@register("mahalanobis")
class Mahalanobis(Detector):
    method_family = "internal states"
    paper = "Lee et al. 2018, A simple unified framework for detecting OOD samples; Vazhentsev et al. 2023 for LLMs"
    peers = ("lm-polygraph",)
    requires = frozenset({Signal.HIDDEN_MEAN})
    trains = True
    defaults: ClassVar[dict[str, Any]] = {"layer": -1}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        layer = self.params["layer"]
        if layer != "val" and not isinstance(layer, int):
            raise ValueError(f"detector {self.name!r}: layer must be an integer or 'val', not {layer!r}")
        self.problem: str | None = "not fitted"
        self.layer = -1
        self.fitted: dict[str, Gaussian] = {}
        self.fit_info: dict[str, Any] = {}

    # one Gaussian for the plain distance; the relative variant adds a background fitted on all train answers
    def fit_layer(self, X: np.ndarray, y: np.ndarray) -> dict[str, Gaussian]:
        return {"correct": Gaussian.fit(X[y == 0])}

    def distances(self, fitted: dict[str, Gaussian], X: np.ndarray) -> np.ndarray:
        return fitted["correct"].distance(X)

    def _features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        values = view.get(Signal.HIDDEN_MEAN)
        first = next((np.asarray(v) for v in values if v is not None), None)
        if first is None:
            return stack(values, lambda v: v)
        row = layer_row(int(first.shape[0]), layer)
        return stack(values, lambda v: np.asarray(v)[row])

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.problem, self.fitted, self.fit_info = None, {}, {}
        if train.labels is None:
            self.problem = "no labels on the training items"
            return
        first = next((np.asarray(v) for v in train.get(Signal.HIDDEN_MEAN) if v is not None), None)
        if first is None:
            self.problem = "no training item has hidden states"
            return
        layers = list(range(first.shape[0])) if self.params["layer"] == "val" else [int(self.params["layer"])]
        best: tuple[float, int, dict[str, Gaussian]] | None = None
        for layer in layers:
            X, ok, _ = self._features(train, layer)
            y = np.asarray(train.labels, dtype=np.float64)
            keep = ok & np.isfinite(y)
            n_correct = int((y[keep] == 0).sum())
            if n_correct < MIN_TRAIN:
                self.problem = f"only {n_correct} valid training answers judged correct (need at least {MIN_TRAIN})"
                return
            fitted = self.fit_layer(X[keep], y[keep].astype(int))
            if len(layers) == 1:
                best = (float("nan"), layer, fitted)
                break
            auc = float("nan")
            if val is not None and val.labels is not None:
                Xv, okv, _ = self._features(val, layer)
                auc = safe_auroc(np.asarray(val.labels)[okv], self.distances(fitted, Xv[okv]))
            if not np.isfinite(auc):
                self.problem = "layer='val' needs validation labels of both classes"
                return
            self.fit_info.setdefault("val_auroc_by_layer", {})[layer] = round(auc, 4)
            if best is None or auc > best[0]:
                best = (auc, layer, fitted)
        assert best is not None
        _, self.layer, self.fitted = best
        self.fit_info.update({"layer": self.layer, "n_correct": n_correct,
                              "rank": int(self.fitted["correct"].variance.size)})

    def score(self, items: SignalView) -> Scores:
        self.meta["fit"] = {**self.fit_info, "problem": self.problem}
        if self.problem is not None or not self.fitted:
            return unfitted_scores(len(items), self.problem or "no fitted state")
        out = Scores.empty(len(items))
        X, ok, reasons = self._features(items, self.layer)
        for i in np.flatnonzero(~ok):
            out.invalid(int(i), reasons[i])
        if ok.any():
            for i, d in zip(np.flatnonzero(ok), self.distances(self.fitted, X[ok]), strict=True):
                if np.isfinite(d):
                    out.set(int(i), float(d))
                else:
                    out.invalid(int(i), "non-finite distance")
        return out
