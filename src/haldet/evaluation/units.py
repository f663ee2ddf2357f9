"""Unit-level metrics: pooled over units, resampled by item.

Units (entities, sentences, claims) of the test items are pooled: AUROC and AUPR over all of them, and F1 with its
precision and recall at the threshold that maximises F1 on the **validation** units (predict "hallucinated" when
score >= threshold). The paper's tune-on-test F1-opt (HalluEntity's F1_Opt, P_Opt, R_Opt: the best F1 over all
thresholds on the evaluated units themselves) is reported only as the labelled variant `f1_opt_test`
(with `precision_opt_test`, `recall_opt_test`). `tie_share` is the share of test units whose score equals another
unit's score (ties make rankings arbitrary); `base_rate` is the share of hallucinated test units.

Confidence intervals come from a bootstrap over **items** (grouped): each resample draws test items with
replacement and keeps all their units, so units of one response never count as independent evidence.
Resamples in which the units hold only one class are dropped (counted in the note).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from sklearn.metrics import average_precision_score, roc_auc_score

from haldet.evaluation.metrics import MetricValue, aupr_counts, auroc_counts
from haldet.evaluation.rejection import rejection_from_counts, rejection_metrics
from haldet.evaluation.thresholds import Confusion, at_threshold, best_f1_threshold

UNIT_REJECTION = ("prr", "prr_50", "aurc")  # rejecting the most suspicious units (haldet.evaluation.rejection)
UNIT_METRICS = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt", "threshold", "f1_opt_test",
                "precision_opt_test", "recall_opt_test", "tie_share", "base_rate", *UNIT_REJECTION)
_BLOCK = 100  # resamples per vectorised block


@dataclass
class UnitData:
    """Pooled units: binary labels `y` (1 = hallucinated, -1 = no binary label), scores `s` (NaN = invalid) and
    `group`, the index of the item each unit belongs to (the resampling unit). Optional: `grade`, the ordinal label
    of each unit (0 = best, -1 = none; units with only a grade have y = -1, e.g. VeriGray's Not-Sure sentences), and
    `tags`, per-unit strings named by the suite (`Suite.unit_tags_of`, e.g. the generator) for breakdowns."""

    y: np.ndarray
    s: np.ndarray
    group: np.ndarray
    grade: np.ndarray | None = None
    tags: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.y = np.asarray(self.y, dtype=np.int64)
        self.s = np.asarray(self.s, dtype=np.float64)
        self.group = np.asarray(self.group, dtype=np.int64)
        if self.grade is not None:
            self.grade = np.asarray(self.grade, dtype=np.int64)
        self.tags = {k: np.asarray(v, dtype=object) for k, v in self.tags.items()}
        sizes = {len(self.y), len(self.s), len(self.group), *(len(v) for v in self.tags.values())}
        if len(sizes) > 1 or (self.grade is not None and len(self.grade) != len(self.y)):
            raise ValueError("one label, score, group (and grade, tag) per unit")

    def where(self, mask: np.ndarray) -> UnitData:
        return UnitData(self.y[mask], self.s[mask], self.group[mask],
                        None if self.grade is None else self.grade[mask], {k: v[mask] for k, v in self.tags.items()})

    def valid(self) -> UnitData:
        return self.where(np.isfinite(self.s))

    def labelled(self) -> UnitData:
        """The units with a binary label (what the binary metrics read)."""
        return self.where(self.y >= 0)


def best_f1(y: np.ndarray, s: np.ndarray) -> tuple[float, float, float, float]:
    """(threshold, F1, precision, recall) of the threshold with the best F1 (predict positive when s >= threshold;
    the highest such threshold on ties of F1); `y` must hold a positive (`thresholds.best_f1_threshold`)."""
    threshold = best_f1_threshold(y, s)
    if threshold is None:
        raise ValueError("no positive unit with a valid score: no F1-optimal threshold")
    return (threshold, *f1_precision_recall(at_threshold(y, s, threshold)))


def f1_precision_recall(c: Confusion) -> tuple[float, float, float]:
    """(F1, precision, recall) of a confusion as the unit tables print them: 0 where `Confusion` says undefined
    (nothing predicted, or no positive)."""
    return c.f1 or 0.0, c.precision or 0.0, c.recall or 0.0


def tie_share(s: np.ndarray) -> float:
    """Share of scores equal to at least one other score."""
    if len(s) == 0:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    return float(np.mean(counts[inverse] > 1))


def group_resample_weights(group: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n_groups] multiplicities: each resample draws the distinct groups with replacement."""
    rng = np.random.default_rng(seed)
    groups = np.unique(group)
    draws = rng.integers(0, len(groups), size=(n_boot, len(groups)))
    out = np.zeros((n_boot, len(groups)), dtype=np.float64)
    np.add.at(out, (np.repeat(np.arange(n_boot), len(groups)), draws.ravel()), 1.0)
    return out


def bootstrap_unit_metrics(data: UnitData, threshold: float | None, n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """Grouped-bootstrap distributions of auroc, aupr and (with a threshold) f1/precision/recall at it."""
    _, gidx = np.unique(data.group, return_inverse=True)
    weights = group_resample_weights(data.group, n_boot, seed)
    _, bins = np.unique(data.s, return_inverse=True)
    n, n_bins = len(data.y), int(bins.max()) + 1
    pos = (data.y == 1).astype(np.float64)
    onehot = sparse.csr_matrix((np.ones(n), (np.arange(n), bins)), shape=(n, n_bins))
    pred = (data.s >= threshold).astype(np.float64) if threshold is not None else None
    out: dict[str, list[np.ndarray]] = {m: [] for m in ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")}
    for start in range(0, n_boot, _BLOCK):
        w = weights[start : start + _BLOCK][:, gidx]  # [B, n] unit weights
        cp = np.asarray((w * pos) @ onehot)
        cn = np.asarray((w * (1 - pos)) @ onehot)
        ok = (cp.sum(axis=1) > 0) & (cn.sum(axis=1) > 0)
        cp, cn, w = cp[ok], cn[ok], w[ok]
        out["auroc"].append(auroc_counts(cp, cn))
        out["aupr"].append(aupr_counts(cp, cn))
        if pred is not None:
            tp, fp, fn = w @ (pred * pos), w @ (pred * (1 - pos)), w @ ((1 - pred) * pos)
            p = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
            r = np.divide(tp, tp + fn, out=np.zeros_like(tp), where=(tp + fn) > 0)
            f1 = np.divide(2 * p * r, p + r, out=np.zeros_like(p), where=(p + r) > 0)
            out["f1_opt"].append(f1)
            out["precision_opt"].append(p)
            out["recall_opt"].append(r)
        for m, v in rejection_from_counts(cp, cn, UNIT_REJECTION).items():
            out.setdefault(m, []).append(v[np.isfinite(v)])
    return {m: np.concatenate(v) for m, v in out.items() if v}


def unit_metrics(test: UnitData, val: UnitData | None, *, n_boot: int = 1000, ci: float = 0.95,
                 seed: int = 42) -> list[MetricValue]:
    """Every metric of `UNIT_METRICS` on the test units with a valid score (n and n_pos count units); the threshold
    comes from the validation units (None values with a note when validation cannot give one). Units without a
    binary label (y = -1) are left out."""
    test, val = test.labelled(), (None if val is None else val.labelled())
    coverage = float(np.isfinite(test.s).mean()) if len(test.s) else 0.0
    data = test.valid()
    n, n_pos = len(data.y), int(data.y.sum())

    def value(metric: str, v: float | None, lo: float | None = None, hi: float | None = None,
              note: str = "") -> MetricValue:
        return MetricValue(metric, v, lo, hi, n, n_pos, coverage, note)

    if n_pos == 0 or n_pos == n:
        note = ("no test unit has a valid score" if n == 0 else
                f"test units with a valid score are all one class ({n_pos} positive of {n})")
        return [value(m, None, note=note) for m in UNIT_METRICS]
    threshold, threshold_note = None, ""
    if val is None:
        threshold_note = "no validation units: no threshold"
    else:
        valid_val = val.valid()
        if valid_val.y.sum() == 0 or valid_val.y.sum() == len(valid_val.y):
            threshold_note = "validation units with a valid score are all one class: no threshold"
        else:
            threshold = best_f1(valid_val.y, valid_val.s)[0]
    point: dict[str, float | None] = {"auroc": float(roc_auc_score(data.y, data.s)),
                                      "aupr": float(average_precision_score(data.y, data.s))}
    if threshold is not None:
        point["f1_opt"], point["precision_opt"], point["recall_opt"] = f1_precision_recall(
            at_threshold(data.y, data.s, threshold))
    _, point["f1_opt_test"], point["precision_opt_test"], point["recall_opt_test"] = best_f1(data.y, data.s)
    point |= {m: float(v[0]) for m, v in
              rejection_metrics(data.y, data.s, np.arange(n)[None, :], UNIT_REJECTION).items()}
    boots = bootstrap_unit_metrics(data, threshold, n_boot, seed) if n_boot > 0 else {}
    alpha = (1 - ci) / 2
    dropped = n_boot - len(boots.get("auroc", [])) if n_boot > 0 else 0
    boot_note = f"{dropped} one-class resamples dropped" if dropped else ""
    out = []
    for m in UNIT_METRICS:
        if m in ("tie_share", "base_rate", "threshold"):
            v = {"tie_share": tie_share(data.s), "base_rate": n_pos / n, "threshold": threshold}[m]
            out.append(value(m, v, note=threshold_note if m == "threshold" else ""))
            continue
        if m in ("f1_opt", "precision_opt", "recall_opt") and threshold is None:
            out.append(value(m, None, note=threshold_note))
            continue
        lo = hi = None
        if m in boots and len(boots[m]):
            lo, hi = (float(q) for q in np.quantile(boots[m], [alpha, 1 - alpha]))
        note = "threshold tuned on the test units (the paper's F1_Opt convention)" if m.endswith("_test") else ""
        out.append(value(m, point[m], lo, hi, note or boot_note))
    return out
