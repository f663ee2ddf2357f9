"""Minimum token probability (a common gray-box baseline, e.g. uqlm's scorer of the same name and the token-level
"Min" aggregation of Manakul et al. 2023): an answer is as doubtful as its least likely token."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.msp import answer_logprobs
from haldet.signals import Signal, SignalView


@register("min_probability")
class MinTokenProbability(Detector):
    """s = 1 - min_t p(y_t | y_<t, x) over the answer tokens (in [0, 1]; higher = a less likely weakest token)."""

    requires = frozenset({Signal.TOKEN_LOGPROBS})

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, value in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            lp, why = answer_logprobs(value)
            if lp is None:
                out.invalid(i, why)
            else:
                out.set(i, float(1.0 - np.exp(lp.min())))
        return out
