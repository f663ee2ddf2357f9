"""Semantic entropy (Kuhn et al. 2023, Farquhar et al. 2024; paper appendix E.6): entropy over meanings."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import pair_scores, sample_logliks, with_question
from haldet.detectors.base import Detector, Scores, register
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT, NEUTRAL
from haldet.signals import Signal, SignalView


def cluster_ids(n: int, equivalent: Any) -> list[int]:
    """Greedy clustering of the source: each unassigned sample opens a class and takes every later unassigned
    sample equivalent to it. `equivalent(i, j)` decides one ordered pair i < j."""
    ids = [-1] * n
    nxt = 0
    for i in range(n):
        if ids[i] != -1:
            continue
        ids[i] = nxt
        for j in range(i + 1, n):
            if ids[j] == -1 and equivalent(i, j):
                ids[j] = nxt
        nxt += 1
    return ids


def cluster_entropy(ids: list[int], weights: np.ndarray) -> float:
    """-sum_c p_c log(p_c + 1e-10), p_c the weight mass of class c (raw, not divided by the class count)."""
    mass = np.zeros(max(ids) + 1)
    np.add.at(mass, np.asarray(ids), weights)
    return float(-(mass * np.log(mass + 1e-10)).sum())


def sample_weights(logliks: np.ndarray | None) -> np.ndarray | None:
    """Softmax of sequence log-likelihoods, or None when any is missing or non-finite (caller: uniform)."""
    if logliks is None or logliks.size == 0 or not np.all(np.isfinite(logliks)):
        return None
    z = logliks - logliks.max()
    w = np.exp(z)
    return w / w.sum()


@register("semantic_entropy")
class SemanticEntropy(Detector):
    """Samples are clustered by bidirectional entailment of "question + answer" texts (the source puts the
    question in the NLI input); classes carry the softmax of the samples' sequence log-likelihoods (uniform
    when any is missing or non-finite); s = raw entropy over classes.

    `equivalence`: "strict" (entailment both ways: the paper's rule and Farquhar et al.'s strict option) or
    "loose" (Farquhar et al.'s default: no contradiction either way and not neutral both ways).
    """
    method_family = "sample consistency"
    paper = "Kuhn, Gal & Farquhar 2023, Semantic uncertainty; Farquhar et al. 2024 (Nature)"
    peers = ("lm-polygraph", "TruthTorchLM", "uqlm")

    requires = frozenset({Signal.SAMPLES, Signal.SAMPLE_LOGLIKS})
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli"}
    defaults: ClassVar[dict[str, Any]] = {
        "nli_model": "roberta-large-mnli", "fallback": "llm:smollm2-135m", "include_question": True,
        "equivalence": "strict", "length_normalize": False, "min_samples": 2,
        "batch_size": 16, "max_length": 512, "device": "auto",
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["equivalence"] not in ("strict", "loose"):
            raise ValueError(f"semantic_entropy: equivalence must be 'strict' or 'loose', "
                             f"not {self.params['equivalence']!r}")

    def _text(self, question: str, answer: str) -> str:
        return with_question(question, answer, bool(self.params["include_question"]))

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        prepared: list[tuple[int, list[str], np.ndarray | None]] = []
        pairs: list[tuple[str, str]] = []
        n_uniform = 0
        for i, (inst, raw, ll) in enumerate(zip(items.instances, items.get(Signal.SAMPLES),
                                                items.get(Signal.SAMPLE_LOGLIKS), strict=True)):
            if raw is None:
                out.invalid(i, "no samples")
                continue
            keep = [k for k, s in enumerate(raw) if isinstance(s, str) and s.strip()]
            if len(keep) < self.params["min_samples"]:
                out.invalid(i, f"{len(keep)} non-empty sample(s); need {self.params['min_samples']}")
                continue
            arr = sample_logliks(ll, len(raw))
            lls = None
            if arr is not None:
                lls = arr[keep, 0] / np.maximum(arr[keep, 1], 1) if self.params["length_normalize"] else arr[keep, 0]
            weights = sample_weights(lls)
            n_uniform += weights is None
            texts = [self._text(inst.question, raw[k].strip()) for k in keep]
            prepared.append((i, texts, weights))
            for a in range(len(texts)):
                for b in range(a + 1, len(texts)):
                    if texts[a] != texts[b]:
                        pairs += [(texts[a], texts[b]), (texts[b], texts[a])]
        self.meta["uniform_weights"] = n_uniform
        label: dict[tuple[str, str], int] = {}
        if pairs:
            probs = pair_scores(self, "nli", "nli_model", pairs, "semantic_entropy pairs")
            label = {p: int(np.argmax(v)) for p, v in zip(pairs, probs, strict=True)}
        strict = self.params["equivalence"] == "strict"

        for i, texts, weights in prepared:
            def equivalent(a: int, b: int, texts: list[str] = texts) -> bool:
                if texts[a] == texts[b]:
                    return True
                both = (label[(texts[a], texts[b])], label[(texts[b], texts[a])])
                if strict:
                    return both == (ENTAILMENT, ENTAILMENT)
                return CONTRADICTION not in both and both != (NEUTRAL, NEUTRAL)

            ids = cluster_ids(len(texts), equivalent)
            w = weights if weights is not None else np.full(len(texts), 1.0 / len(texts))
            out.set(i, cluster_entropy(ids, w))
        return out
