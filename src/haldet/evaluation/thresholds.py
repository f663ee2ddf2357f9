"""Thresholded detection metrics: a continuous score becomes a yes/no prediction at a threshold.

The protocol: a threshold is chosen on validation and applied to test. The papers' "best F1 on the test set"
convention is available only as an explicitly labelled variant (`tune_on="test"` in the callers' rows).

Prediction rule: an item is predicted positive (hallucinated) when its score is >= the threshold. NaN scores are
never predictions: callers pass finite scores only and report coverage separately.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Confusion:
    """Counts of a binary prediction against binary labels (positive = hallucination)."""

    tp: int
    fp: int
    fn: int
    tn: int

    @classmethod
    def of(cls, y: np.ndarray, pred: np.ndarray) -> Confusion:
        y, pred = np.asarray(y, dtype=bool), np.asarray(pred, dtype=bool)
        return cls(tp=int((y & pred).sum()), fp=int((~y & pred).sum()), fn=int((y & ~pred).sum()),
                   tn=int((~y & ~pred).sum()))

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float | None:
        """None when nothing is predicted positive (undefined, never silently 0)."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        """2TP / (2TP + FP + FN); 0 when there are positives but none is found, None with no positive at all."""
        denom = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denom if denom else None

    @property
    def accuracy(self) -> float | None:
        return (self.tp + self.tn) / self.n if self.n else None

    @property
    def balanced_accuracy(self) -> float | None:
        """Mean of the recalls of both classes; None unless both classes are present."""
        if not (self.tp + self.fn and self.tn + self.fp):
            return None
        return 0.5 * (self.tp / (self.tp + self.fn) + self.tn / (self.tn + self.fp))

    def metrics(self) -> dict[str, float | int | None]:
        return {**asdict(self), "n": self.n, "f1": self.f1, "precision": self.precision, "recall": self.recall,
                "accuracy": self.accuracy, "balanced_accuracy": self.balanced_accuracy}


def best_f1_threshold(y: np.ndarray, s: np.ndarray) -> float | None:
    """The score threshold (predict positive when score >= t) with the highest F1 on (y, s).

    Candidates are the distinct finite scores; ties in F1 go to the highest threshold (fewest positive
    predictions). None when there is no positive label or no finite score (no threshold can be chosen).
    """
    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=np.float64)
    keep = np.isfinite(s)
    y, s = y[keep], s[keep]
    if not len(s) or not y.sum():
        return None
    order = np.argsort(-s, kind="stable")
    s_desc, y_desc = s[order], y[order]
    tp = np.cumsum(y_desc)
    fp = np.cumsum(1 - y_desc)
    last_of_value = np.r_[s_desc[1:] != s_desc[:-1], True]  # threshold = value: every item >= it is positive
    tp, fp, values = tp[last_of_value], fp[last_of_value], s_desc[last_of_value]
    f1 = 2 * tp / (2 * tp + fp + (y.sum() - tp))
    return float(values[int(np.argmax(f1))])  # values descend: argmax's first hit is the highest threshold


def predict(s: np.ndarray, threshold: float) -> np.ndarray:
    return np.asarray(s, dtype=np.float64) >= threshold


def at_threshold(y: np.ndarray, s: np.ndarray, threshold: float) -> Confusion:
    """The confusion of finite scores thresholded at `threshold` (NaN scores left out: report coverage)."""
    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=np.float64)
    keep = np.isfinite(s)
    return Confusion.of(y[keep], predict(s[keep], threshold))
