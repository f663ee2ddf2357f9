"""A long answer's response-level score from its claims, so a biography gets an honest response-level row too.

Response-level AUROC over a token average hides a long answer's few invented facts among many right ones. Here each
answer's score comes from its claim scores (a run's claim-level rows, `unit_scores.csv`):

- `worst_claim`: the highest claim score of the answer (its most suspect claim);
- `claim_share`: the share of its claims scoring above the median claim score of the cell (a label-free cut, the
  same for every answer of the cell), an estimate of the share of unsupported claims.

Each is evaluated against the answer's labels from its claims: AUROC and AUPR with "holds at least one unsupported
claim" as the positive class, and Spearman's rho with the answer's true unsupported share (FActScore's 1 - score,
no threshold). Claims without a binary label (FActScore's IR) are scored but do not label the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from haldet.evaluation.metrics import aupr, auroc

FROM_CLAIMS = "response from claims"  # the `table` of these rows
AGGREGATES = ("worst_claim", "claim_share")


def _groups(unit_rows: Sequence[dict[str, Any]], level: str) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    out: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in unit_rows:
        if r.get("level") == level and r.get("part") == "test":
            key = (str(r["dataset"]), str(r["model"]), str(r["detector"]), str(r.get("variant") or ""),
                   str(r.get("train_labels") or ""))
            out.setdefault(key, []).append(r)
    return out


def response_scores(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per item of one cell and detector: its claim-derived scores and its labels from its claims."""
    finite = [float(r["score"]) for r in rows if r.get("score") is not None and np.isfinite(float(r["score"]))]
    cut = float(np.median(finite)) if finite else float("nan")
    items: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        items.setdefault(str(r["item_id"]), []).append(r)
    out = {}
    for item, claims in items.items():
        scores = np.array([float(c["score"]) for c in claims if c.get("score") is not None], dtype=float)
        scores = scores[np.isfinite(scores)]
        labels = [int(c["label"]) for c in claims if c.get("label") in (0, 1, "0", "1")]
        out[item] = {"worst_claim": float(scores.max()) if len(scores) else float("nan"),
                     "claim_share": float(np.mean(scores > cut)) if len(scores) else float("nan"),
                     "label": (int(any(labels)) if labels else None),
                     "unsupported_share": (float(np.mean(labels)) if labels else None)}
    return out


def from_claims_rows(unit_rows: Sequence[dict[str, Any]], level: str = "claim") -> list[dict[str, Any]]:
    """The response-level rows computed from each answer's claim scores, per cell, detector and aggregate."""
    rows = []
    for (dataset, model, detector, variant, train_labels), group in sorted(_groups(unit_rows, level).items()):
        per_item = response_scores(group)
        name = detector + (f"[{variant}]" if variant else "")
        for how in AGGREGATES:
            kept = [v for v in per_item.values() if v["label"] is not None and np.isfinite(v[how])]
            y = np.array([v["label"] for v in kept], dtype=int)
            s = np.array([v[how] for v in kept], dtype=float)
            share = np.array([v["unsupported_share"] for v in kept], dtype=float)
            both = len(set(y.tolist())) == 2
            rho = spearmanr(s, share).statistic if len(kept) > 2 and np.ptp(s) > 0 and np.ptp(share) > 0 else None
            base = {"dataset": dataset, "model": model, "detector": name, "level": "response",
                    "table": FROM_CLAIMS, "aggregate": how, "from_level": level, "train_labels": train_labels,
                    "n": len(kept), "n_positive": int(y.sum())}
            why = "" if both else "undefined: the answers' claims give only one class"
            rows += [{**base, "metric": "auroc", "value": auroc(y, s) if both else None, "note": why},
                     {**base, "metric": "aupr", "value": aupr(y, s) if both else None, "note": why},
                     {**base, "metric": "spearman_unsupported_share",
                      "value": None if rho is None or not np.isfinite(rho) else float(rho),
                      "note": "" if rho is not None else "undefined: fewer than 3 answers or a constant score"}]
    return rows
