"""How far a claim labeller (NLI against a reference, the retrieval + LLM verifier) agrees with human labels: the
labeller's accuracy on a hand-labelled sample, as the response-level judges report theirs.

The sample is every claim that carries both a human label (the data's own, kept as `meta.labels.data_label` when
the labeller relabels it: FActScore's S / NS) and a label from the labeller; a claim the labeller could not label
(a failed verification) or the data left unlabelled (FActScore's IR) is not in it. Reported: n, accuracy, Cohen's
kappa (scikit-learn; chance-corrected, undefined when both raters use one class only) and the four confusion counts
`data<d>_labeller<l>` (1 = not supported / hallucination).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sklearn.metrics import cohen_kappa_score

from haldet.schema import LABEL_META, Instance

LABELS = "claim labels"  # the `table` of the labeller's agreement with the data's


def label_agreement(instances: Sequence[Instance], level: str = "claim") -> dict[str, Any]:
    """n, accuracy, kappa, the labeller's source(s) and the confusion counts over the claims with both labels."""
    both: list[tuple[int, int]] = []
    sources: set[str] = set()
    for inst in instances:
        for u in inst.units:
            labels = u.meta.get(LABEL_META) or {}
            if u.kind == level and "data_label" in labels and u.binary is not None:
                both.append((int(labels["data_label"]), u.binary))
                sources.add(str(labels.get("source")))
    counts = {f"data{a}_labeller{b}": sum(1 for x in both if x == (a, b)) for a in (0, 1) for b in (0, 1)}
    accuracy = sum(1 for a, b in both if a == b) / len(both) if both else None
    kappa = None
    if both and len({a for a, _ in both} | {b for _, b in both}) == 2:
        value = float(cohen_kappa_score([a for a, _ in both], [b for _, b in both]))
        kappa = value if math.isfinite(value) else None
    return {"n": len(both), "accuracy": accuracy, "kappa": kappa, "labeller": ", ".join(sorted(sources)), **counts}


def agreement_rows(instances: Sequence[Instance], detector: str) -> list[dict[str, Any]]:
    """The report rows: `agreement` (accuracy) and `kappa`, each with n, the labeller and the confusion counts."""
    agree = label_agreement(instances)
    why = "" if agree["n"] else "no claim has both a human label and the labeller's"
    return [{"detector": detector, "level": "claim", "table": LABELS, "metric": "agreement",
             "value": agree["accuracy"], **agree, "note": why},
            {"detector": detector, "level": "claim", "table": LABELS, "metric": "kappa", "value": agree["kappa"],
             **agree, "note": why or ("" if agree["kappa"] is not None else "undefined: one class only")}]
