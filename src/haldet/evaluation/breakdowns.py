"""Unit-level breakdowns (HalluEntity section 5): where a detector's errors fall, at the validation threshold.

Every test unit gets attributes: the hallucination-rate group of its item (share of hallucinated units in the
response: <10%, 10-20%, >20%), the POS tag and entity type of its words (spaCy; a unit takes the most frequent POS
of its words and the first entity type, "O" outside entities), its position in the sentence (first / middle /
last six words, by its first word) and whether it is a content unit (not only punctuation, determiners,
adpositions, conjunctions, particles). Result rows `metric[tag=group]`: F1/P/R and AUROC per rate group, FPR and
FNR per POS / entity type / position, at the threshold chosen on validation; `metric[content]` repeats the main
metrics on content units only.

The paper's own convention (HalluEntity Figs. 3c, 5, 6) is a labelled variant, `paper_breakdowns`: FPR and FNR per
POS / entity type / position at the F1-optimal threshold of the evaluated units themselves (`metric_test[tag=group]`,
the threshold in `threshold_test`), and per hallucination-rate group that group's own F1_Opt with its precision and
recall (the best F1 over every threshold on the group's units, as the paper defines F1_Opt).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.thresholds import at_threshold, best_f1_threshold
from haldet.evaluation.units import UnitData, f1_precision_recall
from haldet.schema import Instance, SpanLabel
from haldet.text.linguistics import FUNCTION_POS, analyse, overlapping

RATE_GROUPS = ("<10%", "10-20%", ">20%")


def rate_group(instance: Instance, level: str) -> str:
    labels = [u.binary for u in instance.units_of(level) if u.binary is not None]
    rate = sum(labels) / len(labels) if labels else 0.0
    return RATE_GROUPS[0] if rate < 0.10 else RATE_GROUPS[1] if rate <= 0.20 else RATE_GROUPS[2]


def unit_attributes(level: str, units: list[tuple[Instance, SpanLabel]]) -> dict[str, list[str]]:
    """Per unit: rate group, POS, entity type, sentence position, content flag (spaCy analysis of each response)."""
    responses = sorted({inst.response or "" for inst, _ in units})
    words = dict(zip(responses, analyse(responses), strict=True))
    out: dict[str, list[str]] = {"rate": [], "pos": [], "ner": [], "position": [], "content": []}
    for inst, unit in units:
        ws = overlapping(words[inst.response or ""], unit.start, unit.end)
        out["rate"].append(rate_group(inst, level))
        pos = Counter(w.pos for w in ws).most_common(1)
        out["pos"].append(pos[0][0] if pos else "none")
        out["ner"].append(next((w.ent for w in ws if w.ent), "O"))
        out["position"].append(ws[0].position if ws else "none")
        out["content"].append("yes" if any(w.pos not in FUNCTION_POS for w in ws) else "no")
    return out


def _rates(y: np.ndarray, s: np.ndarray, threshold: float) -> dict[str, float | None]:
    pred = s >= threshold
    n_pos, n_neg = int(y.sum()), int((y == 0).sum())
    f1, p, r = f1_precision_recall(at_threshold(y, s, threshold))
    return {"fpr": float((pred & (y == 0)).sum() / n_neg) if n_neg else None,
            "fnr": float((~pred & (y == 1)).sum() / n_pos) if n_pos else None,
            "f1_opt": f1, "precision_opt": p, "recall_opt": r}


BREAKDOWNS = {  # tag -> metrics reported per group
    "rate": ("f1_opt", "precision_opt", "recall_opt", "auroc"),
    "pos": ("fpr", "fnr"),
    "ner": ("fpr", "fnr"),
    "position": ("fpr", "fnr"),
}


def breakdown_metrics(test: UnitData, threshold: float | None, coverage: float) -> list[MetricValue]:
    """`metric[tag=group]` values over the test units with a valid score and a binary label (threshold from
    validation; None values with a note without one), and the content-units-only view `metric[content]`."""
    data = test.valid().labelled()
    out: list[MetricValue] = []
    if "rate" not in data.tags or threshold is None:
        return out
    for tag, metrics in BREAKDOWNS.items():
        values = data.tags[tag]
        groups = RATE_GROUPS if tag == "rate" else sorted(set(values))
        for g in groups:
            mask = values == g
            if not mask.any():
                continue
            y, s = data.y[mask], data.s[mask]
            found: dict[str, float | None] = dict(_rates(y, s, threshold))
            found["auroc"] = float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else None
            for m in metrics:
                out.append(MetricValue(f"{m}[{tag}={g}]", found[m], None, None, len(y), int(y.sum()), coverage,
                                       "" if found[m] is not None else "one class in this group"))
    content = data.tags["content"] == "yes"
    if content.any():
        y, s = data.y[content], data.s[content]
        found = dict(_rates(y, s, threshold))
        one_class = not 0 < y.sum() < len(y)
        found["auroc"] = None if one_class else float(roc_auc_score(y, s))
        found["aupr"] = None if one_class else float(average_precision_score(y, s))
        for m in ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt"):
            out.append(MetricValue(f"{m}[content]", found[m], None, None, len(y), int(y.sum()), coverage,
                                   "content units only (no punctuation/determiners/adpositions/conjunctions)"))
    return out


PAPER_NOTE = "threshold tuned on the evaluated units (the paper's F1_Opt convention)"


def paper_breakdowns(test: UnitData, coverage: float) -> list[MetricValue]:
    """HalluEntity's Figs. 3c, 5 and 6 as the paper computes them (module docstring): `threshold_test`,
    `fpr_test[tag=group]` / `fnr_test[tag=group]` at it, and `f1_opt_test` / `precision_opt_test` /
    `recall_opt_test[rate=group]` at each rate group's own best-F1 threshold."""
    data = test.valid().labelled()
    if "rate" not in data.tags:
        return []
    threshold = best_f1_threshold(data.y, data.s)
    out = [MetricValue("threshold_test", threshold, None, None, len(data.y), int(data.y.sum()), coverage,
                       PAPER_NOTE if threshold is not None else "no hallucinated unit with a valid score")]
    if threshold is None:
        return out
    for tag in ("pos", "ner", "position"):
        values = data.tags[tag]
        for g in sorted(set(values)):
            mask = values == g
            y, s = data.y[mask], data.s[mask]
            found = _rates(y, s, threshold)
            for m in ("fpr", "fnr"):
                out.append(MetricValue(f"{m}_test[{tag}={g}]", found[m], None, None, len(y), int(y.sum()), coverage,
                                       PAPER_NOTE if found[m] is not None else "one class in this group"))
    for g in RATE_GROUPS:
        mask = data.tags["rate"] == g
        if not mask.any():
            continue
        y, s = data.y[mask], data.s[mask]
        own = best_f1_threshold(y, s)
        found = _rates(y, s, own) if own is not None else {}
        for m in ("f1_opt", "precision_opt", "recall_opt"):
            out.append(MetricValue(f"{m}_test[rate={g}]", found.get(m), None, None, len(y), int(y.sum()), coverage,
                                   "the group's own F1-optimal threshold (the paper's F1_Opt)" if own is not None
                                   else "no hallucinated unit in this group"))
    return out
