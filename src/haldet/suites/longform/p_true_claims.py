"""Claim-level P(True): the model's own belief in each claim of its answer, 1 - P(True) as the score.

The `claim_p_true` stage asks the model, after its answer, whether each claim (the fact's own words when the unit
carries them) is true and reads P(True) from the first reply position (True mass over True + False). A claim's score
is 1 - P(True): high when the model doubts what it said. At response level the score is the mean of the claim
scores over the answer's units of kind `unit` (`claim` by default). Needs next-token probabilities (a local model,
or an endpoint with top log-probs): the stage's records say what each prompt gave.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, UnitScores, register
from haldet.signals import Signal, SignalView


@register("p_true_claims")
class PTrueClaims(Detector):
    """Per claim: 1 - P(True) of the model asked whether the claim is true."""

    method_family = "self-assessment"
    paper = "Kadavath et al. 2022 (P(True)), asked of each claim of the answer (long-form suite)"
    peers = ()
    requires = frozenset({Signal.CLAIM_P_TRUE})
    levels: ClassVar[tuple[str, ...]] = ("claim", "sentence", "clause", "response")
    defaults: ClassVar[dict[str, Any]] = {"unit": "claim"}

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        if level == "response":
            return super().score_units(items, level)
        values, reasons = [], []
        for inst, asked in zip(items.instances, items.get(Signal.CLAIM_P_TRUE), strict=True):
            units = inst.units_of(level)
            vals, why = unit_doubts(units, None if asked is None else asked.get(level, []))
            values.append(vals)
            reasons.append(why)
        return UnitScores(values, reasons)

    def score(self, items: SignalView) -> Scores:
        """Response level: the mean of 1 - P(True) over the claims the stage asked about (units of kind `unit`)."""
        kind = self.params["unit"]
        out = Scores.empty(len(items))
        for i, asked in enumerate(items.get(Signal.CLAIM_P_TRUE)):
            if asked is None:
                out.invalid(i, "no claim P(True) record for this answer")
                continue
            ps = [float(a["p_true"]) for a in asked.get(kind, []) if a.get("p_true") is not None]
            if ps:
                out.set(i, float(np.mean([1.0 - p for p in ps])))
            else:
                out.invalid(i, f"no {kind} unit with a True/False probability in the answer")
        return out


def unit_doubts(units: list[Any], asked: list[dict[str, Any]] | None) -> tuple[np.ndarray, list[str]]:
    """1 - P(True) per unit, from the stage's records of the same units (in order, offsets checked)."""
    if asked is None:
        return np.full(len(units), np.nan), ["no claim P(True) record for this answer"] * len(units)
    if len(asked) != len(units) or any(a.get("start") is not None and (a["start"], a["end"]) != (u.start, u.end)
                                       for a, u in zip(asked, units, strict=False)):
        return np.full(len(units), np.nan), ["P(True) was asked about other units than these"] * len(units)
    vals = np.array([np.nan if a.get("p_true") is None else 1.0 - float(a["p_true"]) for a in asked], dtype=float)
    why = ["" if np.isfinite(v) else "the reply gave no True/False probability" for v in vals]
    return vals, why
