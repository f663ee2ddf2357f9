"""VeriGray's result rows for one detector: Table 4 (protocol 1 and ranking loss), the 7-way classifiers' per-class
F1 and selective prediction, and breakdowns by generator and by gold class, all on the test split.

A detector gives per-sentence `scores` (higher = less faithful; NaN = invalid) and optionally its own binary
verdict (`binary`, e.g. an NLI model's argmax or a classifier's class mapped at Implicitly-Supported) and a 7-way
class (`classes`, as a faithfulness degree 0..6). Without a binary verdict, scores are thresholded at the value
with the best protocol-1 balanced accuracy on the validation split (never on test).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.suites.verigray.labels import CLASSES
from haldet.suites.verigray.metrics import (
    FLOAT,
    best_binary_ranking_loss,
    binary_rates,
    choose_threshold,
    gold_unfaithful,
    per_class_f1,
    protocol1,
    protocol1_mask,
    protocol1_scores,
    ranking_loss,
    selective_prediction,
)

TABLE4 = ("bacc", "recall", "precision", "f1", "rank_loss")  # the paper's Table 4 columns


@dataclass
class Sentences:
    """Gold data of every sentence, flat and aligned: item id, faithfulness degree (0..6), generator, split."""

    item: np.ndarray
    degree: np.ndarray
    generator: np.ndarray
    split: np.ndarray

    def where(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.split == split)


@dataclass
class DetectorOutput:
    detector: str
    scores: np.ndarray
    binary: np.ndarray | None = None
    classes: np.ndarray | None = None
    note: str = ""  # how `binary` was decided when the detector gave it (e.g. a fixed threshold)


def _row(detector: str, metric: str, value: float, *, n: int, group: str = "all", coverage: float | None = None,
         note: str = "", n_pos: int | None = None) -> dict[str, Any]:
    value = float(value)
    return {"detector": detector, "metric": metric, "value": value if np.isfinite(value) else None, "n": n,
            "n_pos": n_pos, "coverage": coverage, "group": group,
            "note": note if np.isfinite(value) or note else "no valid score" if n == 0 else "undefined"}


def metric_name(metric: str, group: str) -> str:
    """A row's metric with its breakdown group: 'bacc', 'bacc[generator=gpt-5]', 'class_f1[class=Fabricated]'."""
    return metric if group == "all" else f"{metric}[{group}]"


def split_metric(name: str) -> tuple[str, str]:
    """Inverse of `metric_name`."""
    if name.endswith("]") and "[" in name:
        metric, group = name[:-1].split("[", 1)
        return metric, group
    return name, "all"


BOOTSTRAPPED = ("bacc", "recall", "precision", "f1", "rank_loss", "rank_loss_continuous")


def bootstrap_table4(item: np.ndarray, degree: np.ndarray, scores: np.ndarray, binary: np.ndarray, *, n_boot: int,
                     ci: float, seed: int) -> dict[str, tuple[float, float]]:
    """Percentile CIs of the Table 4 metrics from a bootstrap over items (a resample draws whole summaries with
    replacement and keeps all their sentences, as the core's unit metrics do); undefined resamples are skipped."""
    if n_boot <= 0 or len(item) == 0:
        return {}
    items, inverse = np.unique(item, return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(len(items))]
    rng = np.random.default_rng(seed)
    keep = protocol1_mask(degree)
    draws: dict[str, list[float]] = {m: [] for m in BOOTSTRAPPED}
    for _ in range(n_boot):
        idx = np.concatenate([members[g] for g in rng.integers(0, len(items), len(items))])
        p1 = idx[keep[idx] & np.isfinite(binary[idx])]
        values = binary_rates(gold_unfaithful(degree[p1]), binary[p1])
        values["rank_loss"] = ranking_loss(degree[idx], binary[idx])
        values["rank_loss_continuous"] = ranking_loss(degree[idx], scores[idx])
        for m, v in values.items():
            if np.isfinite(v):
                draws[m].append(float(v))
    alpha = (1 - ci) / 2
    return {m: (float(np.quantile(v, alpha)), float(np.quantile(v, 1 - alpha))) for m, v in draws.items() if v}


