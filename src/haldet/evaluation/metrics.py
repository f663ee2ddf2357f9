"""Detection metrics with stratified bootstrap CIs. Positive class = hallucination (label 1).

Scores are used exactly as the detector oriented them: an AUROC below 0.5 stays below 0.5 (the OpenHalDet paper's
label-oriented convention is only the separate, never-ranked `auroc_max_orientation` row).

Point values come from scikit-learn. The 1,000-resample bootstrap is vectorised: scores are binned once into their
distinct values, each resample becomes per-bin counts of positives and negatives, and AUROC (Mann-Whitney with
half credit for ties), average precision and FPR@95TPR are computed from the counts with the same tie and
threshold rules as scikit-learn (`tests/test_metrics_fast.py` checks equality on tied data).

Beside them, every evaluation reports the rejection metrics of `haldet.evaluation.rejection` (PRR over the full range
and up to 50% rejection, the rejection curve's area and the area under the risk-coverage curve) on the same
resamples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from haldet.evaluation.rejection import REJECTION_METRICS, rejection_metrics

DETECTION_METRICS = ("auroc", "aupr", "fpr95")
METRICS = DETECTION_METRICS + REJECTION_METRICS  # every row `evaluate` gives
TPR_TARGET = 0.95
_BLOCK = 128  # resamples per vectorised block at most
_BLOCK_CELLS = 1 << 17  # resamples x distinct scores per block: keeps a block's arrays in cache, so large test
# sets cost time in proportion to their size (a fixed 128-row block of 60,000 scores is 8x the cache, and cost
# 1.3x per item what 6,000 scores did)


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    return float(roc_auc_score(y, s))


def aupr(y: np.ndarray, s: np.ndarray) -> float:
    return float(average_precision_score(y, s))


def fpr_at_95_tpr(y: np.ndarray, s: np.ndarray) -> float:
    """False-positive rate at the first threshold where the true-positive rate reaches 95%."""
    fpr, tpr, _ = roc_curve(y, s)
    return float(fpr[np.searchsorted(tpr, TPR_TARGET, side="left")])


def _rejection_func(metric: str) -> Callable[[np.ndarray, np.ndarray], float]:
    def value(y: np.ndarray, s: np.ndarray) -> float:
        return float(rejection_metrics(y, s, np.arange(len(y))[None, :], (metric,))[metric][0])
    return value


METRIC_FUNCS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "auroc": auroc,
    "aupr": aupr,
    "fpr95": fpr_at_95_tpr,
    **{m: _rejection_func(m) for m in REJECTION_METRICS},
}


# max(AUROC, 1 - AUROC): the score oriented on the test labels, as every AUROC of the OpenHalDet paper's Table 9 is
# (all >= 50). Shown beside the honest AUROC only when asked (`report.max_orientation`); it is not a detector score
# (it uses the test labels), so rankings, bests and aggregates refuse it.
MAX_ORIENTATION = "auroc_max_orientation"
MAX_ORIENTATION_NOTE = "oriented on test labels, as the paper's tables; not a valid detector score"


def max_orientation_row(row: dict[str, Any]) -> dict[str, Any]:
    """The `auroc_max_orientation` row beside an honest AUROC row: max(AUROC, 1 - AUROC), without a CI."""
    value = row.get("value")
    return {**row, "metric": MAX_ORIENTATION, "value": None if value is None else max(value, 1.0 - value),
            "ci_low": None, "ci_high": None, "note": MAX_ORIENTATION_NOTE}


def refuse_max_orientation(metric: str) -> None:
    """Rankings, bests and aggregates of the honest metrics never take the oriented AUROC."""
    if metric == MAX_ORIENTATION:
        raise ValueError(f"{MAX_ORIENTATION} ({MAX_ORIENTATION_NOTE}) is never ranked, bolded or aggregated")


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


def stratified_indices(y: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n] resampled indices: positives and negatives drawn with replacement separately, so every
    resample keeps the class counts (the draw order is that of the original per-resample loop).

    Every detector of a cell is evaluated on the same test labels: the draws are made once per (labels, n_boot,
    seed) in a process and returned read-only."""
    y = np.asarray(y)
    memo = (y.dtype.str, y.tobytes(), n_boot, seed)
    if memo not in _INDICES:
        if len(_INDICES) >= 16:
            _INDICES.clear()
        _INDICES[memo] = out = _draw_indices(y, n_boot, seed)
        out.setflags(write=False)
    return _INDICES[memo]


_INDICES: dict[tuple[str, bytes, int, int], np.ndarray] = {}


