"""The data behind a detector page's charts: ROC and precision-recall points, confusion counts at the slider's
thresholds, and a histogram per label whose bins suit the scores' range (a perplexity of 4 to 630 would otherwise
pile into one bar)."""

from __future__ import annotations

from typing import Any

import numpy as np

from haldet.evaluation.metrics import auroc
from haldet.evaluation.thresholds import at_threshold
from haldet.explorer.data import Cell

CURVE_POINTS = 400
BINS = 30
DECADES = 100.0      # positive scores whose max/min ratio reaches this get a log axis
OUTLIER_SHARE = 0.1  # the middle 90% of the scores on less than this share of the range: bins of equal counts


def histogram_axis(s: np.ndarray) -> tuple[str, np.ndarray]:
    """How to bin scores `s` (finite, non-empty) for a readable histogram: ("linear" | "log" | "quantile", edges).
    Log when all scores are positive and span two decades or more; quantile bins (equal counts) when a few
    outliers stretch the range so that the middle 90% would share one or two bars; equal widths otherwise."""
    lo, hi = float(s.min()), float(s.max())
    if hi <= lo:
        return "linear", np.linspace(lo, lo + 1, BINS + 1)
    if lo > 0 and hi / lo >= DECADES:
        return "log", np.geomspace(lo, hi, BINS + 1)
    q05, q95 = np.quantile(s, [0.05, 0.95])
    if q95 - q05 < OUTLIER_SHARE * (hi - lo):
        edges = np.unique(np.quantile(s, np.linspace(0, 1, BINS + 1)))
        if len(edges) > 2:
            return "quantile", edges
    return "linear", np.linspace(lo, hi, BINS + 1)


def curves(cell: Cell, name: str, split: str) -> dict[str, Any]:
    """ROC and precision-recall points, per-label histograms and the confusion counts at up to CURVE_POINTS
    thresholds (every count exact: the slider moves over these thresholds) of one column on one split."""
    column = cell.columns[name]
    part = (cell.split == split) & (cell.labels >= 0)
    n_part = int(part.sum())
    mask = part & np.isfinite(column.values)
    y, s = cell.labels[mask].astype(int), column.values[mask]
    threshold = cell.threshold(name)
    panel: dict[str, Any] = {"name": name, "column": column, "n": len(s), "n_part": n_part,
                             "n_pos": int(y.sum()), "threshold": threshold, "auroc": None, "data": None,
                             "confusion": None}
    if not len(s):
        return panel
    order = np.argsort(-s, kind="stable")
    s_desc, y_desc = s[order], y[order]
    last = np.r_[s_desc[1:] != s_desc[:-1], True]
    tp, fp = np.cumsum(y_desc)[last], np.cumsum(1 - y_desc)[last]
    values = s_desc[last]
    pos, neg = int(y.sum()), int(len(y) - y.sum())
    keep = np.unique(np.linspace(0, len(values) - 1, min(len(values), CURVE_POINTS)).round().astype(int))
    if threshold.value is not None:  # the lowest score >= the threshold in use is always a slider stop
        keep = np.union1d(keep, [int(np.searchsorted(-values, -threshold.value, side="right") - 1)])
    keep = keep[keep >= 0]
    axis, edges = histogram_axis(s)
    panel["auroc"] = auroc(y, s) if 0 < pos < len(y) else None
    panel["data"] = {
        "name": name, "pos": pos, "neg": neg,
        "thresholds": values[keep].tolist(), "tp": tp[keep].tolist(), "fp": fp[keep].tolist(),
        "roc": [[0.0, 0.0]] + [[float(f / neg) if neg else 0.0, float(t / pos) if pos else 0.0]
                               for t, f in zip(tp[keep], fp[keep], strict=True)],
        "pr": [[float(t / pos) if pos else 0.0, float(t / (t + f))] for t, f in zip(tp[keep], fp[keep], strict=True)],
        "axis": axis, "edges": edges.tolist(),
        "hist_pos": np.histogram(s[y == 1], bins=edges)[0].tolist(),
        "hist_neg": np.histogram(s[y == 0], bins=edges)[0].tolist(),
        "start": None if threshold.value is None else float(threshold.value),
    }
    if threshold.value is not None:
        panel["confusion"] = at_threshold(y, s, threshold.value)
    return panel
