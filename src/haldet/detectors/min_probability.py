"""Minimum token probability (a common gray-box baseline, e.g. uqlm's scorer of the same name and the token-level
"Min" aggregation of Manakul et al. 2023): an answer is as doubtful as its least likely token."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.msp import AnswerLogprobDetector


@register("min_probability")
class MinTokenProbability(AnswerLogprobDetector):
    """s = 1 - min_t p(y_t | y_<t, x) over the answer tokens (in [0, 1]; higher = a less likely weakest token)."""
    method_family = "information (token probabilities)"
    paper = "Manakul et al. 2023, SelfCheckGPT (token Min aggregation)"
    peers = ("uqlm",)

    def value(self, lp: np.ndarray) -> float:
        return float(1.0 - np.exp(lp.min()))
