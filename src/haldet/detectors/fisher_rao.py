"""Fisher-Rao distance of each answer token's next-token distribution from the uniform distribution, averaged over
the answer (Darrin, Piantanida & Colombo 2023, "Rainproof"; lm-polygraph's `FisherRao`).

FR(q, u) = (2/pi) arccos(sum_v sqrt(q_v u_v)), u = 1/V, q the model's distribution at temperature T (q ~ p^(1/T)):
0 for a uniform q, (2/pi) arccos(1/sqrt(V)) (close to 1) for a one-hot one. Far from uniform is confident, so the
score is s = -(1/N) sum_t FR(q_t, u) (higher = more likely hallucinated). Default T = 2 (lm-polygraph 0.7.0's and the
Rainproof code's). lm-polygraph 0.7.0 returns +(1/N) sum_t FR (higher = more confident); haldet negates it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._uniform import UniformDistanceDetector, tempered_log_coefficient
from haldet.detectors.base import register


@register("fisher_rao")
class FisherRao(UniformDistanceDetector):
    """s = -(1/N) sum_t (2/pi) arccos(BC(q_t, uniform)), BC the Bhattacharyya coefficient, q_t the next-token
    distribution at answer token t at `temperature` (0.5 / T and 1 / T must be 1 or 0.25, 0.5: T = 1 or 2)."""
    method_family = "information (token probabilities)"
    paper = ("Darrin, Piantanida & Colombo 2023, Rainproof: an umbrella to shield text generators from "
             "out-of-distribution data")
    peers = ("lm-polygraph",)

    defaults: ClassVar[dict[str, Any]] = {"temperature": 2.0}

    def distance(self, terms: np.ndarray) -> np.ndarray:
        bc = np.exp(tempered_log_coefficient(terms, 0.5, float(self.params["temperature"])))
        return (2.0 / np.pi) * np.arccos(np.clip(bc, 0.0, 1.0))
