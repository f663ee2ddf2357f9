"""Ecc (Lin, Trivedi & Sun 2023, "Generating with Confidence"): eccentricity of the samples' spectral embeddings,
the Frobenius norm of their deviations from the mean embedding (rows of the eigenvectors of the normalised graph
Laplacian whose eigenvalues are below `threshold`).

Formula, graph weights (variants) and conventions: `haldet.detectors._graph`."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._graph import GraphDetector, eccentricity, weights
from haldet.detectors.base import register


@register("ecc")
class Ecc(GraphDetector):
    """U_Ecc = || [v_1 - v_bar, ..., v_m - v_bar] ||_F, v_j in R^k from the k eigenvectors of L with eigenvalue
    below `threshold` (default 0.9); 0 for identical samples."""
    method_family = "sample consistency"
    paper = "Lin, Trivedi & Sun 2024, Generating with confidence: uncertainty quantification for black-box LLMs"
    peers = ("lm-polygraph", "TruthTorchLM")

    defaults: ClassVar[dict[str, Any]] = {**GraphDetector.defaults, "threshold": 0.9}

    def statistic(self, relation: np.ndarray) -> float:
        return eccentricity(weights(relation, self.params["variant"]), float(self.params["threshold"]))
