"""Maximum sequence probability (MSP; the standard sequence-likelihood baseline of the uncertainty literature, e.g.
Fadeeva et al. 2023, lm-polygraph): how unlikely the model found its own whole answer."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


def answer_logprobs(value: object) -> tuple[np.ndarray | None, str]:
    """The answer's token log-probabilities as float64, or None with why they cannot be scored (shared by the
    token-probability detectors): no tokens, or a non-finite log-probability (a broken pass, never skipped)."""
    if value is None:
        return None, "token log-probabilities missing"
    lp = np.asarray(value, dtype=np.float64).reshape(-1)
    if lp.size == 0:
        return None, "empty response"
    if not np.all(np.isfinite(lp)):
        return None, "non-finite token log-probability"
    return lp, ""


class AnswerLogprobDetector(Detector):
    """A score from the answer's token log-probabilities alone (`value`); an answer without usable ones is NaN with
    the reason `answer_logprobs` gives."""

    requires = frozenset({Signal.TOKEN_LOGPROBS})

    def value(self, lp: np.ndarray) -> float:
        raise NotImplementedError

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, logprobs in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            lp, why = answer_logprobs(logprobs)
            if lp is None:
                out.invalid(i, why)
            else:
                out.set(i, self.value(lp))
        return out


@register("msp")
class MaximumSequenceProbability(AnswerLogprobDetector):
    """s = -log P(y | x) = -sum_t log p(y_t | y_<t, x) over the answer tokens (no length normalisation: longer
    answers score higher, as the method defines it; `perplexity` is the normalised form)."""
    method_family = "information (token probabilities)"
    paper = "maximum sequence probability, the sequence-likelihood baseline (e.g. Fadeeva et al. 2023, LM-Polygraph)"
    peers = ("lm-polygraph", "TruthTorchLM", "uqlm")

    def value(self, lp: np.ndarray) -> float:
        return float(-lp.sum())
