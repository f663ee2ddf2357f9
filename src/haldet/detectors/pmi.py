"""Pointwise mutual information between the answer and its prompt (Takayama & Arase 2019, "Relevant and
informative response generation using pointwise mutual information"; lm-polygraph's
`MeanPointwiseMutualInformation`): an answer the model would give just as readily without the question owes
little to the question.

PMI_t = log p(y_t | y_<t, x) - log p(y_t | y_<t), the second term from the `unconditional` stage's pass over the
answer alone (after the start token); s = -(1/N) sum_t PMI_t (higher = less informed by the prompt = more likely
hallucinated). With `skip_first` (default, lm-polygraph's convention) the first token contributes log p(y_1 | x)
alone, since its probability without the prompt depends only on the arbitrary start token.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.msp import answer_logprobs
from haldet.signals import Signal, SignalView


def unconditional_logprobs(lp: np.ndarray, value: object) -> tuple[np.ndarray | None, str]:
    """The answer's log-probabilities without the prompt, checked against the conditional ones `lp` (same tokens,
    finite), or None with why they cannot be used (shared with `cpmi`)."""
    if value is None:
        return None, "the answer's log-probabilities without the prompt (ANSWER_LM_LOGPROBS) missing"
    lm = np.asarray(value, dtype=np.float64).reshape(-1)
    if lm.shape != lp.shape:
        return None, f"{lm.size} unconditional log-probabilities for {lp.size} answer tokens"
    if not np.all(np.isfinite(lm)):
        return None, "non-finite unconditional token log-probability"
    return lm, ""


@register("pmi")
class PointwiseMutualInformation(Detector):
    """s = -(1/N) sum_t [log p(y_t | y_<t, x) - log p(y_t | y_<t)] (the t = 1 term without its second part when
    `skip_first`)."""
    method_family = "information (token probabilities)"
    paper = "Takayama & Arase 2019, Relevant and informative response generation using pointwise mutual information"
    peers = ("lm-polygraph",)

    requires = frozenset({Signal.TOKEN_LOGPROBS, Signal.ANSWER_LM_LOGPROBS})
    defaults: ClassVar[dict[str, Any]] = {"skip_first": True}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, (cond, uncond) in enumerate(zip(items.get(Signal.TOKEN_LOGPROBS),
                                               items.get(Signal.ANSWER_LM_LOGPROBS), strict=True)):
            lp, why = answer_logprobs(cond)
            lm, why = unconditional_logprobs(lp, uncond) if lp is not None else (None, why)
            if lp is None or lm is None:
                out.invalid(i, why)
                continue
            if self.params["skip_first"]:
                lm = np.concatenate([[0.0], lm[1:]])
            out.set(i, float(-np.mean(lp - lm)))
        return out
