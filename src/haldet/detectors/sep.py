"""Semantic Entropy Probes (Kossen et al. 2024; paper appendix E.8): a linear probe on the hidden states of the
token before generation (TBG) and the second-to-last answer token (SLT), concatenated, at one layer.

Faithful (default, `variant="semantic_entropy"`): the probe predicts the model's own semantic entropy, so no
correctness labels are needed. Semantic entropy of each training item comes from the `semantic_entropy`
detector's computation on the run's samples; it is binarised at the threshold that best splits the training
values into a low and a high group (minimum total within-group squared error, the paper's "best split"), and the
score is P(high semantic entropy), oriented by the method (higher = more uncertain = more likely hallucinated).
Only sampled signals of training (and, for `layer="val"`, validation) items are used; test items need only
their SEP features.

`variant="accuracy"` (the OpenHalDet implementation, E.8): the same features and probe trained on the training
labels (1 = hallucination), score = P(hallucination).

Probe: train-fitted standardisation + logistic regression (lbfgs, max_iter 1000). Layer: an index (default -1,
the last stored layer, as the paper) or "val" (the layer whose probe best predicts the validation targets:
binarised semantic entropy for the faithful variant, labels for `accuracy`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.linear_model import LogisticRegression

from haldet.detectors.base import DETECTORS, Detector, Scores, register
from haldet.detectors.probe import layer_row, probe_scores, stack
from haldet.detectors.probe_training import Standardizer, has_both_classes, safe_auroc, training_problem
from haldet.signals import Signal, SignalView


def best_split_threshold(values: np.ndarray) -> float:
    """The threshold between two sorted neighbours that minimises the summed within-group squared error of the
    low (<= threshold) and high (> threshold) groups; NaN when fewer than two distinct values."""
    v = np.sort(np.asarray(values, dtype=np.float64)[np.isfinite(values)])
    if len(v) < 2 or v[0] == v[-1]:
        return float("nan")
    n = len(v)
    csum, csq = np.cumsum(v), np.cumsum(v * v)
    best, best_cost = float("nan"), np.inf
    for k in range(1, n):  # low = v[:k], high = v[k:]
        if v[k - 1] == v[k]:
            continue
        low_sse = csq[k - 1] - csum[k - 1] ** 2 / k
        high_sse = (csq[-1] - csq[k - 1]) - (csum[-1] - csum[k - 1]) ** 2 / (n - k)
        cost = low_sse + high_sse
        if cost < best_cost - 1e-12:
            best, best_cost = 0.5 * (v[k - 1] + v[k]), cost
    return best


def semantic_entropy_of(view: SignalView, params: dict[str, Any], parent: Detector | None = None) -> np.ndarray:
    """Semantic entropy per item from the `semantic_entropy` detector (NaN where it is invalid). The parent's
    run directory and progress factory are passed on (the NLI pair cache is shared with that detector), and what
    it reports (which NLI model ran) lands in the parent's meta."""
    if "semantic_entropy" not in DETECTORS:
        raise RuntimeError("SEP's faithful variant needs the 'semantic_entropy' detector, which is not installed; "
                           "use variant='accuracy'")
    detector = DETECTORS.get("semantic_entropy")(**params)
    if parent is not None:
        detector.workdir, detector.progress = parent.workdir, parent.progress
    detector.fit(view, None)
    values = np.asarray(detector.score(view).values, dtype=np.float64)
    if parent is not None:
        parent.meta["semantic_entropy"] = {**detector.meta, "params": detector.params}
    return values


