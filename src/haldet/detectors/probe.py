"""The base of the white-box probes: `ProbeDetector` (a supervised probe on one feature vector per item:
standardise on train, train an MLP, score P(hallucination), with a validation-based layer search), and what
probes share around it: the pooled hidden states a `pooling` parameter reads, feature stacking with per-item
reasons, and the scores of an unfitted probe. Choices of epoch, layer or threshold use a held-out set the caller
passes (the run's validation view); the test view is never seen here. Training itself is `probe_training`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores
from haldet.detectors.probe_training import (
    Standardizer,
    TrainedMLP,
    has_both_classes,
    internal_split,
    safe_auroc,
    training_problem,
)
from haldet.signals import Signal, SignalView

# a probe's `pooling` parameter -> the pooled hidden states it reads (`features.pooling`, `features.select_tokens`)
POOLED_SIGNALS = {"last": Signal.HIDDEN_LAST, "mean": Signal.HIDDEN_MEAN, "first_n": Signal.HIDDEN_FIRST_N,
                  "last_n": Signal.HIDDEN_LAST_N}


def pooled_signal(detector: str, pooling: str) -> Signal:
    """The signal a probe's `pooling` parameter selects; an unknown value is an error naming the choices."""
    if pooling not in POOLED_SIGNALS:
        raise ValueError(f"detector {detector!r}: pooling must be one of {', '.join(POOLED_SIGNALS)}, "
                         f"not {pooling!r}")
    return POOLED_SIGNALS[pooling]


def unfitted_scores(n: int, problem: str) -> Scores:
    """Every item invalid, with why the probe could not be fitted."""
    out = Scores.empty(n)
    for i in range(n):
        out.invalid(i, f"probe not fitted: {problem}")
    return out


def probe_scores(n: int, problem: str | None, features: Callable[[], tuple[np.ndarray, np.ndarray, list[str]]],
                 predict: Callable[[np.ndarray], np.ndarray]) -> Scores:
    """Scores of a fitted probe: every item invalid when the probe could not be fitted; otherwise `predict` on the
    items with valid features, the others invalid with their reason (and a non-finite output is invalid too)."""
    if problem is not None:
        return unfitted_scores(n, problem)
    out = Scores.empty(n)
    X, ok, reasons = features()
    for i, reason in enumerate(reasons):
        if not ok[i]:
            out.invalid(i, reason)
    if ok.any():
        for j, v in zip(np.flatnonzero(ok), predict(X[ok]), strict=True):
            if np.isfinite(v):
                out.set(int(j), float(v))
            else:
                out.invalid(int(j), "non-finite probe output")
    return out


def layer_row(n_rows: int, layer: int) -> int:
    """A layer index (negative counts from the end, as in Python) checked against the stored rows."""
    idx = layer if layer >= 0 else n_rows + layer
    if not 0 <= idx < n_rows:
        raise ValueError(f"layer {layer} is out of range for features with {n_rows} layer rows")
    return idx


def stack(values: Sequence[Any], extract: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray,
                                                                                     list[str]]:
    """Per-item signal values -> (X float64 [N, F], valid mask [N], reason per item).

    An item is invalid when its signal is missing (None) or its extracted feature has a non-finite entry.
    Invalid rows of X are zeros and must not be used.
    """
    rows: list[np.ndarray | None] = []
    reasons: list[str] = []
    for value in values:
        if value is None:
            rows.append(None)
            reasons.append("feature missing for this item")
            continue
        feat = np.asarray(extract(np.asarray(value)), dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(feat)):
            rows.append(None)
            reasons.append("non-finite feature values")
            continue
        rows.append(feat)
        reasons.append("")
    width = next((r.shape[0] for r in rows if r is not None), 0)
    X = np.zeros((len(rows), width), dtype=np.float64)
    valid = np.zeros(len(rows), dtype=bool)
    for i, r in enumerate(rows):
        if r is None:
            continue
        if r.shape[0] != width:
            reasons[i] = f"feature width {r.shape[0]} differs from {width}"
            continue
        X[i], valid[i] = r, True
    return X, valid, reasons


