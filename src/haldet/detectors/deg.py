"""Deg (Lin, Trivedi & Sun 2023, "Generating with Confidence"): how little the samples are connected, from the
degree matrix of their similarity graph.

Formula, graph weights (variants) and conventions: `haldet.detectors._graph`."""

from __future__ import annotations

import numpy as np

from haldet.detectors._graph import GraphDetector, degree, weights
from haldet.detectors.base import register


@register("deg")
class Deg(GraphDetector):
    """U_Deg = trace(m I - D) / m^2, D = diag(W 1) over the m non-empty samples (0 when all are identical)."""
    method_family = "sample consistency"
    paper = "Lin, Trivedi & Sun 2024, Generating with confidence: uncertainty quantification for black-box LLMs"
    peers = ("lm-polygraph", "TruthTorchLM")

    def statistic(self, relation: np.ndarray) -> float:
        return degree(weights(relation, self.params["variant"]))
