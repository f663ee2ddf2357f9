"""How far a claim labeller (NLI against a reference, the retrieval + LLM verifier) agrees with human labels: the
labeller's accuracy on a hand-labelled sample, as the response-level judges report theirs.

The sample is every claim that carries both a human label (the data's own, kept as `meta.labels.data_label` when
the labeller relabels it: FActScore's S / NS) and a label from the labeller; a claim the labeller could not label
(a failed verification) or the data left unlabelled (FActScore's IR) is not in it. Reported: n, accuracy, Cohen's
kappa (`haldet.judges.agreement.cohen_kappa`, scikit-learn's; chance-corrected, undefined when both raters use
one class only) and the four confusion counts `data<d>_labeller<l>` (1 = not supported / hallucination).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from haldet.errors import HaldetError
from haldet.judges.agreement import cohen_kappa
from haldet.judges.text import normalize
from haldet.schema import LABEL_META, Instance

LABELS = "claim labels"  # the `table` of the labeller's agreement with the data's


HUMAN = {"S": 0, "NS": 1}  # FActScore's labels: supported, not supported


def read_hand_labels(spec: str) -> dict[tuple[str, str], int]:
    """A hand-labelled sample of claims: JSON lines of {topic, claim, label S|NS}, keyed by (topic, normalised
    claim text)."""
    path = Path(spec).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HaldetError(f"cannot read the hand-labelled sample: {exc.strerror}",
                          where="suite_params.longform.label_sample",
                          hint="JSON lines of {topic, claim, label: S|NS}") from None
    out: dict[tuple[str, str], int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            out[(str(rec["topic"]), normalize(str(rec["claim"])))] = HUMAN[str(rec["label"]).strip()]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise HaldetError(f"line {n} of the hand-labelled sample is not a {{topic, claim, label S|NS}} record",
                              where=str(path), hint="one JSON object per line; label S (supported) or NS (not "
                                                    "supported)") from None
    return out


def with_hand_labels(instances: Sequence[Instance], sample: dict[tuple[str, str], int],
                     level: str = "claim") -> tuple[list[Instance], int]:
    """The instances with each claim the sample labels (same topic, same normalised words: the fact's own words
    or its span) carrying that human label as `data_label`; and how many sample claims were found."""
    out, found = [], set()
    for inst in instances:
        topic = str(inst.meta.get("topic") or "")
        units = list(inst.units)
        for k, u in enumerate(units):
            key = (topic, normalize(str(u.meta.get("claim") or u.text)))
            if u.kind == level and key in sample:
                found.add(key)
                labels = {**(u.meta.get(LABEL_META) or {}), "data_label": sample[key], "human": "label_sample"}
                units[k] = u.model_copy(update={"meta": {**u.meta, LABEL_META: labels}})
        out.append(inst.model_copy(update={"units": units}))
    return out, len(found)


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
    value = cohen_kappa([a for a, _ in both], [b for _, b in both], (0, 1))[0]
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
