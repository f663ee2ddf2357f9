"""Perplexity (appendix E.14) against hand computations."""

import math

import numpy as np

from haldet.detectors.base import DETECTORS
from haldet.signals import Signal, SignalView


def view(logprob_lists):
    ids = [f"d/s/{i}" for i in range(len(logprob_lists))]

    def loader(signal, wanted):
        assert signal is Signal.TOKEN_LOGPROBS
        return [np.asarray(logprob_lists[ids.index(i)]) for i in wanted]

    v = SignalView(ids=ids, instances=[], generations=[], loader=loader)
    v._cache[Signal.TOKEN_LOGPROBS] = [np.asarray(x, dtype=float) for x in logprob_lists]
    return v


def test_perplexity_formula_cap_and_invalid():
    det = DETECTORS.get("perplexity")()
    out = det.score(view([[-1.0, -3.0], [-0.5, float("nan"), -1.5], [-60.0], []]))
    assert out.values[0] == math.exp(2.0)
    assert out.values[1] == math.exp(1.0)  # non-finite entries filtered before the mean
    assert out.values[2] == 1e10           # mean NLL 60 > 50: capped
    assert math.isnan(out.values[3]) and out.reasons[3] == "empty response"
    assert det.family() == "gray" and not det.trains
