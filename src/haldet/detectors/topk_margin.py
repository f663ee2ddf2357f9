"""Mean top-1/top-2 margin (the margin of Scheffer et al. 2001's margin sampling, averaged over the answer's
tokens; a gray-box baseline in the LLM uncertainty literature): a model torn between its two best next tokens is
less sure of its answer.

Reads TOKEN_TOPK_LOGPROBS, whose row t holds the observed token's log-probability first and then the k - 1 most
likely other tokens in descending order. The distribution's two largest probabilities are therefore the two
largest entries of the row (the observed token need not be the most likely one: sampled answers)."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


def token_margins(topk_logprobs: np.ndarray) -> np.ndarray:
    """p_(1) - p_(2) per token from [T, k >= 2] log-probabilities (non-finite entries count as probability 0)."""
    p = np.exp(np.where(np.isfinite(topk_logprobs), topk_logprobs, -np.inf))
    top2 = -np.sort(-p, axis=1)[:, :2]
    return top2[:, 0] - top2[:, 1]


@register("topk_margin")
class TopKMargin(Detector):
    """s = 1 - (1/T) sum_t (p_(1),t - p_(2),t), p_(1) >= p_(2) the two largest next-token probabilities at
    answer token t (in [0, 1]; 1 when every step is a tie)."""
    method_family = "information (token probabilities)"
    paper = "Scheffer, Decomain & Wrobel 2001, margin sampling; the mean top-1/top-2 margin"
    peers = ("uqlm",)

    requires = frozenset({Signal.TOKEN_TOPK_LOGPROBS})

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, value in enumerate(items.get(Signal.TOKEN_TOPK_LOGPROBS)):
            if value is None:
                out.invalid(i, "top-k token log-probabilities missing")
                continue
            arr = np.asarray(value, dtype=np.float64)
            if arr.ndim != 2 or arr.shape[0] == 0:
                out.invalid(i, "empty response" if arr.size == 0 else f"top-k log-probabilities of shape {arr.shape}")
            elif arr.shape[1] < 2:
                out.invalid(i, "the top-k evidence holds only the observed token (tokens.top_k < 2)")
            elif not np.all(np.isfinite(arr[:, 0])):
                out.invalid(i, "non-finite observed-token log-probability")
            else:
                out.set(i, float(1.0 - token_margins(arr).mean()))
        return out
