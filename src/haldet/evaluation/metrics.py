"""Detection metrics with stratified bootstrap CIs. Positive class = hallucination (label 1).

Scores are used exactly as the detector oriented them: an AUROC below 0.5 stays below 0.5.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

METRICS = ("auroc", "aupr", "fpr95")


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    return float(roc_auc_score(y, s))


def aupr(y: np.ndarray, s: np.ndarray) -> float:
    return float(average_precision_score(y, s))


def fpr_at_95_tpr(y: np.ndarray, s: np.ndarray) -> float:
    """False-positive rate at the first threshold where the true-positive rate reaches 95%."""
    fpr, tpr, _ = roc_curve(y, s)
    return float(fpr[np.searchsorted(tpr, 0.95, side="left")])


METRIC_FUNCS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "auroc": auroc,
    "aupr": aupr,
    "fpr95": fpr_at_95_tpr,
}


@dataclass
class MetricValue:
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int           # test items with a valid score (both classes)
    n_pos: int
    coverage: float  # share of test items with a valid score
    note: str = ""


def evaluate(labels: np.ndarray, scores: np.ndarray, *, n_boot: int = 1000, ci: float = 0.95,
             seed: int = 42) -> list[MetricValue]:
    """All metrics on the items with a finite score; CIs from a stratified bootstrap (positives and negatives
    resampled separately, so every resample has both classes)."""
    labels = np.asarray(labels, dtype=int)
    scores = np.asarray(scores, dtype=np.float64)
    valid = np.isfinite(scores)
    coverage = float(valid.mean()) if len(scores) else 0.0
    y, s = labels[valid], scores[valid]
    n, n_pos = int(len(y)), int(y.sum())
    if n_pos == 0 or n_pos == n:
        note = ("no test item has a valid score" if n == 0 else
                f"test items with a valid score are all one class ({n_pos} positive of {n})")
        return [MetricValue(m, None, None, None, n, n_pos, coverage, note) for m in METRICS]
    point = {m: f(y, s) for m, f in METRIC_FUNCS.items()}
    boots: dict[str, list[float]] = {m: [] for m in METRICS}
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        for _ in range(n_boot):
            idx = np.concatenate([rng.choice(pos, len(pos)), rng.choice(neg, len(neg))])
            for m, f in METRIC_FUNCS.items():
                boots[m].append(f(y[idx], s[idx]))
    alpha = (1 - ci) / 2
    out = []
    for m in METRICS:
        lo = hi = None
        if boots[m]:
            lo, hi = (float(q) for q in np.quantile(boots[m], [alpha, 1 - alpha]))
        out.append(MetricValue(m, point[m], lo, hi, n, n_pos, coverage))
    return out
