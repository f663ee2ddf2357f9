"""Kernel Language Entropy (Nikitin, Kossen, Gal & Marttinen 2024, "Kernel Language Entropy: Fine-grained
Uncertainty Quantification for LLMs from Semantic Similarities"): the von Neumann entropy of a heat kernel over the
samples' semantic graph, a semantic entropy that also counts how close the meanings are.

Graph over the m non-empty samples: variant "nli" (the paper's) W_jk = f_jk + f_kj, both directions summed,
with f_jk = P(entailment | s_j, s_k) + 0.5 P(neutral | s_j, s_k) (the paper's weights w = (1, 0.5, 0) on the NLI
output, here its probabilities, as lm-polygraph 0.7.0 computes them); variant "jaccard" (offline) W = the
word-set Jaccard similarities. Laplacian
L = D - W, heat kernel K = expm(-t L) (t = `t`, 0.3 as lm-polygraph's default), scaled to unit diagonal and divided
by m (unit trace: a density matrix), KLE = -tr(K log K) = -sum_i mu_i log mu_i over K's eigenvalues (natural log;
0 log 0 = 0). `scale` divides by log m (lm-polygraph's default; off here, as in the paper).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from scipy.linalg import expm

from haldet.detectors._graph import GraphDetector
from haldet.detectors.base import register
from haldet.models.pairs.base import ENTAILMENT, NEUTRAL


def von_neumann_entropy(K: np.ndarray) -> float:
    """-sum mu log mu over the eigenvalues of a symmetric unit-trace matrix (eigenvalues <= 1e-12 contribute 0)."""
    mu = np.linalg.eigvalsh((K + K.T) / 2.0)
    mu = mu[mu > 1e-12]
    return float(-(mu * np.log(mu)).sum())


def heat_kernel_entropy(W: np.ndarray, t: float) -> float:
    """KLE of a symmetric weight matrix: the von Neumann entropy of expm(-t (D - W)), unit diagonal, / m."""
    L = np.diag(W.sum(axis=1)) - W
    K = expm(-t * L)
    d = np.sqrt(np.diag(K))
    return von_neumann_entropy(K / np.outer(d, d) / len(W))


@register("kle")
class KernelLanguageEntropy(GraphDetector):
    method_family = "sample consistency"
    paper = "Nikitin et al. 2024, Kernel language entropy"
    peers = ("lm-polygraph", "TruthTorchLM")
    variants: ClassVar[dict[str, str]] = {
        "nli": "W = P(entailment) + 0.5 P(neutral), both directions summed, from the NLI model (the paper's graph)",
        "jaccard": "W = Jaccard similarity of the samples' word sets (no model)",
    }
    defaults: ClassVar[dict[str, Any]] = {**GraphDetector.defaults, "variant": "nli", "t": 0.3, "scale": False}

    def statistic(self, relation: np.ndarray) -> float:
        if self.params["variant"] == "jaccard":
            W = relation
        else:
            f = relation[..., ENTAILMENT] + 0.5 * relation[..., NEUTRAL]
            W = f + f.T
        value = heat_kernel_entropy(W, float(self.params["t"]))
        return value / np.log(len(W)) if self.params["scale"] else value
