"""Renyi divergence at alpha = 1: the formula's 0/0 is handled as its limit, the KL divergence from uniform, read from
TOKEN_CHERNOFF's KL columns; hand-computed values, and continuity of D_alpha across alpha = 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from haldet.backends.hf.distribution import chernoff_terms
from haldet.detectors.base import DETECTORS
from haldet.schema import Generation, Instance
from haldet.signals import SignalView


def view(rows: list[np.ndarray]) -> SignalView:
    ids = [f"t/test/{i}" for i in range(len(rows))]
    inst = [Instance(id=i, dataset="t", scenario="qa_open", task_type="short_answer", question="q") for i in ids]
    gens = [Generation(id=i, prompt="p", response="r", token_ids=[0], token_logprobs=[-0.1], finish_reason="stop",
                       n_tokens=1, model="m") for i in ids]
    return SignalView(ids=ids, instances=inst, generations=gens,
                      loader=lambda s, wanted: [rows[ids.index(i)] for i in wanted])


def signal(*dists: list[float]) -> np.ndarray:
    return chernoff_terms(torch.log(torch.tensor(dists, dtype=torch.float64))).numpy()


def renyi_direct(p: np.ndarray, alpha: float, temperature: float) -> float:
    """D_alpha(q || u) straight from the formula (alpha != 1), q = p^(1/T) / Z, u uniform over len(p)."""
    q = p ** (1 / temperature)
    q = q / q.sum()
    return float(np.log((q ** alpha * (1 / len(p)) ** (1 - alpha)).sum()) / (alpha - 1))


def renyi(alpha: float, temperature: float, *dists: list[float]) -> float:
    det = DETECTORS.get("renyi_divergence")(alpha=alpha, temperature=temperature)
    return float(-det.score(view([signal(*dists)])).values[0])  # the score is minus the mean divergence


def test_alpha_one_is_the_kl_divergence_by_hand() -> None:
    # p = (1/2, 1/4, 1/4), V = 3, T = 1: KL(p || u) = log 3 - H(p) = log 3 - 1.5 log 2 = 0.0588915
    assert renyi(1.0, 1.0, [0.5, 0.25, 0.25]) == pytest.approx(math.log(3) - 1.5 * math.log(2), abs=1e-12)
    # T = 2: q = sqrt(p) / (sqrt(1/2) + 1) = (0.4142136, 0.2928932, 0.2928932); KL = sum q log(3 q) = 0.0142206
    z = math.sqrt(0.5) + 1.0
    q = (math.sqrt(0.5) / z, 0.5 / z, 0.5 / z)
    assert renyi(1.0, 2.0, [0.5, 0.25, 0.25]) == pytest.approx(sum(v * math.log(3 * v) for v in q), abs=1e-12)
    assert renyi(1.0, 2.0, [0.5, 0.25, 0.25]) == pytest.approx(0.0142206, abs=1e-7)
    # T = 4: q ~ p^(1/4); uniform: 0; a one-hot p at T = 1: log V (a zero-probability output adds 0, not NaN)
    q4 = np.array([0.5, 0.25, 0.25]) ** 0.25
    q4 /= q4.sum()
    assert renyi(1.0, 4.0, [0.5, 0.25, 0.25]) == pytest.approx(float((q4 * np.log(3 * q4)).sum()), abs=1e-12)
    assert renyi(1.0, 1.0, [1 / 3] * 3) == pytest.approx(0.0, abs=1e-12)
    assert renyi(1.0, 1.0, [1.0, 0.0, 0.0]) == pytest.approx(math.log(3), abs=1e-12)
    # the mean over the answer: a uniform second token halves it
    assert renyi(1.0, 1.0, [0.5, 0.25, 0.25], [1 / 3] * 3) == pytest.approx((math.log(3) - 1.5 * math.log(2)) / 2)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_alpha_one_is_continuous_with_the_formula_around_it(temperature: float) -> None:
    p = np.array([0.6, 0.2, 0.1, 0.05, 0.05])
    at_one = renyi(1.0, temperature, p.tolist())
    for eps in (1e-3, 1e-5):
        below, above = renyi_direct(p, 1 - eps, temperature), renyi_direct(p, 1 + eps, temperature)
        assert below <= at_one <= above  # D_alpha is non-decreasing in alpha
        assert abs(above - at_one) < 10 * eps and abs(at_one - below) < 10 * eps
    # and away from 1 the detector is the formula itself, on both sides of the limit (alpha / T recorded)
    for alpha in {1.0: [0.25, 0.5], 2.0: [0.5, 2.0], 4.0: [2.0, 4.0]}[temperature]:
        assert renyi(alpha, temperature, p.tolist()) == pytest.approx(renyi_direct(p, alpha, temperature), abs=1e-12)


def test_alpha_one_needs_a_recorded_temperature() -> None:
    with pytest.raises(ValueError, match="KL limit"):
        DETECTORS.get("renyi_divergence")(alpha=1.0, temperature=3.0)
    assert DETECTORS.get("renyi_divergence")(alpha=1.0).identity != DETECTORS.get("renyi_divergence")().identity
