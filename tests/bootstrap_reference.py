"""The bootstrap as it was before the one-pass engine (frozen copy): the reference the engine must equal bit for bit
(tests/evaluation/test_bootstrap_identity.py). Per resample block the rejection metrics re-ranked the scores
and sorted each
resample; the detection metrics counted per block; the draws were int64 indices."""

from __future__ import annotations

import numpy as np

TPR_TARGET = 0.95


def draw_indices(y: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    out = np.empty((n_boot, len(pos) + len(neg)), dtype=np.int64)
    for b in range(n_boot):
        out[b, : len(pos)] = rng.choice(pos, len(pos))
        out[b, len(pos) :] = rng.choice(neg, len(neg))
    return out


def bin_counts(y, inv, n_bins, idx):
    cls = (np.asarray(y)[idx] == 1).astype(np.int64)
    flat = (np.arange(idx.shape[0], dtype=np.int64)[:, None] * 2 + cls) * n_bins + inv[idx]
    counts = np.bincount(flat.ravel(), minlength=idx.shape[0] * 2 * n_bins).reshape(idx.shape[0], 2, n_bins)
    return counts[:, 1], counts[:, 0]


def auroc_counts(cp, cn):
    n_pos, n_neg = cp.sum(axis=1), cn.sum(axis=1)
    below = np.cumsum(cn, axis=1) - cn
    return (cp * (below + 0.5 * cn)).sum(axis=1) / (n_pos * n_neg)


def aupr_counts(cp, cn):
    cp_d, cn_d = cp[:, ::-1], cn[:, ::-1]
    tp, fp = np.cumsum(cp_d, axis=1), np.cumsum(cn_d, axis=1)
    denom = tp + fp
    precision = np.divide(tp, denom, out=np.zeros(tp.shape), where=denom > 0)
    return (cp_d * precision).sum(axis=1) / cp.sum(axis=1)


def fpr95_rows(cp, cn):
    rows = np.arange(cp.shape[0])[:, None]
    cp_d, cn_d = cp[:, ::-1], cn[:, ::-1]
    present = (cp_d + cn_d) > 0
    order = np.argsort(~present, axis=1, kind="stable")
    m = present.sum(axis=1)
    tps, fps = np.cumsum(cp_d[rows, order], axis=1), np.cumsum(cn_d[rows, order], axis=1)
    col = np.arange(cp.shape[1])[None, :]
    last = (m - 1)[:, None]
    bend = np.zeros(cp.shape, dtype=bool)
    bend[:, 1:-1] = np.logical_or(np.diff(fps, 2, axis=1), np.diff(tps, 2, axis=1))
    keep = (col <= last) & ((col == 0) | (col == last) | bend | (m[:, None] <= 2))
    tpr = tps / np.take_along_axis(tps, last, axis=1)
    first = np.argmax(keep & (tpr >= TPR_TARGET), axis=1)[:, None]
    return (np.take_along_axis(fps, first, axis=1) / np.take_along_axis(fps, last, axis=1))[:, 0]


def kept_correct(y, s, idx):
    _, inv = np.unique(s, return_inverse=True)
    n_bins = int(inv.max()) + 1 if len(inv) else 0
    rows = idx.shape[0]
    bins = inv[idx]
    flat = (np.arange(rows)[:, None] * n_bins + bins).ravel()
    total = np.bincount(flat, minlength=rows * n_bins).reshape(rows, n_bins)
    correct = np.bincount(flat, weights=(y[idx] == 0).ravel().astype(np.float64),
                          minlength=rows * n_bins).reshape(rows, n_bins)
    ordered = np.sort(bins, axis=1)
    before_total = np.take_along_axis(np.cumsum(total, axis=1) - total, ordered, axis=1)
    before_correct = np.take_along_axis(np.cumsum(correct, axis=1) - correct, ordered, axis=1)
    own_total = np.take_along_axis(total, ordered, axis=1)
    own_correct = np.take_along_axis(correct, ordered, axis=1)
    m = np.arange(1, idx.shape[1] + 1)[None, :]
    return before_correct + (m - before_total) * own_correct / own_total


def area(curves, max_rejection=1.0):
    k = max(1, int(max_rejection * curves.shape[1]))
    return curves[:, curves.shape[1] - k :].mean(axis=1)


def prr(areas, n_correct, n, max_rejection=1.0):
    rand = n_correct / n
    m = np.arange(n - max(1, int(max_rejection * n)) + 1, n + 1)
    best = float((np.minimum(m, n_correct) / m).mean())
    if best <= rand:
        return np.full(np.shape(areas), np.nan)
    return (np.asarray(areas) - rand) / (best - rand)


def rejection_metrics(y, s, idx):
    y = np.asarray(y, dtype=int)
    curves = kept_correct(y, s, idx) / np.arange(1, idx.shape[1] + 1)[None, :]
    n = idx.shape[1]
    n_correct = int((y[idx[0]] == 0).sum())
    full = area(curves)
    return {"prr": prr(area(curves, 1.0), n_correct, n, 1.0), "prr_50": prr(area(curves, 0.5), n_correct, n, 0.5),
            "rej_auc": full, "aurc": 1.0 - full}


def metrics_on_resamples(y, s, idx):
    """AUROC, AUPR, FPR@95 and the rejection metrics per resample, in the old blocks."""
    out: dict[str, list[np.ndarray]] = {m: [] for m in ("auroc", "aupr", "fpr95", "prr", "prr_50", "rej_auc",
                                                        "aurc")}
    _, inv = np.unique(s, return_inverse=True)
    n_bins = int(inv.max()) + 1 if len(inv) else 1
    block = max(1, min(128, (1 << 17) // n_bins))
    for start in range(0, idx.shape[0], block):
        for m, v in rejection_metrics(y, s, idx[start : start + block]).items():
            out[m].append(v)
        cp, cn = bin_counts(y, inv, n_bins, idx[start : start + block])
        out["auroc"].append(auroc_counts(cp, cn))
        out["aupr"].append(aupr_counts(cp, cn))
        out["fpr95"].append(fpr95_rows(cp, cn))
    return {m: np.concatenate(v) for m, v in out.items()}


def calibration_on_resamples(y, p, idx, bins=10):
    y, p = np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)
    rows, n = idx.shape
    b = np.minimum((p * bins).astype(int), bins - 1)
    flat = (np.arange(rows)[:, None] * bins + b[idx]).ravel()
    sum_y = np.bincount(flat, weights=y[idx].ravel(), minlength=rows * bins).reshape(rows, bins)
    sum_p = np.bincount(flat, weights=p[idx].ravel(), minlength=rows * bins).reshape(rows, bins)
    return {"ece": np.abs(sum_y - sum_p).sum(axis=1) / n, "brier": ((p[idx] - y[idx]) ** 2).mean(axis=1)}


def cis(values: np.ndarray, ci: float = 0.95) -> tuple[float, float]:
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)
