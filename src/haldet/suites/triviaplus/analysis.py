"""TRIVIA+'s tables from one detector's validation and test scores (paper Tables 3-6 and appendix A.7, 8-12).

Every thresholded number uses the threshold with the best F1 on the validation split, under the same label set
the numbers are computed against (what a user holding only those labels could do); the paper's "best F1 on the
test set" appears only as the explicitly labelled variant `tune_on=test`. NaN scores are no prediction: each row
carries its coverage, and strata carry their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.evaluation.metrics import aupr, auroc
from haldet.evaluation.thresholds import at_threshold, best_f1_threshold, predict
from haldet.schema import Instance
from haldet.suites.triviaplus.gold import ROUGE_BINS, Rouge, rouge_bin
from haldet.suites.triviaplus.protocol import CLEAN, detection_rate_test, length_stratum, strata_outcomes


@dataclass
class DetectorScores:
    """One detector's scores by item id on the validation and test items, and the regime it trained on."""

    detector: str
    val: Mapping[str, float]
    test: Mapping[str, float]
    train_labels: str = CLEAN


def label_of(instance: Instance, regime: str) -> int | None:
    """The item's binary label under a label set (`clean` = the human majority label)."""
    category = instance.response_label if regime == CLEAN else instance.label_variants.get(regime)
    return None if category is None else int(category == "hallucination")


