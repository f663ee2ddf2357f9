"""The five unit-level detectors' formulas against hand computations, and their token -> unit aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from haldet.detectors.ccp import ccp_scores
from haldet.detectors.focus import corrected_uncertainty, propagate
from haldet.detectors.unit_sar import scopes, weighted_nll


def test_focus_idf_corrected_uncertainty_by_hand() -> None:
    ids = np.array([[0, 1, 2]])
    lps = np.log(np.array([[0.5, 0.3, 0.005]]))  # the third is below the 0.01 threshold: dropped
    idf = np.array([1.0, 2.0, 5.0])
    p_hat = np.array([0.5 * 1, 0.3 * 2]) / 1.1
    bits = -sum(p * math.log2(p) for p in p_hat)
    expected = -math.log(p_hat[0] + 1e-10) + 2 ** bits
    assert corrected_uncertainty(ids, lps, idf, 0.01)[0] == pytest.approx(expected)
    # nothing passes the threshold: no distribution to correct, NaN (never a made-up number)
    assert np.isnan(corrected_uncertainty(ids, np.log(np.array([[0.004, 0.003, 0.002]])), idf, 0.01)[0])


def test_focus_propagation_by_hand() -> None:
    h = np.array([1.0, 2.0, 3.0])
    keywords = np.array([False, True, True])
    att = np.array([[0, 0, 0], [0.5, 0, 0], [0.2, 0.6, 0]])
    y = propagate(h, att, keywords, gamma=0.9)
    u1 = 2 + 0.9 * (0.5 / (0.5 + 1e-6)) * 1.0
    u2 = 3 + 0.9 * (0.2 * 1.0 + 0.6 * u1) / (0.8 + 1e-6)
    assert y == pytest.approx([0.0, u1, u2])  # the non-keyword scores 0 but still propagates its h


def test_ccp_by_hand() -> None:
    lps = np.log(np.array([[0.6, 0.3, 0.1]]))
    entail, contradict = np.array([[0.0, 1.0, 0.0]]), np.array([[0.0, 0.0, 1.0]])
    assert ccp_scores(lps, entail, contradict)[0] == pytest.approx(-math.log(0.9 / 1.0))
    neutral = np.zeros((1, 3))
    assert ccp_scores(lps, neutral, neutral)[0] == pytest.approx(0.0)  # only the token itself: p / p
    soft_e, soft_c = np.array([[0.0, 0.5, 0.0]]), np.array([[0.0, 0.5, 1.0]])
    assert ccp_scores(lps, soft_e, soft_c)[0] == pytest.approx(-math.log(0.75 / 1.0))


def test_token_sar_weights_and_scopes_by_hand() -> None:
    assert weighted_nll(np.array([-1.0, -2.0]), np.array([0.5, 1.5]), "sum") == pytest.approx([0.25, 1.5])
    assert weighted_nll(np.array([-1.0, -2.0]), np.array([0.5, 1.5]), "none") == pytest.approx([0.5, 3.0])
    assert weighted_nll(np.array([-1.0, -3.0]), np.zeros(2), "sum") == pytest.approx([0.5, 1.5])
    text = "Ab. Cd."
    offsets = np.array([[0, 2], [2, 3], [4, 6], [6, 7]])
    got = [(a, b, list(i)) for a, b, i in scopes(text, offsets, [0, 4])]
    assert got == [(0, 4, [0, 1]), (4, 7, [2, 3])]
    assert [(a, b, list(i)) for a, b, i in scopes(text, offsets, None)] == [(0, 7, [0, 1, 2, 3])]
