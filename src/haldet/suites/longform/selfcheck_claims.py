"""Claim-level SelfCheck: each claim of the answer checked against the K sampled answers by NLI.

SelfCheckGPT (Manakul et al., 2023) asks whether stochastic samples of the same prompt contradict each sentence of
the answer; a long answer's unit is the claim, so here the hypothesis is each claim (the atomic fact's own words
when the unit carries them, `meta.claim`, else the answer span) and the premises are the K samples. A claim's score
is the mean over samples of P(contradiction) / (P(contradiction) + P(entailment)) (SelfCheckGPT's two-way
normalisation): high when the samples disagree with it. At response level the score is the mean over the answer's
claims (`unit`: the kind of units read, `claim` by default), or over its sentences when it has no such unit. The
NLI model and its offline fallback default to the `selfcheck_nli` detector's; pairs are cached as theirs are.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import nonempty, pair_scores
from haldet.detectors.base import Detector, Scores, UnitScores, register
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT
from haldet.schema import SpanLabel
from haldet.signals import Signal, SignalView
from haldet.text.claim_spans import sentence_spans


def claim_text(unit: SpanLabel) -> str:
    return str(unit.meta.get("claim") or unit.text).strip()


@register("selfcheck_claims")
class SelfCheckClaims(Detector):
    """Per claim: mean over the K samples of P(c)/(P(c)+P(e)), premise = sample, hypothesis = claim."""
    method_family = "sample consistency"
    paper = "Manakul et al. 2023, SelfCheckGPT, on the answer's claims (long-form suite)"
    peers = ("selfcheckgpt",)

    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES})
    levels: ClassVar[tuple[str, ...]] = ("claim", "sentence", "clause", "response")
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli"}
    defaults: ClassVar[dict[str, Any]] = {"nli_model": "roberta-large-mnli", "fallback": "llm:smollm2-135m",
                                          "batch_size": 16, "max_length": 512, "device": "auto", "unit": "claim"}

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        if level == "response":
            return super().score_units(items, level)
        return self._claim_scores(items, [[claim_text(u) for u in inst.units_of(level)] for inst in items.instances])

    def _claim_scores(self, items: SignalView, units: list[list[str]]) -> UnitScores:
        """Per item, the score of each of its claim texts `units[i]` against its samples."""
        samples = [nonempty(s) for s in items.get(Signal.SAMPLES)]
        pairs = [(s, u) for us, ss in zip(units, samples, strict=True) if ss for u in us for s in ss]
        probs = pair_scores(self, "nli", "nli_model", pairs, f"{self.name} pairs") if pairs else np.zeros((0, 3))
        values: list[np.ndarray] = []
        reasons: list[list[str]] = []
        pos = 0
        for us, ss in zip(units, samples, strict=True):
            if not ss:
                why = "no samples" if ss is None else "all samples are empty"
                values.append(np.full(len(us), np.nan))
                reasons.append([why] * len(us))
                continue
            if not us:
                values.append(np.zeros(0))
                reasons.append([])
                continue
            block = probs[pos : pos + len(us) * len(ss)].reshape(len(us), len(ss), -1)
            pos += len(us) * len(ss)
            values.append(self.unit_scores(block[..., CONTRADICTION], block[..., ENTAILMENT]))
            reasons.append([""] * len(us))
        return UnitScores(values, reasons)

    def unit_scores(self, c: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Per unit, from P(contradiction) and P(entailment) [units, samples]: the mean of c / (c + e)."""
        return np.asarray(np.where(c + e > 0, c / np.maximum(c + e, 1e-300), 0.5).mean(axis=1))

    def score(self, items: SignalView) -> Scores:
        """Response level: the mean of the answer's claim scores (units of kind `unit`; an answer without such
        units is read sentence by sentence, as SelfCheckGPT does)."""
        kind = self.params["unit"]
        texts = []
        for inst, response in zip(items.instances, items.get(Signal.RESPONSE), strict=True):
            claims = [claim_text(u) for u in inst.units_of(kind)]
            texts.append(claims or [response[a:b] for a, b in sentence_spans(response or "")])
        per = self._claim_scores(items, texts)
        out = Scores.empty(len(items))
        for i, (vals, why) in enumerate(zip(per.values, per.reasons, strict=True)):
            finite = vals[np.isfinite(vals)]
            if len(finite):
                out.set(i, float(finite.mean()))
            else:
                out.invalid(i, next((w for w in why if w), "no claim or sentence in the answer"))
        return out