def _arrays(scores: Mapping[str, float], items: Mapping[str, Instance], regime: str,
            ids: Sequence[str] | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    keep = [i for i in (ids if ids is not None else scores) if i in scores and label_of(items[i], regime) is not None]
    y = np.array([label_of(items[i], regime) for i in keep], dtype=int)
    s = np.array([scores[i] for i in keep], dtype=np.float64)
    return keep, y, s


def main_row(ds: DetectorScores, items: Mapping[str, Instance], eval_labels: str = CLEAN,
             tune_on: str = "val") -> dict[str, object]:
    """Table 4 / 5 / 6 row: AUROC, AUPR, and F1 / precision / recall / accuracy at the threshold chosen on
    `tune_on` (val, or the labelled test variant), against `eval_labels` test labels."""
    _, yv, sv = _arrays(ds.val, items, eval_labels)
    _, y, s = _arrays(ds.test, items, eval_labels)
    finite = np.isfinite(s)
    row: dict[str, object] = {"detector": ds.detector, "train_labels": ds.train_labels, "eval_labels": eval_labels,
                              "tune_on": tune_on, "n": len(y), "n_pos": int(y.sum()),
                              "coverage": float(finite.mean()) if len(s) else 0.0}
    yf, sf = y[finite], s[finite]
    both = 0 < yf.sum() < len(yf)
    row["auroc"] = auroc(yf, sf) if both else None
    row["aupr"] = aupr(yf, sf) if both else None
    threshold = best_f1_threshold(yv, sv) if tune_on == "val" else best_f1_threshold(y, s)
    row["threshold"] = threshold
    if threshold is None:
        row.update(f1=None, precision=None, recall=None, accuracy=None,
                   note=f"no threshold: the {tune_on} split has no positive label or no valid score")
        return row
    c = at_threshold(y, s, threshold)
    row.update(f1=c.f1, precision=c.precision, recall=c.recall, accuracy=c.accuracy, note="")
    return row


STRATA = ("length", "domain", "generator")


def stratum_of(instance: Instance, dimension: str) -> str:
    """The item's stratum: context length in characters (the article as released, before any truncation), the
    source domain, or the generating model."""
    if dimension == "length":
        return length_stratum(int(instance.meta.get("context_chars", len(instance.context))))
    return str(instance.meta.get(dimension, "?"))


def strata_rows(ds: DetectorScores, items: Mapping[str, Instance]) -> list[dict[str, object]]:
    """Table 3 shape (and appendix A.7): per stratum of context length, domain and generator, the test items,
    coverage, and the thresholded outcomes (validation threshold, clean labels) with Fisher's exact p of the
    stratum's share of correct predictions against the other strata."""
    _, yv, sv = _arrays(ds.val, items, CLEAN)
    ids, y, s = _arrays(ds.test, items, CLEAN)
    threshold = best_f1_threshold(yv, sv)
    rows: list[dict[str, object]] = []
    for dimension in STRATA:
        names = [stratum_of(items[i], dimension) for i in ids]
        for name in sorted(set(names)):
            inside = np.array([n == name for n in names])
            rows.append({"detector": ds.detector, "dimension": dimension, "stratum": name,
                         "n": int(inside.sum()), "n_pos": int(y[inside].sum()),
                         "coverage": float(np.isfinite(s[inside]).mean()) if inside.any() else 0.0})
    if threshold is None:
        for r in rows:
            r["note"] = "no threshold: validation has no positive label or no valid score"
        return rows
    finite = np.isfinite(s)
    f_ids = [i for i, ok in zip(ids, finite, strict=True) if ok]
    strata = {dim: [stratum_of(items[i], dim) for i in f_ids] for dim in STRATA}
    outcomes = {(o.dimension, o.stratum): o for o in strata_outcomes(y[finite], predict(s[finite], threshold), strata)}
    for r in rows:
        o = outcomes.get((str(r["dimension"]), str(r["stratum"])))
        if o is not None:
            r.update({k: v for k, v in o.row().items() if k in ("f1", "precision", "recall", "accuracy",
                                                                  "fisher_p_vs_rest")})
        r["threshold"] = threshold
    return rows


RATE_TABLES = {"domain": "Table 8", "length": "Table 9", "generator": "Table 10"}


def hallucination_rates(items: Mapping[str, Instance], ids: Sequence[str]) -> list[dict[str, object]]:
    """Tables 8-10: the share of hallucinated answers (clean labels) among `ids` per domain, context-length
    stratum and generator, with its Wilson 95% interval (the paper's intervals are Wilson's: 20 of 139 gives
    [9.5%, 21.2%])."""
    from scipy.stats import binomtest

    rows: list[dict[str, object]] = []
    labelled = [i for i in ids if label_of(items[i], CLEAN) is not None]
    for dimension, table in RATE_TABLES.items():
        names = [stratum_of(items[i], dimension) for i in labelled]
        for name in sorted(set(names)):
            ys = [label_of(items[i], CLEAN) for i, n in zip(labelled, names, strict=True) if n == name]
            k = int(sum(y for y in ys if y is not None))
            ci = binomtest(k, len(ys)).proportion_ci(confidence_level=0.95, method="wilson")
            rows.append({"table": table, "dimension": dimension, "stratum": name, "n": len(ys), "n_pos": k,
                         "rate": k / len(ys), "ci_low": float(ci.low), "ci_high": float(ci.high)})
    return rows


def hallucination_type_test(ds: DetectorScores, items: Mapping[str, Instance]) -> dict[str, Any]:
    """Appendix Table 11: detection rate on contradicted vs not-mentioned test answers, Fisher's exact p."""
    _, yv, sv = _arrays(ds.val, items, CLEAN)
    ids, y, s = _arrays(ds.test, items, CLEAN)
    threshold = best_f1_threshold(yv, sv)
    pos = [k for k, i in enumerate(ids) if y[k] == 1 and np.isfinite(s[k])]
    kinds = [str(items[ids[k]].meta.get("label_3way")) for k in pos]
    if threshold is None:
        return {"detector": ds.detector, "note": "no threshold"}
    out = detection_rate_test(predict(s[pos], threshold), kinds, "contradicted", "not-mentioned")
    return {"detector": ds.detector, **out}


@dataclass
class RougeBins:
    """Table 12's binning of the labelled test items: each item with a ground-truth answer by the ROUGE of its
    answer against the best of them; `missing` the labelled test items without one; `rouge_type` what scored them."""

    bins: dict[str, str]
    scores: dict[str, float]
    missing: list[str]
    rouge_type: str

    def note(self) -> str:
        """What binned the items, and how many test items had no ground truth to bin by."""
        total = len(self.bins) + len(self.missing)
        lack = f"; {len(self.missing)} of {total} test items have no ground-truth answer" if self.missing else ""
        return f"{self.rouge_type} F vs the best ground-truth answer{lack}"


def rouge_binned(items: Mapping[str, Instance], ids: Sequence[str], rouge: Rouge) -> RougeBins:
    """Bin the clean-labelled items of `ids` by ROUGE F of the answer against `meta["gold_answers"]`."""
    bins: dict[str, str] = {}
    scores: dict[str, float] = {}
    missing: list[str] = []
    for i in ids:
        inst = items[i]
        if label_of(inst, CLEAN) is None:
            continue
        golds = inst.meta.get("gold_answers")
        if not golds:
            missing.append(i)
            continue
        scores[i] = rouge.score(inst.response or "", golds)
        bins[i] = rouge_bin(scores[i])
    return RougeBins(bins, scores, missing, rouge.rouge_type)


def rouge_bin_rows(binned: RougeBins, items: Mapping[str, Instance],
                   detectors: Sequence[DetectorScores]) -> list[dict[str, object]]:
    """Table 12: per detector and ROUGE bin holding items, the bin's N and hallucination rate (clean labels) and
    the detector's AUROC over the bin's items with a valid score (coverage = their share; NaN scores left out)."""
    note = binned.note()
    names = [name for _, _, name in ROUGE_BINS if name in binned.bins.values()]
    members = {name: [i for i, b in binned.bins.items() if b == name] for name in names}
    rows: list[dict[str, object]] = []
    for ds in detectors:
        for name in names:
            ids = members[name]
            y = np.array([label_of(items[i], CLEAN) for i in ids], dtype=int)
            s = np.array([ds.test.get(i, np.nan) for i in ids], dtype=np.float64)
            finite = np.isfinite(s)
            yf, sf = y[finite], s[finite]
            row: dict[str, object] = {"detector": ds.detector, "rouge_bin": name, "n": len(ids),
                                      "n_pos": int(y.sum()), "halluc_rate": float(y.mean()),
                                      "coverage": float(finite.mean()), "note": note}
            if 0 < yf.sum() < len(yf):
                row["auroc"] = auroc(yf, sf)
            else:
                row["auroc"] = None
                row["note"] = note + ("; no AUROC: the scored items of the bin hold one class" if len(yf)
                                      else "; no AUROC: no item of the bin has a valid score")
            rows.append(row)
    return rows


def auroc_spread(bin_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, object]]:
    """Per detector of `rouge_bin_rows`, max - min of its AUROC across the bins where it is defined (the paper's
    Delta, claimed <= 0.05); None with the reason when fewer than two bins have one."""
    out: list[dict[str, object]] = []
    for detector in dict.fromkeys(str(r["detector"]) for r in bin_rows):
        mine = [r for r in bin_rows if r["detector"] == detector]
        values = [float(r["auroc"]) for r in mine if r.get("auroc") is not None]
        spread = max(values) - min(values) if len(values) >= 2 else None
        out.append({"detector": detector, "spread": spread, "n_bins": len(values),
                    "n": sum(int(r["n"]) for r in mine),
                    "note": f"over {len(values)} bins: " + ", ".join(str(r["rouge_bin"]) for r in mine
                                                                    if r.get("auroc") is not None)
                    if spread is not None else f"no spread: {len(values)} bin(s) with an AUROC, two needed"})
    return out
