"""Conditional pointwise mutual information (van der Poel, Cotterell & Meister 2022, "Mutual information alleviates
hallucinations in abstractive summarization"; lm-polygraph's `MeanConditionalPointwiseMutualInformation`): PMI
counted only where the model is uncertain, the tokens at which it tends to hallucinate.

c_t = log p(y_t | y_<t, x) - lambda 1[H_t >= tau] log p(y_t | y_<t), H_t the entropy of the conditional next-token
distribution (TOKEN_ENTROPIES, from the same decoding), log p(y_t | y_<t) from the `unconditional` stage;
s = -(1/N) sum_t c_t. Defaults tau = 0.0656 and lambda = 3.599, the paper's best values (as lm-polygraph). With
`skip_first` (default, lm-polygraph's convention) the first token keeps log p(y_1 | x) alone.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.msp import answer_logprobs
from haldet.detectors.pmi import unconditional_logprobs
from haldet.signals import Signal, SignalView


@register("cpmi")
class ConditionalPointwiseMutualInformation(Detector):
    """s = -(1/N) sum_t [log p(y_t | y_<t, x) - lambda 1[H_t >= tau] log p(y_t | y_<t)]."""
    method_family = "information (token probabilities)"
    paper = ("van der Poel, Cotterell & Meister 2022, Mutual information alleviates hallucinations in abstractive "
             "summarization")
    peers = ("lm-polygraph",)

    requires = frozenset({Signal.TOKEN_LOGPROBS, Signal.ANSWER_LM_LOGPROBS, Signal.TOKEN_ENTROPIES})
    defaults: ClassVar[dict[str, Any]] = {"tau": 0.0656, "lambda": 3.599, "skip_first": True}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        rows = zip(items.get(Signal.TOKEN_LOGPROBS), items.get(Signal.ANSWER_LM_LOGPROBS),
                   items.get(Signal.TOKEN_ENTROPIES), strict=True)
        for i, (cond, uncond, entropies) in enumerate(rows):
            lp, why = answer_logprobs(cond)
            lm, why = unconditional_logprobs(lp, uncond) if lp is not None else (None, why)
            if lp is None or lm is None:
                out.invalid(i, why)
                continue
            if entropies is None:
                out.invalid(i, "token entropies missing")
                continue
            h = np.asarray(entropies, dtype=np.float64).reshape(-1)
            if h.shape != lp.shape or not np.all(np.isfinite(h)):
                out.invalid(i, f"{h.size} token entropies for {lp.size} answer tokens" if h.shape != lp.shape
                            else "non-finite token entropy")
                continue
            gate = h >= float(self.params["tau"])
            if self.params["skip_first"]:
                gate[0] = False
            out.set(i, float(-np.mean(lp - float(self.params["lambda"]) * gate * lm)))
        return out
