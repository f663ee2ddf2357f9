"""Detection metrics with stratified bootstrap CIs. Positive class = hallucination (label 1).

Scores are used exactly as the detector oriented them: an AUROC below 0.5 stays below 0.5 (the OpenHalDet paper's
label-oriented convention is only the separate, never-ranked `auroc_max_orientation` row).

Point values come from scikit-learn. The 1,000-resample bootstrap is vectorised: scores are binned once into their
distinct values, each resample becomes per-bin counts of positives and negatives, and AUROC (Mann-Whitney with
half credit for ties), average precision and FPR@95TPR are computed from the counts with the same tie and
threshold rules as scikit-learn (`tests/evaluation/test_metrics_fast.py` checks equality on tied data).

Beside them, every evaluation reports the rejection metrics of `haldet.evaluation.rejection` (PRR over the full range
and up to 50% rejection, the rejection curve's area and the area under the risk-coverage curve) on the same
resamples. All of them are read in one pass over each block of resamples (`haldet.evaluation.bootstrap`), the
scores ranked once per detector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from haldet.evaluation.bootstrap import Block, Consumer, Draws, Ranked, one_pass, stratified_draws
from haldet.evaluation.rejection import REJECTION_METRICS, rejection_consumer, rejection_metrics

DETECTION_METRICS = ("auroc", "aupr", "fpr95")
METRICS = DETECTION_METRICS + REJECTION_METRICS  # every row `evaluate` gives
TPR_TARGET = 0.95


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

    The draws are made once per (labels, n_boot, seed) in a process (`haldet.evaluation.bootstrap.stratified_draws`,
    kept compact); this full int64 form is made from them on first use and returned read-only."""
    return stratified_draws(y, n_boot, seed).indices