def evaluate(sents: Sentences, out: DetectorOutput, *, n_boot: int = 0, ci: float = 0.95,
             seed: int = 42) -> list[dict[str, Any]]:
    """All result rows of one detector (see the module docstring); Table 4 rows get item-bootstrap CIs."""
    scores = np.asarray(out.scores, dtype=FLOAT)
    note = out.note
    if out.binary is not None:
        binary = np.asarray(out.binary, dtype=FLOAT)
    else:
        val = sents.where("val")
        threshold = choose_threshold(sents.degree[val], scores[val])
        note = (f"threshold {threshold:.6g} from validation" if np.isfinite(threshold) else
                "no threshold: the validation split lacks a scored Faithful or Unfaithful sentence")
        binary = np.where(np.isfinite(scores), (scores >= threshold).astype(FLOAT), np.nan)
        if not np.isfinite(threshold):
            binary = np.full(len(scores), np.nan)
    test = sents.where("test")
    rows = list(_table4(out.detector, sents.degree[test], scores[test], binary[test], "all", note))
    cis = bootstrap_table4(sents.item[test], sents.degree[test], scores[test], binary[test], n_boot=n_boot, ci=ci,
                           seed=seed)
    for row in rows:
        row["ci_low"], row["ci_high"] = cis.get(row["metric"], (None, None)) if row["value"] is not None else (
            None, None)
    if out.classes is not None:
        rows += list(_classifier_rows(out.detector, sents.degree[test], np.asarray(out.classes, dtype=FLOAT)[test]))
    for gen in sorted(set(sents.generator[test].tolist())):
        idx = test[sents.generator[test] == gen]
        rows += list(_table4(out.detector, sents.degree[idx], scores[idx], binary[idx], f"generator={gen}", note))
    for degree, name in enumerate(CLASSES):
        idx = test[sents.degree[test] == degree]
        if not len(idx):
            continue
        flagged = binary[idx][np.isfinite(binary[idx])]
        rows.append(_row(out.detector, "flagged_unfaithful", flagged.mean() if len(flagged) else np.nan,
                         n=len(flagged), group=f"class={name}", note=note))
        valid = scores[idx][np.isfinite(scores[idx])]
        rows.append(_row(out.detector, "mean_score", valid.mean() if len(valid) else np.nan, n=len(valid),
                         group=f"class={name}"))
    return rows


def _table4(detector: str, degree: np.ndarray, scores: np.ndarray, binary: np.ndarray, group: str,
            note: str) -> Iterator[dict[str, Any]]:
    p1 = protocol1(degree, binary)
    why = ("no protocol-1 sentence has a verdict" if p1["n"] == 0 else
           f"protocol-1 sentences are all one class ({p1['n_pos']} Unfaithful of {p1['n']})"
           if p1["n_pos"] in (0, p1["n"]) else "no sentence predicted Unfaithful")
    for metric in ("bacc", "recall", "precision", "f1"):
        yield _row(detector, metric, p1[metric], n=int(p1["n"]), group=group, coverage=p1["coverage"],
                   note=note if np.isfinite(p1[metric]) else why, n_pos=int(p1["n_pos"]))
    valid = np.isfinite(binary)
    yield _row(detector, "rank_loss", ranking_loss(degree, binary), n=int(valid.sum()), group=group,
               coverage=float(valid.mean()) if len(valid) else None, note=note)
    floor, cut = best_binary_ranking_loss(degree[valid])
    yield _row(detector, "rank_loss_best_binary", floor, n=int(valid.sum()), group=group,
               note=f"a perfect binary predictor (Faithful from {CLASSES[cut]})" if cut >= 0 else "")
    finite = np.isfinite(scores)
    yield _row(detector, "rank_loss_continuous", ranking_loss(degree, scores), n=int(finite.sum()), group=group,
               coverage=float(finite.mean()) if len(finite) else None)
    for metric, value in protocol1_scores(degree, scores).items():
        yield _row(detector, metric, value, n=int(finite.sum()), group=group)


def _classifier_rows(detector: str, degree: np.ndarray, classes: np.ndarray) -> Iterator[dict[str, Any]]:
    parsed = np.isfinite(classes)
    yield _row(detector, "parsed", parsed.mean() if len(parsed) else np.nan, n=len(parsed))
    for name, value in per_class_f1(degree, classes).items():
        yield _row(detector, "class_f1", value, n=len(degree), group=f"class={name}")
    for sel in selective_prediction(degree, classes):
        group = f"threshold={sel['threshold']}"
        yield _row(detector, "selective_coverage", sel["coverage"], n=sel["n"], group=group)
        yield _row(detector, "selective_risk", sel["risk"], n=sel["n"], group=group)
