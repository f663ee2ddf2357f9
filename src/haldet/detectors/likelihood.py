"""Likelihood (Guerreiro et al., 2023; HalluEntity section 4): token score = -log p(x_i | x_<i), aggregated over
each unit's tokens (mean by default) or over the whole answer at response level."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.unit import UnitDetector
from haldet.signals import Signal, SignalView


@register("likelihood")
class Likelihood(UnitDetector):
    method_family = "information (token probabilities)"
    paper = "token log-likelihood baseline (HalluEntity, Yeh et al. 2025)"
    peers = ("lm-polygraph", "TruthTorchLM")
    requires = UnitDetector.requires | {Signal.TOKEN_LOGPROBS}
    version = "1"

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        out: list[np.ndarray | str] = []
        for logprobs in items.get(Signal.TOKEN_LOGPROBS):
            out.append("no answer tokens" if logprobs is None or len(logprobs) == 0 else -np.asarray(logprobs))
        return out
