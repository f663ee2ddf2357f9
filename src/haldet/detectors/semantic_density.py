"""Semantic Density (Qiu & Miikkulainen 2024, "Semantic Density: Uncertainty Quantification for Large Language
Models through Confidence Measurement in Semantic Space"): how much of the sampled probability mass lies close to
the answer in meaning, a kernel density estimate at the answer's point of semantic space.

Each response is a point of a semantic space in which entailment puts two responses at distance 0, neutrality at
sqrt(1/2) and contradiction at 1, so the NLI model's probabilities (premise "question + answer", hypothesis
"question + sample", the paper's input) give the expected squared distance E||v* - v_i||^2 = p_c + p_n / 2. With
the Epanechnikov kernel K = 1 - E||v* - v_i||^2 (the kernel's support condition, distance <= 1, always holds here:
p_c + p_n / 2 <= 1) and each distinct sample weighted by its length-normalised probability
p_i = exp(log P(y_i | x) / T_i):

    SD(y* | x) = sum_i p_i K(v*, v_i) / sum_i p_i        over the distinct non-empty samples,

a confidence in [0, 1]; the detector scores 1 - SD (higher = more likely hallucinated). Duplicate samples count once
(the paper samples until its references are distinct). NLI pairs go through the shared pair cache
(`haldet.detectors._consistency.pair_scores`), so a pair any detector of the run asked before is not asked again.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import answer_and_samples, pair_scores, sample_logliks, with_question
from haldet.detectors.base import Detector, Scores, register
from haldet.models.pairs.base import CONTRADICTION, NEUTRAL
from haldet.signals import Signal, SignalView


def density(contradiction: np.ndarray, neutral: np.ndarray, weights: np.ndarray) -> float:
    """sum_i w_i (1 - c_i - n_i / 2) / sum_i w_i (the kernel-weighted share of the samples' probability mass)."""
    kernel = 1.0 - contradiction - neutral / 2.0
    kernel = np.where(contradiction + neutral * np.sqrt(0.5) <= 1.0, kernel, 0.0)  # the kernel's support
    return float((weights * kernel).sum() / weights.sum())


@register("semantic_density")
class SemanticDensity(Detector):
    """s = 1 - SD: one minus the probability-weighted Epanechnikov kernel between the answer and its distinct
    samples in NLI space (see the module docstring). `length_normalize` False weights by the raw sequence
    probability; `include_question` False drops the question from the NLI texts."""

    method_family = "sample consistency"
    paper = "Qiu & Miikkulainen 2024, Semantic density: uncertainty quantification in semantic space"
    peers = ("lm-polygraph", "uqlm")
    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES, Signal.SAMPLE_LOGLIKS})
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli"}
    defaults: ClassVar[dict[str, Any]] = {
        "nli_model": "roberta-large-mnli", "fallback": "llm:smollm2-135m", "include_question": True,
        "length_normalize": True, "batch_size": 16, "max_length": 512, "device": "auto",
    }

    def _text(self, question: str, text: str) -> str:
        return with_question(question, text, bool(self.params["include_question"]))

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        todo: list[tuple[int, str, list[str], np.ndarray]] = []
        for i, (inst, resp, raw, ll) in enumerate(zip(items.instances, items.get(Signal.RESPONSE),
                                                      items.get(Signal.SAMPLES), items.get(Signal.SAMPLE_LOGLIKS),
                                                      strict=True)):
            usable = answer_and_samples(resp, raw)
            if isinstance(usable, str):
                out.invalid(i, usable)
                continue
            arr = sample_logliks(ll, len(raw))
            if arr is None:
                out.invalid(i, "sample log-likelihoods missing or misshapen")
                continue
            first: dict[str, int] = {}  # each distinct non-empty sample once, with its first draw's likelihood
            for k, s in enumerate(raw):
                if isinstance(s, str) and s.strip():
                    first.setdefault(s.strip(), k)
            rows = arr[list(first.values())]
            logp = rows[:, 0] / np.maximum(rows[:, 1], 1) if self.params["length_normalize"] else rows[:, 0]
            if not np.all(np.isfinite(logp)):
                out.invalid(i, "non-finite sample log-likelihood")
                continue
            weights = np.exp(logp - logp.max())  # the ratio is unchanged by the common factor exp(max)
            todo.append((i, self._text(inst.question, usable[0]),
                         [self._text(inst.question, s) for s in first], weights))
        pairs = [(answer, s) for _, answer, samples, _ in todo for s in samples if s != answer]
        probs = pair_scores(self, "nli", "nli_model", pairs, "semantic_density pairs") if pairs else None
        row = dict(zip(pairs, probs, strict=True)) if probs is not None else {}
        for i, answer, samples, weights in todo:
            rel = np.array([[1.0, 0.0, 0.0] if s == answer else row[(answer, s)] for s in samples])
            out.set(i, 1.0 - density(rel[:, CONTRADICTION], rel[:, NEUTRAL], weights))
        return out