def auroc_counts(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUROC per row: P(score_pos > score_neg) + 0.5 P(tie), equal to sklearn's trapezoid area."""
    n_pos, n_neg = cp.sum(axis=1), cn.sum(axis=1)
    below = np.cumsum(cn, axis=1) - cn
    return (cp * (below + 0.5 * cn)).sum(axis=1) / (n_pos * n_neg)


def _aupr_descending(cp_d: np.ndarray, tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    precision = tp / np.maximum(tp + fp, 1)  # 0 before the first threshold (tp = fp = 0)
    return (cp_d.astype(np.float64) * precision).sum(axis=1) / tp[:, -1]


def aupr_counts(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    """Average precision per row: sum over descending distinct thresholds of recall gain x precision."""
    cp_d, cn_d = cp[:, ::-1], cn[:, ::-1]
    return _aupr_descending(cp_d, np.cumsum(cp_d, axis=1), np.cumsum(cn_d, axis=1))


_EXACT = float(1 << 50)  # below this, sums of half-integers in floating point are exact


def _auroc_descending(cp_d: np.ndarray, cn_d: np.ndarray, fps: np.ndarray) -> np.ndarray:
    """`auroc_counts` from descending counts: the negatives below a rank are all negatives less those at or above
    it. Each term cp * (below + cn / 2) is a half-integer, so while n_pos * n_neg stays below 2^50 every partial sum
    `auroc_counts` takes in floating point is exact, and the whole-number sum of twice the terms, halved, is the
    same value; larger counts take the floating-point sum in ascending score order, as `auroc_counts` does."""
    n_pos, n_neg = cp_d.sum(axis=1), fps[:, -1]
    twice = cp_d * (2 * (n_neg[:, None] - fps) + cn_d)
    if float(n_pos.max(initial=0)) * float(n_neg.max(initial=0)) < _EXACT:
        return (twice.sum(axis=1) / 2) / (n_pos * n_neg)
    return (twice[:, ::-1] * 0.5).sum(axis=1) / (n_pos * n_neg)


def _auroc_gathered(block: Block) -> np.ndarray | None:
    """AUROC alone (the paired comparisons): each drawn positive reads its rank's 2 x negatives below + ties from
    the negatives' counts, no count of positives per rank is made; the whole-number sum is `_auroc_descending`'s
    exact one. None where that sum would not be exact or the draws are not stratified."""
    ranks = block.positive_ranks
    if ranks is None:
        return None
    n_pos = ranks.shape[1]
    cn_d = block.negatives_desc
    fps = np.cumsum(cn_d, axis=1)
    n_neg = fps[:, -1]
    if float(n_pos) * float(n_neg.max(initial=0)) >= _EXACT:
        return None
    twice = (2 * (n_neg[:, None] - fps) + cn_d).ravel().take(ranks).sum(axis=1)
    return (twice / 2) / (n_pos * n_neg)


def _tpr_count(n_pos: np.ndarray) -> np.ndarray:
    """Per row, the fewest true positives t with t / n_pos >= TPR_TARGET in floating point (sklearn's test)."""
    t = np.maximum(np.floor(TPR_TARGET * n_pos).astype(np.int64) - 1, 0)
    while (low := t / n_pos < TPR_TARGET).any():
        t = t + low
    return t


def _fpr95_flat(cp_d: np.ndarray, cn_d: np.ndarray, tps: np.ndarray, fps: np.ndarray) -> np.ndarray:
    """FPR@95TPR per row as sklearn's roc_curve gives it. Its points are the distinct scores present in a row
    (descending); an interior point is dropped when the next point moves the curve in the same direction (equal
    counts of positives and negatives), the first and last are kept; the answer is the FPR (fps / fps[-1]) of the
    first kept point whose TPR (tps / tps[-1]) reaches the target. The points of all rows are listed once, flat,
    so no row is sorted. Counts are whole numbers, so the divisions are sklearn's own: the values are equal."""
    rows, nb = cp_d.shape
    a, b = np.ascontiguousarray(cp_d).ravel(), np.ascontiguousarray(cn_d).ravel()
    flat = np.flatnonzero((a + b) > 0)  # every row's points, rows in order, descending scores within
    row = flat // nb
    start = np.searchsorted(row, np.arange(rows))
    end = np.append(start[1:], len(flat)) - 1
    pa, pb = a[flat], b[flat]
    kept = np.ones(len(flat), dtype=bool)
    kept[:-1] = (pa[:-1] != pa[1:]) | (pb[:-1] != pb[1:])
    kept[start], kept[end] = True, True
    tps_f, fps_f = tps.ravel(), fps.ravel()
    hit = np.flatnonzero(kept & (tps_f[flat] >= _tpr_count(tps[:, -1])[row]))
    first = hit[np.searchsorted(row[hit], np.arange(rows))]
    return fps_f[flat[first]] / fps[:, -1]


_WINDOW = 16  # ranks looked at after the first one reaching the target TPR


def _fpr95_descending(cp_d: np.ndarray, cn_d: np.ndarray, tps: np.ndarray, fps: np.ndarray) -> np.ndarray:
    """`_fpr95_flat`, looking only at the few ranks from the first one reaching the target: that rank is a point
    (its positives reach the count), and the answer is the first kept point from there, almost always within a
    handful of ranks. Rows where the window does not decide go through `_fpr95_flat`."""
    rows, nb = cp_d.shape
    j0 = (tps < _tpr_count(tps[:, -1])[:, None]).sum(axis=1)  # first rank reaching the target
    cols = j0[:, None] + np.arange(_WINDOW)[None, :]
    inside = cols < nb
    cols = np.minimum(cols, nb - 1)
    r = np.arange(rows)[:, None]
    a, b = np.where(inside, cp_d[r, cols], 0), np.where(inside, cn_d[r, cols], 0)
    present = (a + b) > 0
    at = np.where(present, np.arange(_WINDOW)[None, :], _WINDOW)
    after = np.minimum.accumulate(at[:, ::-1], axis=1)[:, ::-1]  # first point at or after each column
    nxt = np.concatenate([after[:, 1:], np.full((rows, 1), _WINDOW)], axis=1)  # next point after each column
    nxt_c = np.minimum(nxt, _WINDOW - 1)
    has_next = nxt < _WINDOW
    differs = (a != np.take_along_axis(a, nxt_c, axis=1)) | (b != np.take_along_axis(b, nxt_c, axis=1))
    row_end = (j0 + _WINDOW >= nb)[:, None]  # the window reaches the row's end: no next point means last point
    first_point = (j0 == 0) | (tps[r[:, 0], np.maximum(j0 - 1, 0)] + fps[r[:, 0], np.maximum(j0 - 1, 0)] == 0)
    kept = present & ((has_next & differs) | (~has_next & row_end))
    kept[:, 0] |= first_point  # j0 is always a point
    undecided = present & ~has_next & ~row_end
    k = np.argmax(kept | undecided, axis=1)
    out = fps[r[:, 0], np.minimum(j0 + k, nb - 1)] / fps[:, -1]
    redo = np.flatnonzero(~kept[r[:, 0], k])
    if len(redo):
        out[redo] = _fpr95_flat(cp_d[redo], cn_d[redo], tps[redo], fps[redo])
    return out


def _fpr95_rows(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    cp_d, cn_d = cp[:, ::-1], cn[:, ::-1]
    return _fpr95_descending(cp_d, cn_d, np.cumsum(cp_d, axis=1), np.cumsum(cn_d, axis=1))


def detection_consumer(metrics: tuple[str, ...]) -> Consumer:
    """AUROC, AUPR and FPR@95 of a block's counts (descending, with running sums made once for all three)."""
    def consume(block: Block) -> dict[str, np.ndarray]:
        if metrics == ("auroc",) and (alone := _auroc_gathered(block)) is not None:
            return {"auroc": alone}
        cp_d, cn_d = block.descending
        out = {}
        if "auroc" in metrics:
            out["auroc"] = _auroc_descending(cp_d, cn_d, block.fps)
        if "aupr" in metrics:
            out["aupr"] = _aupr_descending(cp_d, block.tps, block.fps)
        if "fpr95" in metrics:
            out["fpr95"] = _fpr95_descending(cp_d, cn_d, block.tps, block.fps)
        return out
    return consume


def metrics_on_resamples(y: np.ndarray, s: np.ndarray, idx: np.ndarray | Draws,
                         metrics: tuple[str, ...] = METRICS) -> dict[str, np.ndarray]:
    """Each metric on each resample (rows of item indices `idx`, or compact `Draws`; every row holding both
    classes): the scores ranked once, every metric read from the same per-block counts."""
    ranked = Ranked.of(y, s)
    consumers = [detection_consumer(metrics)]
    rejection = tuple(m for m in metrics if m in REJECTION_METRICS)
    if rejection:
        consumers.append(rejection_consumer(rejection))
    if isinstance(idx, Draws):
        got = one_pass(ranked, consumers, draws=idx)
    else:
        got = one_pass(ranked, consumers, idx=np.asarray(idx))
    return {m: got.get(m, np.empty(0)) for m in metrics}


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
