"""Perplexity (paper appendix E.14): exp of the mean negative log-likelihood of the answer tokens."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


@register("perplexity")
class Perplexity(Detector):
    """s = exp(-(1/T) sum log p(y_t | y_<t, x)); capped at 1e10 when the mean NLL exceeds 50 (as in E.14)."""
    method_family = "information (token probabilities)"
    paper = "perplexity of the answer (Ren et al. 2023, OOD detection and selective generation; OpenHalDet E.14)"
    peers = ("lm-polygraph", "uqlm")

    requires = frozenset({Signal.TOKEN_LOGPROBS})
    defaults: ClassVar[dict[str, Any]] = {"nll_cap": 50.0, "cap_value": 1e10}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, logprobs in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            lp = np.asarray(logprobs, dtype=np.float64)
            finite = lp[np.isfinite(lp)]
            if finite.size == 0:
                out.invalid(i, "empty response" if lp.size == 0 else "no finite token log-probabilities")
                continue
            nll = -finite.mean()
            out.set(i, self.params["cap_value"] if nll > self.params["nll_cap"] else float(np.exp(nll)))
        return out
