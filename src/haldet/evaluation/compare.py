"""Paired bootstrap comparison of two detectors on the same test items (appendix J, made pairwise).

Both detectors are scored on the same items; only items where both have a valid score are compared (the count
dropped is reported). Each resample draws positives and negatives with replacement (stratified, as for the
single-detector CIs) and applies the *same* indices to both detectors, so the CI of the AUROC difference reflects
the correlation between them. `p_value` is the two-sided bootstrap share: twice the smaller share of resamples on
either side of zero (capped at 1), a finite-sample indication, not an exact test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from haldet.evaluation.metrics import auroc, metrics_on_resamples, stratified_indices


@dataclass
class PairedComparison:
    a: str
    b: str
    n: int                 # items with a valid score from both
    n_pos: int
    n_dropped: int         # test items where either score is invalid
    auroc_a: float | None
    auroc_b: float | None
    diff: float | None     # auroc_a - auroc_b
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_boot: int
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_bootstrap(labels: np.ndarray, scores_a: np.ndarray, scores_b: np.ndarray, *, a: str = "a", b: str = "b",
                     n_boot: int = 1000, ci: float = 0.95, seed: int = 42,
                     _cache: dict[Any, Any] | None = None) -> PairedComparison:
    """AUROC(a) - AUROC(b) on shared items with a stratified paired bootstrap CI.

    `_cache` (a dict the caller keeps) reuses resample indices and detector a's resampled AUROCs across calls
    with the same labels, item mask and a (comparing one reference detector with many others)."""
    y = np.asarray(labels, dtype=int)
    sa, sb = np.asarray(scores_a, dtype=np.float64), np.asarray(scores_b, dtype=np.float64)
    if not (len(y) == len(sa) == len(sb)):
        raise ValueError(f"labels and both score arrays must align: {len(y)}, {len(sa)}, {len(sb)}")
    both = np.isfinite(sa) & np.isfinite(sb)
    y, sa, sb = y[both], sa[both], sb[both]
    n, n_pos = len(y), int(y.sum())
    out = PairedComparison(a, b, n, n_pos, int((~both).sum()), None, None, None, None, None, None, n_boot)
    if n_pos == 0 or n_pos == n:
        out.note = ("no item has valid scores from both" if n == 0 else
                    f"shared items are all one class ({n_pos} positive of {n})")
        return out
    out.auroc_a, out.auroc_b = auroc(y, sa), auroc(y, sb)
    out.diff = out.auroc_a - out.auroc_b
    if n_boot > 0:
        cache = _cache if _cache is not None else {}
        mask_key = (a, n_boot, seed, both.tobytes(), np.asarray(labels, dtype=int).tobytes())
        if mask_key not in cache:
            idx = stratified_indices(y, n_boot, seed)
            cache[mask_key] = (idx, metrics_on_resamples(y, sa, idx, ("auroc",))["auroc"])
        idx, boot_a = cache[mask_key]
        diffs = boot_a - metrics_on_resamples(y, sb, idx, ("auroc",))["auroc"]
        alpha = (1 - ci) / 2
        out.ci_low, out.ci_high = (float(q) for q in np.quantile(diffs, [alpha, 1 - alpha]))
        out.p_value = float(min(1.0, 2 * min((diffs <= 0).mean(), (diffs >= 0).mean())))
    return out
