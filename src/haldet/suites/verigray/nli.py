"""NLI sentence verifiers: does the source document entail a summary sentence? (document = premise, sentence =
hypothesis), through the NLI backends of `haldet.models.pairs` (an HF MNLI model, or `llm:<model>` prompted entailment).

Variants (`verify`):
- "document": the whole document is the premise (the NLI model truncates what does not fit).
- "infuse": InFusE-style retrieval (Zhang et al. 2024), simplified: each document sentence is scored against the
  hypothesis, sentences are taken in order of increasing P(neutral) (most decisive first), and the premise grows
  one sentence at a time (kept in document order) while P(neutral) of the grown premise keeps falling; the last
  premise's probabilities are the verdict.

Both return P(entailment, neutral, contradiction) per sentence. The paper's binary mapping: the argmax class
entailment = Faithful, neutral or contradiction = Unfaithful; the continuous score is 1 - P(entailment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from haldet.models.pairs.base import NEUTRAL, PairModel
from haldet.models.pairs.cache import PairCache
from haldet.text.sentences import split_many

VARIANTS = {"document": "whole document as the premise",
            "infuse": "premise grown from the most decisive document sentences while P(neutral) falls (InFusE-style)"}
Progress = Callable[[int], None]


def verify(model: PairModel, cache: PairCache, documents: Sequence[str], sentences: Sequence[str], *,
           variant: str = "document", progress: Progress | None = None) -> np.ndarray:
    """[n, 3] NLI probabilities (entailment, neutral, contradiction) of document i entailing sentence i."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown NLI verifier variant {variant!r}; known: {sorted(VARIANTS)}")
    if not sentences:
        return np.zeros((0, 3))
    if variant == "document":
        return cache.scores(model, list(zip(documents, sentences, strict=True)), progress)
    doc_sents = dict(zip(sorted(set(documents)), split_many(sorted(set(documents))), strict=True))
    singles = [(d, h) for doc, h in zip(documents, sentences, strict=True) for d in doc_sents[doc] or [doc]]
    single = iter(cache.scores(model, singles, progress))
    out = np.zeros((len(sentences), 3))
    for i, (doc, hyp) in enumerate(zip(documents, sentences, strict=True)):
        parts = doc_sents[doc] or [doc]
        probs = np.stack([next(single) for _ in parts])
        out[i] = _grow(model, cache, parts, probs, hyp)
    return out


def _grow(model: PairModel, cache: PairCache, parts: list[str], probs: np.ndarray, hyp: str) -> np.ndarray:
    """The InFusE premise expansion for one hypothesis, given each document sentence's own probabilities."""
    order = sorted(range(len(parts)), key=lambda k: (probs[k, NEUTRAL], k))
    chosen = [order[0]]
    best = probs[order[0]]
    for k in order[1:]:
        trial = sorted([*chosen, k])
        premise = " ".join(parts[j] for j in trial)
        grown = cache.scores(model, [(premise, hyp)])[0]
        if grown[NEUTRAL] >= best[NEUTRAL]:
            break
        chosen, best = trial, grown
    return best

