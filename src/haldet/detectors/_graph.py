"""The graph-spectral uncertainty measures of Lin, Trivedi & Sun (2023, "Generating with Confidence: Uncertainty
Quantification for Black-box Large Language Models"), as plain functions, and the base class of their detectors.

The m sampled responses are the nodes of a weighted graph W (m x m, symmetric, W_jj = 1). Its degree matrix is
D = diag(W 1) and its symmetric normalised Laplacian L = I - D^{-1/2} W D^{-1/2}, with eigenvalues
0 = lambda_1 <= ... <= lambda_m. The paper's uncertainty measures (higher = more uncertain):

- EigV = sum_k max(0, 1 - lambda_k): a continuous count of the graph's connected components (clusters of meaning).
- Deg = trace(m I - D) / m^2: one minus the mean degree share (0 when every pair is fully similar).
- Ecc = || [v_1 - v_bar, ..., v_m - v_bar] ||_F, v_j the j-th row of the eigenvectors of L whose eigenvalues are
  below `threshold` (0.9, the convention lm-polygraph follows), v_bar their mean: how far the responses' spectral
  embeddings lie from their centre.
- NumSemSets = the number of semantic sets: connected components of the graph that links two responses when they
  are equivalent (NLI: entailment more likely than contradiction in both directions).

Weights: Jaccard similarity of the word sets (the paper's lexical choice), or NLI: a_jk = P(entail | s_j, s_k)
("nli_entail") or 1 - P(contradict | s_j, s_k) ("nli_contra"), symmetrised as W = (A + A^T) / 2.

A package-private helper module of `haldet.detectors`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import nonempty, with_question
from haldet.detectors._relations import relation_matrices
from haldet.detectors.base import Detector, Scores
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT
from haldet.signals import Signal, SignalView

SIMILARITIES: dict[str, str] = {
    "jaccard": "Jaccard similarity of the responses' word sets (no model)",
    "nli_entail": "W = (A + A^T)/2, A_jk = P(entailment | premise s_j, hypothesis s_k) from the NLI model",
    "nli_contra": "W = (A + A^T)/2, A_jk = 1 - P(contradiction | s_j, s_k) from the NLI model",
}
NLI_DEFAULTS: dict[str, Any] = {"nli_model": "roberta-large-mnli", "fallback": "llm:smollm2-135m", "batch_size": 16,
                                "max_length": 512, "device": "auto"}


def laplacian(W: np.ndarray) -> np.ndarray:
    """Symmetric normalised graph Laplacian I - D^{-1/2} W D^{-1/2} of a weight matrix with positive degrees."""
    W = np.asarray(W, dtype=np.float64)
    inv = 1.0 / np.sqrt(W.sum(axis=1))
    return np.eye(len(W)) - inv[:, None] * W * inv[None, :]


def eigv(W: np.ndarray) -> float:
    """sum_k max(0, 1 - lambda_k) over the eigenvalues of the normalised Laplacian."""
    lam = np.linalg.eigvalsh(laplacian(W))
    return float(np.clip(1.0 - lam, 0.0, None).sum())


def degree(W: np.ndarray) -> float:
    """trace(m I - D) / m^2 = 1 - sum_jk W_jk / m^2."""
    W = np.asarray(W, dtype=np.float64)
    m = len(W)
    return float((m * m - W.sum()) / (m * m))


def eccentricity(W: np.ndarray, threshold: float = 0.9) -> float:
    """Frobenius norm of the centred spectral embeddings (eigenvectors of eigenvalues below `threshold`). The
    norm does not depend on the basis chosen inside a repeated eigenvalue's eigenspace."""
    lam, vec = np.linalg.eigh(laplacian(W))
    V = vec[:, lam < threshold]
    return float(np.linalg.norm(V - V.mean(axis=0, keepdims=True)))


def num_sets(linked: np.ndarray) -> int:
    """Connected components of the graph whose edges are the True entries of a symmetric boolean matrix."""
    n = len(linked)
    component = [-1] * n
    count = 0
    for start in range(n):
        if component[start] != -1:
            continue
        stack = [start]
        component[start] = count
        while stack:
            node = stack.pop()
            for other in np.flatnonzero(linked[node]):
                if component[other] == -1:
                    component[other] = count
                    stack.append(int(other))
        count += 1
    return count


def weights(relation: np.ndarray, similarity: str) -> np.ndarray:
    """The symmetric graph weights W of one relation matrix (see the module docstring)."""
    if similarity == "jaccard":
        return relation
    A = relation[..., ENTAILMENT] if similarity == "nli_entail" else 1.0 - relation[..., CONTRADICTION]
    return (A + A.T) / 2.0


class GraphDetector(Detector):
    """Scores an item from the graph of its non-empty samples; subclasses give `statistic(relation)` and may
    narrow `variants` (the similarity). Fewer than `min_samples` non-empty samples is invalid. `include_question`
    (NLI variants only) puts the question before each sample, semantic entropy's NLI input, so the two share pairs."""

    version = "2"  # 2: the question-prefixed NLI text is stripped as semantic entropy's is (`with_question`)
    requires = frozenset({Signal.SAMPLES})
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli"}
    variants: ClassVar[dict[str, str]] = SIMILARITIES
    defaults: ClassVar[dict[str, Any]] = {"variant": "jaccard", "min_samples": 2, "include_question": False,
                                          **NLI_DEFAULTS}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["variant"] == "jaccard":
            self.params["nli_model"] = None  # no model produces these numbers: none is named in the identity

    @property
    def relation_kind(self) -> str:
        return "jaccard" if self.params["variant"] == "jaccard" else "nli"

    def statistic(self, relation: np.ndarray) -> float:
        raise NotImplementedError

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        todo: list[tuple[int, list[str]]] = []
        for i, (inst, raw) in enumerate(zip(items.instances, items.get(Signal.SAMPLES), strict=True)):
            samples = nonempty(raw)
            if samples is None:
                out.invalid(i, "no samples")
            elif len(samples) < int(self.params["min_samples"]):
                out.invalid(i, f"{len(samples)} non-empty sample(s); need {self.params['min_samples']}")
            else:
                use_q = self.relation_kind == "nli" and bool(self.params["include_question"])
                todo.append((i, [with_question(inst.question, s, use_q) for s in samples]))
        matrices = relation_matrices(self, self.relation_kind, [t for _, t in todo])
        for (i, _), relation in zip(todo, matrices, strict=True):
            value = self.statistic(relation)
            if np.isfinite(value):
                out.set(i, value)
            else:
                out.invalid(i, "non-finite graph statistic")
        return out
