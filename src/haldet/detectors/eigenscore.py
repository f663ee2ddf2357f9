"""EigenScore (paper appendix E.7; Chen et al. 2024, INSIDE): semantic spread of K stochastic answers measured
in the model's own hidden space.

Per item, the K sample vectors (the sample stage's pooled state of its configured layer) form X [K, D]; the
K x K covariance across samples (each sample centred over its features, as `np.cov` of the rows, the form of
INSIDE) is regularised with alpha I (alpha = 1e-3), and the score is the mean log10 singular value
(1/K) sum log10(max(sigma_i, 1e-12)). float64 throughout. Samples with a missing or non-finite vector are
dropped; fewer than two valid samples gives NaN. Training-free.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


def eigenscore(X: np.ndarray, alpha: float = 1e-3) -> float:
    """Mean log10 singular value of Cov(X) + alpha I for sample vectors X [K, D] (K >= 2)."""
    X = np.asarray(X, dtype=np.float64)
    cov = np.cov(X) + alpha * np.eye(X.shape[0])
    sigma = np.linalg.svd(cov, compute_uv=False)
    return float(np.mean(np.log10(np.maximum(sigma, 1e-12))))


@register("eigenscore")
class EigenScore(Detector):
    method_family = "internal states"
    paper = "Chen et al. 2024, INSIDE: LLMs' internal states retain the power of hallucination detection"
    peers = ("lm-polygraph", "TruthTorchLM")
    requires = frozenset({Signal.SAMPLE_HIDDEN})
    defaults: ClassVar[dict[str, Any]] = {"alpha": 1e-3, "max_samples": None}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        cap = self.params["max_samples"]
        for i, value in enumerate(items.get(Signal.SAMPLE_HIDDEN)):
            if value is None:
                out.invalid(i, "sample hidden states missing")
                continue
            X = np.asarray(value, dtype=np.float64)
            if X.ndim != 2:
                out.invalid(i, f"sample hidden states have shape {X.shape}, expected [K, D]")
                continue
            X = X[np.all(np.isfinite(X), axis=1)]
            if cap is not None:
                X = X[: int(cap)]
            if len(X) < 2:
                out.invalid(i, f"{len(X)} valid sample vector(s); EigenScore needs at least 2")
                continue
            out.set(i, eigenscore(X, float(self.params["alpha"])))
        return out