def _draw_indices(y: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    out = np.empty((n_boot, len(pos) + len(neg)), dtype=np.int64)
    for b in range(n_boot):
        out[b, : len(pos)] = rng.choice(pos, len(pos))
        out[b, len(pos) :] = rng.choice(neg, len(neg))
    return out


def _bin_counts(y: np.ndarray, inv: np.ndarray, n_bins: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per resample (rows of idx) and per distinct score (`inv`: each item's rank among them, ascending), counts
    of positives and negatives: one bincount over (row, class, bin), kept as whole numbers (exact in every sum the
    metrics take)."""
    cls = (np.asarray(y)[idx] == 1).astype(np.int64)
    flat = (np.arange(idx.shape[0], dtype=np.int64)[:, None] * 2 + cls) * n_bins + inv[idx]
    counts = np.bincount(flat.ravel(), minlength=idx.shape[0] * 2 * n_bins).reshape(idx.shape[0], 2, n_bins)
    return counts[:, 1], counts[:, 0]


def auroc_counts(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUROC per row: P(score_pos > score_neg) + 0.5 P(tie), equal to sklearn's trapezoid area."""
    n_pos, n_neg = cp.sum(axis=1), cn.sum(axis=1)
    below = np.cumsum(cn, axis=1) - cn
    return (cp * (below + 0.5 * cn)).sum(axis=1) / (n_pos * n_neg)


def aupr_counts(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    """Average precision per row: sum over descending distinct thresholds of recall gain x precision."""
    cp_d, cn_d = cp[:, ::-1], cn[:, ::-1]
    tp, fp = np.cumsum(cp_d, axis=1), np.cumsum(cn_d, axis=1)
    denom = tp + fp
    precision = np.divide(tp, denom, out=np.zeros(tp.shape), where=denom > 0)
    return (cp_d * precision).sum(axis=1) / cp.sum(axis=1)


def _fpr95_rows(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    """FPR@95TPR per row as sklearn's roc_curve gives it, for all rows at once: each row's present bins moved to
    the front (descending scores), cumulative counts, collinear points dropped before the origin is prepended
    (endpoints kept), then the FPR (fps / fps[-1]) of the first kept point whose TPR (tps / tps[-1]) reaches the
    target. Counts are whole numbers, so the divisions are sklearn's own: the values are equal, not close."""
    rows = np.arange(cp.shape[0])[:, None]
    cp_d, cn_d = cp[:, ::-1], cn[:, ::-1]
    present = (cp_d + cn_d) > 0
    order = np.argsort(~present, axis=1, kind="stable")  # present bins first, in descending-score order
    m = present.sum(axis=1)  # points per row
    tps, fps = np.cumsum(cp_d[rows, order], axis=1), np.cumsum(cn_d[rows, order], axis=1)
    col = np.arange(cp.shape[1])[None, :]
    last = (m - 1)[:, None]
    bend = np.zeros(cp.shape, dtype=bool)  # interior point where the curve changes direction
    bend[:, 1:-1] = np.logical_or(np.diff(fps, 2, axis=1), np.diff(tps, 2, axis=1))
    keep = (col <= last) & ((col == 0) | (col == last) | bend | (m[:, None] <= 2))
    tpr = tps / np.take_along_axis(tps, last, axis=1)
    first = np.argmax(keep & (tpr >= TPR_TARGET), axis=1)[:, None]
    return (np.take_along_axis(fps, first, axis=1) / np.take_along_axis(fps, last, axis=1))[:, 0]


def metrics_on_resamples(y: np.ndarray, s: np.ndarray, idx: np.ndarray,
                         metrics: tuple[str, ...] = METRICS) -> dict[str, np.ndarray]:
    """Each metric on each resample (rows of `idx`, every row holding both classes), in blocks."""
    out: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
    rejection = tuple(m for m in metrics if m in REJECTION_METRICS)
    _, inv = np.unique(s, return_inverse=True)
    n_bins = int(inv.max()) + 1 if len(inv) else 1
    block = max(1, min(_BLOCK, _BLOCK_CELLS // n_bins))
    for start in range(0, idx.shape[0], block):
        if rejection:
            for m, v in rejection_metrics(y, s, idx[start : start + block], rejection).items():
                out[m].append(v)
        cp, cn = _bin_counts(y, inv, n_bins, idx[start : start + block])
        if "auroc" in out:
            out["auroc"].append(auroc_counts(cp, cn))
        if "aupr" in out:
            out["aupr"].append(aupr_counts(cp, cn))
        if "fpr95" in out:
            out["fpr95"].append(_fpr95_rows(cp, cn))
    return {m: np.concatenate(v) if v else np.empty(0) for m, v in out.items()}


def scored_items(labels: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, str]:
    """The labels and values of the items with a finite value, the share of items that have one (coverage), and why
    no metric is defined on them ('' when one is: both classes present)."""
    labels = np.asarray(labels, dtype=int)
    values = np.asarray(values, dtype=np.float64)
    valid = np.isfinite(values)
    coverage = float(valid.mean()) if len(values) else 0.0
    y, v = labels[valid], values[valid]
    n, n_pos = len(y), int(y.sum())
    why = ("no test item has a valid score" if n == 0 else
           f"test items with a valid score are all one class ({n_pos} positive of {n})" if n_pos in (0, n) else "")
    return y, v, coverage, why


def evaluate(labels: np.ndarray, scores: np.ndarray, *, n_boot: int = 1000, ci: float = 0.95,
             seed: int = 42) -> list[MetricValue]:
    """All metrics on the items with a finite score; CIs from a stratified bootstrap (positives and negatives
    resampled separately, so every resample has both classes)."""
    y, s, coverage, why = scored_items(labels, scores)
    n, n_pos = len(y), int(y.sum())
    if why:
        return [MetricValue(m, None, None, None, n, n_pos, coverage, why) for m in METRICS]
    point = {m: f(y, s) for m, f in METRIC_FUNCS.items()}
    boots: dict[str, np.ndarray] = {}
    if n_boot > 0:
        boots = metrics_on_resamples(y, s, stratified_indices(y, n_boot, seed))
    alpha = (1 - ci) / 2
    out = []
    for m in METRICS:
        lo = hi = None
        if m in boots and len(boots[m]):
            lo, hi = (float(q) for q in np.quantile(boots[m], [alpha, 1 - alpha]))
        out.append(MetricValue(m, point[m], lo, hi, n, n_pos, coverage))
    return out
