"""EigV (Lin, Trivedi & Sun 2023, "Generating with Confidence"): a continuous count of the meanings among the
samples, sum_k max(0, 1 - lambda_k) over the eigenvalues of the samples' normalised graph Laplacian.

Formula, graph weights (variants) and conventions: `haldet.detectors._graph`."""

from __future__ import annotations

import numpy as np

from haldet.detectors._graph import GraphDetector, eigv, weights
from haldet.detectors.base import register


@register("eigv")
class EigV(GraphDetector):
    """U_EigV = sum_k max(0, 1 - lambda_k), L = I - D^{-1/2} W D^{-1/2} over the non-empty samples (1 for m
    identical samples, m for m unrelated ones)."""
    method_family = "sample consistency"
    paper = "Lin, Trivedi & Sun 2024, Generating with confidence: uncertainty quantification for black-box LLMs"
    peers = ("lm-polygraph", "TruthTorchLM")

    def statistic(self, relation: np.ndarray) -> float:
        return eigv(weights(relation, self.params["variant"]))
