"""Distance of each answer token's next-token distribution from the uniform one, from `Signal.TOKEN_CHERNOFF`
(package-private: shared by `renyi_divergence` and `fisher_rao`).

The signal holds c(g) = log sum_v p_v^g (1/V)^(1 - g) for g in `CHERNOFF_EXPONENTS`. At temperature T the
distribution is q = p^(1/T) / sum p^(1/T), and log sum_v q_v^b (1/V)^(1 - b) = c(b/T) - b c(1/T) (the log V terms
cancel), with c(1) = 0; so a (b, T) pair is computable when b/T and 1/T are 1 or a recorded exponent. The KL
columns hold KL(q || u) itself for q at T = 1/g, g in `KL_EXPONENTS` (the Renyi divergence's limit at b = 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from haldet.detectors.base import Detector, Scores
from haldet.signals import CHERNOFF_EXPONENTS, CHERNOFF_WIDTH, KL_EXPONENTS, Signal, SignalView


def _column(g: float) -> int | None:
    """-1 for g = 1 (c(1) = 0), the column of a recorded exponent, or None."""
    if abs(g - 1.0) < 1e-12:
        return -1
    for k, e in enumerate(CHERNOFF_EXPONENTS):
        if abs(g - e) < 1e-12:
            return k
    return None


def _c(terms: np.ndarray, col: int) -> np.ndarray:
    return np.zeros(len(terms)) if col < 0 else terms[:, col]


def tempered_log_coefficient(terms: np.ndarray, b: float, temperature: float) -> np.ndarray:
    """[T] log sum_v q_v^b (1/V)^(1 - b) of each token's distribution q at `temperature`, from the signal's [T, E]."""
    cb, c1 = _column(b / temperature), _column(1.0 / temperature)
    if cb is None or c1 is None:
        raise ValueError(f"exponent {b} at temperature {temperature} needs sum p^{b / temperature:g} and "
                         f"sum p^{1 / temperature:g}; the signal records exponents {CHERNOFF_EXPONENTS} (and 1)")
    return _c(terms, cb) - b * _c(terms, c1)


def tempered_kl(terms: np.ndarray, temperature: float) -> np.ndarray:
    """[T] KL(q || uniform) of each token's distribution q at `temperature`, from the signal's KL columns."""
    for k, g in enumerate(KL_EXPONENTS):
        if abs(1.0 / temperature - g) < 1e-12:
            return terms[:, len(CHERNOFF_EXPONENTS) + k]
    raise ValueError(f"the KL limit at temperature {temperature} needs KL(p^{1 / temperature:g} / Z || u); the "
                     f"signal records it at temperatures {sorted(1 / g for g in KL_EXPONENTS)}")


class UniformDistanceDetector(Detector):
    """Mean over the answer's tokens of a distance from uniform (`distance`), negated: a distribution near uniform
    is an uncertain one, so higher = more likely hallucinated. An (alpha, temperature) the signal cannot give is
    refused when the detector is made (`distance` raises on a zero row)."""

    requires = frozenset({Signal.TOKEN_CHERNOFF})

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not float(self.params["temperature"]) > 0:
            raise ValueError(f"detector {self.name!r}: temperature must be positive, got {self.params['temperature']}")
        self.distance(np.zeros((1, CHERNOFF_WIDTH)))  # an (exponent, temperature) the signal cannot give is refused

    def distance(self, terms: np.ndarray) -> np.ndarray:
        """[T] distances of each token's tempered distribution from uniform."""
        raise NotImplementedError

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, value in enumerate(items.get(Signal.TOKEN_CHERNOFF)):
            if value is None:
                out.invalid(i, "next-token distribution statistics (TOKEN_CHERNOFF) missing")
                continue
            terms = np.asarray(value, dtype=np.float64)
            if terms.size == 0:
                out.invalid(i, "empty response")
            elif terms.ndim != 2 or terms.shape[1] != CHERNOFF_WIDTH:
                out.invalid(i, f"TOKEN_CHERNOFF of shape {terms.shape}")
            elif not np.all(np.isfinite(terms)):
                out.invalid(i, "non-finite next-token distribution statistic")
            else:
                out.set(i, float(-self.distance(terms).mean()))
        return out
