"""Renyi divergence of each answer token's next-token distribution from the uniform distribution, averaged over
the answer (Darrin, Piantanida & Colombo 2023, "Rainproof: An umbrella to shield text generators from
out-of-distribution data"; lm-polygraph's `RenyiNeg`, "neg" for negentropy).

D_a(q || u) = 1/(a - 1) log sum_v q_v^a u_v^(1 - a), u = 1/V, q the model's distribution at temperature T
(q ~ p^(1/T)); D is 0 for a uniform q and log V for a one-hot one. At a = 1 the formula is 0/0; D_1 is its limit,
the KL divergence KL(q || u) = sum_v q_v log(V q_v) = log V - H(q), read from the signal's KL columns (never a
division by zero; the limit is continuous in a, tests/detectors/test_renyi_divergence_limit.py). A distribution
far from uniform is a confident one, so the score is s = -(1/N) sum_t D_a(q_t || u) (higher = closer to uniform =
more likely hallucinated).
Defaults a = 0.5, T = 2 (lm-polygraph 0.7.0's and the Rainproof code's). lm-polygraph 0.7.0 returns
(1/N) sum_t [D_a(q_t || u) - 2 log V] (a normalisation slip, and the divergence's sign, higher = more confident);
haldet returns the divergence itself, negated (docs/detectors.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._uniform import UniformDistanceDetector, tempered_kl, tempered_log_coefficient
from haldet.detectors.base import register


@register("renyi_divergence")
class RenyiDivergence(UniformDistanceDetector):
    """s = -(1/N) sum_t D_alpha(q_t || uniform), q_t the next-token distribution at answer token t at `temperature`
    (alpha / T and 1 / T must be 1 or an exponent TOKEN_CHERNOFF records: 0.25, 0.5; alpha = 1 is the KL limit,
    T = 1, 2 or 4)."""
    method_family = "information (token probabilities)"
    paper = ("Darrin, Piantanida & Colombo 2023, Rainproof: an umbrella to shield text generators from "
             "out-of-distribution data")
    peers = ("lm-polygraph",)

    defaults: ClassVar[dict[str, Any]] = {"alpha": 0.5, "temperature": 2.0}

    def __init__(self, **params: Any) -> None:
        alpha = params.get("alpha", self.defaults["alpha"])
        if not float(alpha) > 0:
            raise ValueError(f"detector {self.name!r}: alpha must be positive, got {alpha}")
        super().__init__(**params)

    def distance(self, terms: np.ndarray) -> np.ndarray:
        alpha, temperature = float(self.params["alpha"]), float(self.params["temperature"])
        if alpha == 1.0:  # the 0/0 of the formula: its limit, the KL divergence
            return tempered_kl(terms, temperature)
        return tempered_log_coefficient(terms, alpha, temperature) / (alpha - 1.0)
