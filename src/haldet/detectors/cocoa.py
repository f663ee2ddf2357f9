"""CoCoA (Vashurin et al. 2025, "Uncertainty Quantification for LLMs through Minimum Bayes Risk: Bridging
Confidence and Consistency"): the answer's own uncertainty multiplied by how much the samples disagree with it.

U_CoCoA(y*) = u(y*) * (1/M) sum_i (1 - s(y*, y_i)) over the M non-empty samples y_i, with u the answer's
confidence-based uncertainty (variants): "msp" -log P(y* | x) = -sum_t log p_t; "ppl" the log-perplexity
-(1/T) sum_t log p_t; "entropy" the mean token entropy (1/T) sum_t H_t of the answer (ANSWER_ENTROPIES, from the
generate stage's token pass). s is a lexical similarity, so the method runs without any model: ROUGE-L F1
(`similarity` "rougeL", default; rouge-score, stemmed) or the Jaccard similarity of word sets ("jaccard"), taken
from the shared relation matrix of answer + samples (`haldet.detectors._relations`). "embedding" takes s from
sentence embeddings instead (cosine clipped to [0, 1], `embedding_model`, default the embedded MiniLM), shared
evidence: each text embedded once for every reader (`haldet.models.pairs.embeddings`). The paper's default s is a
cross-encoder similarity; the similarity chosen is part of every score's identity."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import answer_and_samples
from haldet.detectors._relations import relation_matrices
from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.msp import answer_logprobs
from haldet.signals import Signal, SignalView


@register("cocoa")
class CoCoA(Detector):
    method_family = "sample consistency"
    paper = "Vashurin et al. 2025, Uncertainty quantification for LLMs through minimum Bayes risk (CoCoA)"
    peers = ("lm-polygraph", "uqlm")
    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES, Signal.TOKEN_LOGPROBS})
    variants: ClassVar[dict[str, str]] = {
        "msp": "(-sum_t log p_t) x mean sample dissimilarity (CoCoA_MSP)",
        "ppl": "(-(1/T) sum_t log p_t) x mean sample dissimilarity (CoCoA_PPL)",
        "entropy": "mean token entropy x mean sample dissimilarity (CoCoA_MTE)",
    }
    auxiliary: ClassVar[dict[str, str]] = {"embedding_model": "similarity"}
    defaults: ClassVar[dict[str, Any]] = {"variant": "msp", "similarity": "rougeL", "use_stemmer": True,
                                          "embedding_model": "minilm", "device": "auto"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["similarity"] not in ("rougeL", "jaccard", "embedding"):
            raise ValueError(f"cocoa: similarity must be 'rougeL', 'jaccard' or 'embedding', "
                             f"not {self.params['similarity']!r}")
        if self.params["similarity"] != "embedding":
            self.params["embedding_model"] = None  # no model produces these numbers: none is named in the identity

    def signals(self) -> frozenset[Signal]:
        if self.params["variant"] == "entropy":
            return frozenset({Signal.RESPONSE, Signal.SAMPLES, Signal.ANSWER_ENTROPIES})
        return self.requires

    def _uncertainty(self, value: Any) -> tuple[float | None, str]:
        variant = self.params["variant"]
        if variant == "entropy":
            if value is None:
                return None, "token entropies missing"
            h = np.asarray(value, dtype=np.float64).reshape(-1)
            if h.size == 0:
                return None, "empty response"
            if not np.all(np.isfinite(h)):
                return None, "non-finite token entropy"
            return float(h.mean()), ""
        lp, why = answer_logprobs(value)
        if lp is None:
            return None, why
        return float(-lp.sum() if variant == "msp" else -lp.mean()), ""

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        source = Signal.ANSWER_ENTROPIES if self.params["variant"] == "entropy" else Signal.TOKEN_LOGPROBS
        todo: list[tuple[int, float, list[str]]] = []
        for i, (resp, raw, value) in enumerate(zip(items.get(Signal.RESPONSE), items.get(Signal.SAMPLES),
                                                   items.get(source), strict=True)):
            usable = answer_and_samples(resp, raw)
            u, why = self._uncertainty(value)
            if isinstance(usable, str):
                out.invalid(i, usable)
            elif u is None:
                out.invalid(i, why)
            else:
                todo.append((i, u, [usable[0], *usable[1]]))
        matrices = relation_matrices(self, self.params["similarity"], [t for _, _, t in todo], rows=1)
        for (i, u, _), relation in zip(todo, matrices, strict=True):
            out.set(i, u * float(np.mean(1.0 - relation[0, 1:])))
        return out
