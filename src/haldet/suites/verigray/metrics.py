"""VeriGray's evaluation protocols (paper section 5.2) on sentence grades 0..6 (`labels`).

Conventions: a detector's `score` is oriented like every haldet score (higher = more likely unfaithful); a
binary prediction is 1 = Unfaithful. Invalid (NaN) scores are left out and counted in `coverage`.

- Protocol 1: sentences graded Not Sure or No-Fact are dropped; gold Unfaithful = {Contradicting, Fabricated},
  Faithful = {Implicitly-, Explicitly-Supported}. Balanced accuracy and the Unfaithful class's precision, recall
  and F1 of binary predictions; AUROC/AUPR of continuous scores.
- Protocol 2, ranking loss (Eq. 1): over all pairs whose gold grades differ, the share the detector ranks
  backwards (the more faithful sentence gets the higher score) plus half the ties. A constant predictor scores
  exactly 0.5. With binary predictions every pair inside one side is a tie, so even a perfect binary predictor
  has a loss above 0: `best_binary_ranking_loss` is that floor (the best cut of the grade order).
- Zero-shot 7-way classifiers: per-class F1 and selective prediction (coverage and selective risk when the
  predicted class is at least Out-Dependent, Implicitly- or Explicitly-Supported).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, precision_recall_fscore_support

from haldet.evaluation.metrics import aupr, auroc
from haldet.evaluation.rejection import risk_coverage
from haldet.suites.verigray.labels import CLASSES, EXPLICIT, FAITHFUL, IMPLICIT, OUT_DEPENDENT, UNFAITHFUL

SELECTIVE_THRESHOLDS = (OUT_DEPENDENT, IMPLICIT, EXPLICIT)
FLOAT = np.float64


def protocol1_mask(grades: np.ndarray) -> np.ndarray:
    """Sentences that enter protocol 1 (gold Faithful or Unfaithful)."""
    grades = np.asarray(grades)
    return np.isin(grades, sorted(UNFAITHFUL | FAITHFUL))


def gold_unfaithful(grades: np.ndarray) -> np.ndarray:
    return np.isin(np.asarray(grades), sorted(UNFAITHFUL)).astype(int)


def binary_metrics(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Balanced accuracy and Unfaithful-class precision/recall/F1 (NaN where undefined, e.g. no predicted
    positive gives no precision)."""
    y, pred = np.asarray(y, dtype=int), np.asarray(pred, dtype=int)
    if len(y) == 0 or len(set(y.tolist())) < 2:
        return {"bacc": np.nan, "precision": np.nan, "recall": np.nan, "f1": np.nan}
    p, r, f, _ = precision_recall_fscore_support(y, pred, labels=[1], zero_division=np.nan)
    return {"bacc": float(balanced_accuracy_score(y, pred)), "precision": float(p[0]), "recall": float(r[0]),
            "f1": float(f[0])}


