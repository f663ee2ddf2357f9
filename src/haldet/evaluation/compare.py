"""Paired bootstrap comparison of two detectors on the same test items (appendix J, made pairwise).

Both detectors are scored on the same items; only items where both have a valid score are compared (the count
dropped is reported). Each resample draws positives and negatives with replacement (stratified, as for the
single-detector CIs) and applies the *same* indices to both detectors, so the CI of the AUROC difference reflects
the correlation between them. `p_value` is the two-sided bootstrap share: twice the smaller share of resamples on
either side of zero (capped at 1), a finite-sample indication, not an exact test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from haldet.evaluation.bootstrap import stratified_draws
from haldet.evaluation.metrics import auroc, metrics_on_resamples


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
            draws = stratified_draws(y, n_boot, seed)
            cache[mask_key] = (draws, metrics_on_resamples(y, sa, draws, ("auroc",))["auroc"])
        draws, boot_a = cache[mask_key]
        diffs = boot_a - metrics_on_resamples(y, sb, draws, ("auroc",))["auroc"]
        alpha = (1 - ci) / 2
        out.ci_low, out.ci_high = (float(q) for q in np.quantile(diffs, [alpha, 1 - alpha]))
        out.p_value = float(min(1.0, 2 * min((diffs <= 0).mean(), (diffs >= 0).mean())))
    return out


def paired_differences(labels: np.ndarray, scores_a: np.ndarray, scores_b: np.ndarray, *, n_boot: int = 1000,
                       seed: int = 42) -> tuple[PairedComparison, np.ndarray]:
    """`paired_bootstrap` plus the resampled differences themselves (empty without both classes or resamples), so
    differences of independent cells can be averaged resample by resample."""
    y = np.asarray(labels, dtype=int)
    sa, sb = np.asarray(scores_a, dtype=np.float64), np.asarray(scores_b, dtype=np.float64)
    cmp = paired_bootstrap(y, sa, sb, n_boot=0)
    if cmp.diff is None or n_boot <= 0:
        return cmp, np.empty(0)
    both = np.isfinite(sa) & np.isfinite(sb)
    y, sa, sb = y[both], sa[both], sb[both]
    draws = stratified_draws(y, n_boot, seed)
    boot = {name: metrics_on_resamples(y, s, draws, ("auroc",))["auroc"] for name, s in (("a", sa), ("b", sb))}
    return cmp, boot["a"] - boot["b"]


@dataclass
class ScenarioPair:
    """Best ensemble vs best single detector of one (model, scenario): the mean over the scenario's datasets of
    AUROC(ensemble) - AUROC(single) on the items both scored, its CI from the per-dataset paired resamples averaged
    resample by resample (datasets are independent), and each one's mean Cost@N."""

    model: str
    scenario: str
    single: str
    ensemble: str
    datasets: list[str]
    auroc_single: float | None
    auroc_ensemble: float | None
    diff: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    n: int = 0
    cost_single: float | None = None
    cost_ensemble: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals and len(vals) == len(values) else None


def best_single_vs_ensemble(rows: Sequence[Mapping[str, Any]], ensembles: set[str],
                            scores: Mapping[tuple[str, str], Any], *, group: Any = None, n_boot: int = 1000,
                            ci: float = 0.95, seed: int = 42) -> list[ScenarioPair]:
    """Per (model, scenario): the single detector and the ensemble (names in `ensembles`) with the best mean test
    AUROC over the scenario's datasets (only detectors with a value on every one of them), compared with a paired
    bootstrap on each dataset. `scores[(dataset, model)]` holds `labels` and `scores[name]` aligned (test items);
    `group` maps a dataset's scenario to its column (default: the scenario itself)."""
    group = group or (lambda s: s)
    auroc: dict[tuple[str, str, str], float | None] = {}
    cost: dict[tuple[str, str, str], float | None] = {}
    datasets: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.get("metric") != "auroc":
            continue
        model, ds, det = str(r["model"]), str(r["dataset"]), str(r["detector"])
        auroc[(model, ds, det)] = None if r.get("value") is None else float(r["value"])
        cost[(model, ds, det)] = None if r.get("cost_at_n") is None else float(r["cost_at_n"])
        members = datasets.setdefault((model, str(group(str(r.get("scenario") or "?")))), [])
        if ds not in members:
            members.append(ds)
    out = []
    for (model, scenario), dss in datasets.items():
        dets = list(dict.fromkeys(k[2] for k in auroc if k[0] == model and k[1] in dss))

        def best(names: list[str], dss: list[str] = dss, model: str = model) -> str | None:
            means = {d: _mean([auroc.get((model, ds, d)) for ds in dss]) for d in names}
            scored = {d: v for d, v in means.items() if v is not None}
            return max(scored, key=lambda d: scored[d]) if scored else None

        single, ens = best([d for d in dets if d not in ensembles]), best([d for d in dets if d in ensembles])
        if single is None or ens is None:
            continue
        pair = ScenarioPair(model, scenario, single, ens, dss, _mean([auroc[(model, d, single)] for d in dss]),
                            _mean([auroc[(model, d, ens)] for d in dss]), None,
                            cost_single=_mean([cost.get((model, d, single)) for d in dss]),
                            cost_ensemble=_mean([cost.get((model, d, ens)) for d in dss]))
        diffs, boots = [], []
        for ds in dss:
            cell = scores.get((ds, model))
            if cell is None or single not in cell.scores or ens not in cell.scores:
                pair.notes.append(f"{ds}: no cached test scores")
                continue
            cmp, resampled = paired_differences(cell.labels, cell.scores[ens], cell.scores[single], n_boot=n_boot,
                                                seed=seed)
            if cmp.diff is None:
                pair.notes.append(f"{ds}: {cmp.note}")
                continue
            diffs.append(cmp.diff)
            boots.append(resampled)
            pair.n += cmp.n
            if cmp.n_dropped:
                pair.notes.append(f"{ds}: {cmp.n_dropped} item(s) without both scores left out")
        if len(diffs) == len(dss):
            pair.diff = float(np.mean(diffs))
            if n_boot > 0:
                mean_diffs = np.mean(np.vstack(boots), axis=0)
                alpha = (1 - ci) / 2
                pair.ci_low, pair.ci_high = (float(q) for q in np.quantile(mean_diffs, [alpha, 1 - alpha]))
                pair.p_value = float(min(1.0, 2 * min((mean_diffs <= 0).mean(), (mean_diffs >= 0).mean())))
        out.append(pair)
    return out
