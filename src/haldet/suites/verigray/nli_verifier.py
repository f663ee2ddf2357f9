"""NLI verifier (InFusE-style baseline of VeriGray, Zhang et al. 2024): does the item's source document (its
context) entail each unit of the response? Document = premise, unit text = hypothesis, through the NLI backends of
`haldet.models.pairs` (an HF MNLI model, or `llm:<model>` prompted entailment; which one ran is recorded in `meta`).

The premise is the item's context (the source document); an item without one is checked against its question.
Score per unit: max(P(neutral), P(contradiction)) - P(entailment), in [-1, 1], higher = less faithful. It is
positive exactly when entailment is not the most probable class, so `decision_threshold = 0` reproduces the
paper's mapping (entailment = Faithful, neutral or contradiction = Unfaithful) while the value still ranks units.
Variants: "document" (the whole document as premise) and "infuse" (premise grown from the most decisive document
sentences while P(neutral) falls); see `haldet.suites.verigray.nli`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import cache_for, pair_model
from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.unit import UnitScores
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT, NEUTRAL
from haldet.signals import Signal, SignalView
from haldet.suites.verigray.nli import VARIANTS, verify


@register("nli_verifier")
class NLIVerifier(Detector):
    method_family = "judges and verifiers"
    paper = "NLI entailment of each unit by the context (Honovich et al. 2022, TRUE); VeriGray's NLI baselines"
    peers = ()
    version = "1"
    requires = frozenset({Signal.RESPONSE})
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli", "sentences": "splitter"}
    levels: ClassVar[tuple[str, ...]] = ("response", "sentence", "claim", "span")
    variants: ClassVar[dict[str, str]] = VARIANTS
    decision_threshold: ClassVar[float] = 0.0  # > 0: entailment is not the most probable class
    defaults: ClassVar[dict[str, Any]] = {"variant": "document", "nli_model": "roberta-large-mnli",
                                          "fallback": "llm:smollm2-135m", "batch_size": 16, "max_length": 512,
                                          "device": "auto"}

    def score(self, items: SignalView) -> Scores:
        texts = [[r] for r in items.get(Signal.RESPONSE)]
        values, reasons = self._verify(items, texts)
        return Scores(np.array([v[0] for v in values]), [r[0] for r in reasons])

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        """Per item, one score per unit of `level` (aligned to `instance.units_of(level)`) with reasons."""
        texts = [[u.text or (inst.response or "")[u.start:u.end] for u in inst.units_of(level)]
                 for inst in items.instances]
        return UnitScores(*self._verify(items, texts))

    def _verify(self, items: SignalView, texts: list[list[str]]) -> tuple[list[np.ndarray], list[list[str]]]:
        values = [np.full(len(t), np.nan) for t in texts]
        reasons = [[""] * len(t) for t in texts]
        pairs: list[tuple[int, int, str, str]] = []
        for i, (inst, units) in enumerate(zip(items.instances, texts, strict=True)):
            premise = (inst.context or inst.question).strip()
            for u, text in enumerate(units):
                if not premise:
                    reasons[i][u] = "no source document (context or question) to verify against"
                elif not (text or "").strip():
                    reasons[i][u] = "empty response or unit"
                else:
                    pairs.append((i, u, premise, text.strip()))
        if pairs:
            model = pair_model(self, "nli", "nli_model", batch_size=self.params["batch_size"],
                               max_length=self.params["max_length"])
            variant = self.params["variant"]
            progress = self.progress("nli_verifier pairs", len(pairs)) if variant == "document" else None
            probs = verify(model, cache_for(self), [p[2] for p in pairs], [p[3] for p in pairs], variant=variant,
                           progress=progress)
            margin = np.maximum(probs[:, NEUTRAL], probs[:, CONTRADICTION]) - probs[:, ENTAILMENT]
            for (i, u, _, _), value in zip(pairs, margin, strict=True):
                values[i][u] = float(value)
        return values, reasons