class ProbeDetector(Detector):
    """A supervised probe on one feature vector per item: standardise on train, train an MLP, score
    P(hallucination). Subclasses define `extract` (the item's feature at a layer) and `train_model`.

    `layer` is an int (negative from the end) or "val": then every stored layer is tried and the one with the
    best validation AUROC is kept (validation labels only). Checkpoint/early-stopping data: the validation view
    (`checkpoint_on="val"`) or an internal split of train (`"internal"`, as some papers do); when the validation
    view lacks a class, the internal split is used and recorded in `fit_info`.
    """

    trains = True
    signal: ClassVar[Signal]  # the signal whose per-item array holds the layer rows

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.problem: str | None = "not fitted"
        self.fit_info: dict[str, Any] = {}
        self.layer: int = -1
        self.scaler: Standardizer | None = None
        self.model: TrainedMLP | None = None

    # -- hooks ---------------------------------------------------------------------------------------------
    def extract(self, value: np.ndarray, layer: int) -> np.ndarray:
        raise NotImplementedError

    def train_model(self, X: np.ndarray, y: np.ndarray, val: tuple[np.ndarray, np.ndarray] | None) -> TrainedMLP:
        raise NotImplementedError

    def train_labels(self, train: SignalView) -> tuple[np.ndarray | None, str]:
        """Training targets (1 = hallucination) and where they come from."""
        return train.labels, "train labels"

    # -- shared flow ---------------------------------------------------------------------------------------
    def features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        values = view.get(self.signal)
        first = next((np.asarray(v) for v in values if v is not None), None)
        if first is None:
            return stack(values, lambda v: v)
        row = layer_row(self.n_layer_rows(first), layer)
        return stack(values, lambda v: self.extract(v, row))

    def n_layer_rows(self, value: np.ndarray) -> int:
        return int(value.shape[0])

    def candidate_layers(self, view: SignalView) -> list[int]:
        if self.params.get("layer", -1) != "val":
            return [int(self.params.get("layer", -1))]
        first = next((np.asarray(v) for v in view.get(self.signal) if v is not None), None)
        return [-1] if first is None else list(range(self.n_layer_rows(first)))

    def _checkpoint_data(self, X: np.ndarray, y: np.ndarray, val_X: np.ndarray | None,
                         val_y: np.ndarray | None
                         ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        mode = self.params.get("checkpoint_on", "val")
        if mode == "none":  # fixed epoch count, last epoch kept (the paper's setting for MIND and ICR)
            return X, y, None
        if mode not in ("val", "internal"):
            raise ValueError(f"checkpoint_on must be 'val', 'internal' or 'none', not {mode!r}")
        if mode == "val" and val_X is not None and has_both_classes(val_y):
            assert val_y is not None
            self.fit_info["checkpoint_on"] = "validation view"
            return X, y, (val_X, val_y)
        tr, held = internal_split(y, self.params.get("internal_fraction", 0.2), self.params.get("split_seed", 0))
        if mode == "val":
            self.fit_info["checkpoint_fallback"] = "validation view lacks a class"
        self.fit_info["checkpoint_on"] = f"internal {len(tr)}/{len(held)} split of train"
        return X[tr], y[tr], (X[held], y[held])

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.problem, self.fit_info = None, {}
        labels, source = self.train_labels(train)
        self.fit_info["targets"] = source
        best: tuple[float, int, Standardizer, TrainedMLP] | None = None
        layers = self.candidate_layers(train)
        for layer in layers:
            X, ok, _ = self.features(train, layer)
            y = None if labels is None else np.asarray(labels, dtype=np.float64)
            keep = ok if y is None else ok & np.isfinite(y)
            problem = training_problem(None if y is None else y[keep].astype(int))
            if problem is not None:
                self.problem = problem
                return
            assert y is not None
            Xtr, ytr = X[keep], y[keep].astype(int)
            scaler = Standardizer.fit(Xtr) if self.params.get("standardize", True) else \
                Standardizer(np.zeros(Xtr.shape[1]), np.ones(Xtr.shape[1]))
            val_X = val_y = None
            if val is not None and val.labels is not None and len(val):
                Xv, okv, _ = self.features(val, layer)
                val_X, val_y = scaler.transform(Xv[okv]), np.asarray(val.labels)[okv].astype(int)
            fit_X, fit_y, held = self._checkpoint_data(scaler.transform(Xtr), ytr, val_X, val_y)
            if training_problem(fit_y) is not None:  # internal split left too little: train on all of train
                fit_X, fit_y = scaler.transform(Xtr), ytr
            model = self.train_model(fit_X, fit_y, held)
            if len(layers) == 1:
                best = (0.0, layer, scaler, model)
                break
            if val_X is None or not has_both_classes(val_y):
                self.problem = "layer='val' needs validation labels of both classes"
                return
            assert val_y is not None
            auc = safe_auroc(val_y, model.predict(val_X, self.params.get("device", "auto")))
            self.fit_info.setdefault("val_auroc_by_layer", {})[layer] = round(auc, 4)
            if best is None or auc > best[0]:
                best = (auc, layer, scaler, model)
        assert best is not None
        _, self.layer, self.scaler, self.model = best
        self.fit_info.update({"layer": self.layer, "n_train": len(ytr), **self.model.info})

    def score(self, items: SignalView) -> Scores:
        self.meta["fit"] = {**self.fit_info, "problem": self.problem}
        model, scaler = self.model, self.scaler
        if model is None or scaler is None:
            return unfitted_scores(len(items), self.problem or "no fitted state")
        return probe_scores(len(items), self.problem, lambda: self.features(items, self.layer),
                            lambda X: model.predict(scaler.transform(X), self.params.get("device", "auto")))