def binary_rates(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """`binary_metrics` from confusion counts with numpy (the bootstrap's fast path; equal values, tested)."""
    y, pred = np.asarray(y, dtype=int), np.asarray(pred, dtype=int)
    tp = float(np.sum((pred == 1) & (y == 1)))
    fp = float(np.sum((pred == 1) & (y == 0)))
    fn = float(np.sum((pred == 0) & (y == 1)))
    tn = float(np.sum((pred == 0) & (y == 0)))
    if tp + fn == 0 or tn + fp == 0:
        return {"bacc": np.nan, "precision": np.nan, "recall": np.nan, "f1": np.nan}
    recall = tp / (tp + fn)
    precision = tp / (tp + fp) if tp + fp else np.nan
    f1 = 2 * tp / (2 * tp + fp + fn)
    return {"bacc": (recall + tn / (tn + fp)) / 2, "precision": precision, "recall": recall, "f1": f1}


def protocol1(grades: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Protocol 1 on binary predictions (1 = Unfaithful; NaN = no prediction, left out)."""
    grades, pred = np.asarray(grades), np.asarray(pred, dtype=FLOAT)
    keep = protocol1_mask(grades)
    valid = keep & np.isfinite(pred)
    out = binary_metrics(gold_unfaithful(grades[valid]), pred[valid].astype(int))
    return out | {"n": int(valid.sum()), "n_pos": int(gold_unfaithful(grades[valid]).sum()),
                  "coverage": float(valid.sum() / keep.sum()) if keep.any() else np.nan}


def protocol1_scores(grades: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """AUROC and AUPR of continuous scores on the protocol-1 sentences."""
    grades, scores = np.asarray(grades), np.asarray(scores, dtype=FLOAT)
    keep = protocol1_mask(grades) & np.isfinite(scores)
    y = gold_unfaithful(grades[keep])
    if len(set(y.tolist())) < 2:
        return {"auroc": np.nan, "aupr": np.nan}
    return {"auroc": auroc(y, scores[keep]), "aupr": aupr(y, scores[keep])}


def ranking_loss(grades: np.ndarray, scores: np.ndarray) -> float:
    """Eq. 1 with haldet's orientation: over pairs (i, j) with grade_i > grade_j (i more faithful), the share
    with score_i > score_j (backwards) plus half the share with score_i == score_j. NaN scores are left out;
    NaN when no pair has different grades. Counted per grade pair with sorted searches (n log n)."""
    grades, scores = np.asarray(grades), np.asarray(scores, dtype=FLOAT)
    keep = np.isfinite(scores)
    grades, scores = grades[keep], scores[keep]
    levels = sorted(set(grades.tolist()))
    by_level = {g: np.sort(scores[grades == g]) for g in levels}
    wrong = ties = pairs = 0.0
    for a, low in enumerate(levels):
        below = by_level[low]
        for high in levels[a + 1 :]:
            above = scores[grades == high]
            less = np.searchsorted(below, above, side="left")      # lower-grade sentences scored below: wrong
            tied = np.searchsorted(below, above, side="right") - less
            wrong += float(less.sum())
            ties += float(tied.sum())
            pairs += float(len(above) * len(below))
    return (wrong + 0.5 * ties) / pairs if pairs else np.nan


def best_binary_ranking_loss(grades: np.ndarray) -> tuple[float, int]:
    """The lowest ranking loss any binary predictor can reach on these grades, and the grade from which its
    best cut calls sentences Faithful (every cut of the grade order is tried; an optimal binary predictor is a
    cut, since swapping a backwards pair's predictions never raises the loss)."""
    grades = np.asarray(grades)
    best, best_cut = np.inf, -1
    for cut in sorted(set(grades.tolist()))[1:]:
        loss = ranking_loss(grades, (grades < cut).astype(FLOAT))
        if loss < best:
            best, best_cut = loss, int(cut)
    return (float(best), best_cut) if best_cut >= 0 else (np.nan, -1)


def per_class_f1(grades: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """F1 of each of the 7 classes for a 7-way classifier (predicted grade, NaN = unparsable reply, counted
    as wrong for every class since the sentence was not classified). NaN for a class absent from both."""
    grades = np.asarray(grades, dtype=int)
    predicted = np.asarray(predicted, dtype=FLOAT)
    pred = np.where(np.isfinite(predicted), predicted, -1).astype(int)
    _, _, f, _ = precision_recall_fscore_support(grades, pred, labels=list(range(len(CLASSES))),
                                                 zero_division=np.nan)
    return {name: float(v) for name, v in zip(CLASSES, f, strict=True)}


def selective_prediction(grades: np.ndarray, predicted: np.ndarray,
                         thresholds: tuple[int, ...] = SELECTIVE_THRESHOLDS) -> list[dict[str, Any]]:
    """Per threshold t: coverage = share of sentences whose predicted grade is >= t (an unparsable reply is
    never selected), selective risk = share of those selected whose gold class is Unfaithful. These are points of
    the risk-coverage curve (`haldet.evaluation.rejection`) of the predicted grade (more faithful kept first)."""
    grades = np.asarray(grades, dtype=int)
    predicted = np.asarray(predicted, dtype=FLOAT)
    curve = risk_coverage(gold_unfaithful(grades), -predicted)  # an unparsable reply (NaN) is rejected first
    out = []
    for t in thresholds:
        n = int((np.isfinite(predicted) & (np.nan_to_num(predicted, nan=-1) >= t)).sum())
        out.append({"threshold": CLASSES[t], "grade": t, "coverage": n / len(grades) if len(grades) else np.nan,
                    "risk": curve.at(n), "n": n})
    return out


def choose_threshold(grades: np.ndarray, scores: np.ndarray) -> float:
    """The score threshold (predict Unfaithful when score >= threshold) with the best protocol-1 balanced
    accuracy on the given (validation) sentences; the lowest such threshold on ties. NaN when validation has
    no protocol-1 sentence of each class."""
    grades, scores = np.asarray(grades), np.asarray(scores, dtype=FLOAT)
    keep = protocol1_mask(grades) & np.isfinite(scores)
    y, s = gold_unfaithful(grades[keep]), scores[keep]
    if len(set(y.tolist())) < 2:
        return np.nan
    candidates = np.unique(s)
    pos, neg = y == 1, y == 0
    tpr = (s[pos][None, :] >= candidates[:, None]).mean(axis=1)
    tnr = (s[neg][None, :] < candidates[:, None]).mean(axis=1)
    return float(candidates[int(np.argmax((tpr + tnr) / 2))])