@register("sep")
class Sep(Detector):
    method_family = "internal states"
    paper = "Kossen et al. 2024, Semantic entropy probes: robust and cheap hallucination detection in LLMs"
    peers = ()
    requires = frozenset({Signal.SEP_FEATURES, Signal.SAMPLES, Signal.SAMPLE_LOGLIKS})
    trains = True
    variants: ClassVar[dict[str, str]] = {
        "semantic_entropy": "probe predicts binarised semantic entropy (Kossen et al. 2024); labels unused",
        "accuracy": "probe predicts the hallucination label (OpenHalDet E.8)",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "variant": "semantic_entropy", "layer": -1, "max_iter": 1000, "C": 1.0, "se_params": {}, "seed": 42}
    auxiliary: ClassVar[dict[str, str]] = {"se_params.nli_model": "nli"}  # the faithful variant's NLI model

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["variant"] == "semantic_entropy" and "semantic_entropy" in DETECTORS:
            # the NLI model the targets come from is part of the key: resolved from semantic_entropy's defaults
            se_defaults = DETECTORS.get("semantic_entropy").defaults
            self.params["se_params"] = {**{k: se_defaults[k] for k in ("nli_model", "fallback", "max_length")},
                                        **self.params["se_params"]}
        self.problem: str | None = "not fitted"
        self.fit_info: dict[str, Any] = {}

    def signals(self) -> frozenset[Signal]:
        """The accuracy variant trains on labels: it reads no samples."""
        return frozenset({Signal.SEP_FEATURES}) if self.params["variant"] == "accuracy" else self.requires

    def _features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        values = view.get(Signal.SEP_FEATURES)
        first = next((np.asarray(v) for v in values if v is not None), None)
        row = layer_row(first.shape[1], layer) if first is not None else 0
        return stack(values, lambda v: np.concatenate([v[0, row], v[1, row]]))

    def _targets(self, view: SignalView, threshold: float | None) -> tuple[np.ndarray | None, float | None]:
        """Per-item targets (float, NaN = unusable) and the SE threshold used (None for labels)."""
        if self.params["variant"] == "accuracy":
            return (None if view.labels is None else np.asarray(view.labels, dtype=np.float64)), None
        se = semantic_entropy_of(view, dict(self.params["se_params"]), self)
        if threshold is None:
            threshold = best_split_threshold(se)
        y = np.where(np.isfinite(se), (se > threshold).astype(np.float64), np.nan)
        return y, threshold

    def _fit_layer(self, X: np.ndarray, y: np.ndarray) -> tuple[Standardizer, LogisticRegression]:
        scaler = Standardizer.fit(X)
        clf = LogisticRegression(solver="lbfgs", max_iter=int(self.params["max_iter"]), C=float(self.params["C"]),
                                 random_state=int(self.params["seed"]))
        clf.fit(scaler.transform(X), y.astype(int))
        return scaler, clf

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.problem, self.fit_info = None, {}
        if train.labels is not None:  # the protocol's minimum: ten items of both classes in the training split
            self.problem = training_problem(np.asarray(train.labels))
            if self.problem is not None:
                return
        y_all, threshold = self._targets(train, None)
        if y_all is None or (threshold is not None and not np.isfinite(threshold)):
            self.problem = "semantic entropy is constant or missing on the training items" if y_all is not None \
                else "no training labels"
            return
        self.fit_info.update({"targets": "binarised semantic entropy" if threshold is not None else "train labels",
                              "se_threshold": threshold})
        layer_param = self.params["layer"]
        first = next((np.asarray(v) for v in train.get(Signal.SEP_FEATURES) if v is not None), None)
        layers = list(range(first.shape[1])) if layer_param == "val" and first is not None else [
            -1 if layer_param == "val" else int(layer_param)]
        val_y = None
        if len(layers) > 1 and val is not None and len(val):
            val_y, _ = self._targets(val, threshold)
        best: tuple[float, int, Standardizer, LogisticRegression] | None = None
        for layer in layers:
            X, ok, _ = self._features(train, layer)
            keep = ok & np.isfinite(y_all)
            problem = training_problem(y_all[keep].astype(int), "training items with targets")
            if problem is not None:
                self.problem = problem
                return
            scaler, clf = self._fit_layer(X[keep], y_all[keep])
            if len(layers) == 1:
                best = (0.0, layer, scaler, clf)
                break
            if val is None or val_y is None:
                self.problem = "layer='val' needs a validation view with targets"
                return
            Xv, okv, _ = self._features(val, layer)
            kv = okv & np.isfinite(val_y)
            if not has_both_classes(val_y[kv]):
                self.problem = "layer='val': validation targets hold a single class"
                return
            auc = safe_auroc(val_y[kv].astype(int), clf.predict_proba(scaler.transform(Xv[kv]))[:, 1])
            self.fit_info.setdefault("val_auroc_by_layer", {})[layer] = round(auc, 4)
            if best is None or auc > best[0]:
                best = (auc, layer, scaler, clf)
        assert best is not None
        _, self.layer, self.scaler, self.clf = best
        self.fit_info.update({"layer": self.layer, "n_train": int(keep.sum())})

    def score(self, items: SignalView) -> Scores:
        self.meta["fit"] = {**self.fit_info, "problem": self.problem}
        return probe_scores(len(items), self.problem, lambda: self._features(items, self.layer),
                            lambda X: self.clf.predict_proba(self.scaler.transform(X))[:, 1])
