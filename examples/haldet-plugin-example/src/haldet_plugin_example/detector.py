"""min_token_prob: a hallucinated answer tends to contain at least one token the model found unlikely."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import Detector, Scores
from haldet.signals import Signal, SignalView


class MinTokenProb(Detector):
    """s = 1 - min_t p(token_t) over the answer's tokens. Registered by its entry point (no decorator needed)."""

    requires = frozenset({Signal.TOKEN_LOGPROBS})
    version = "1"

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, logprobs in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            lp = np.asarray(logprobs if logprobs is not None else [], dtype=np.float64)
            if lp.size == 0:
                out.invalid(i, "no answer tokens")
            elif not np.all(np.isfinite(lp)):
                out.invalid(i, "non-finite token log-probabilities")
            else:
                out.set(i, float(1.0 - np.exp(lp.min())))
        return out
