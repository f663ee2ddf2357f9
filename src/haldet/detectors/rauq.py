"""RAUQ, recurrent attention-based uncertainty quantification (Vazhentsev et al. 2025, "Uncertainty-aware attention
heads: efficient unsupervised uncertainty quantification for LLMs"; lm-polygraph's `RAUQ`): in some heads, attention
to the preceding token drops when the model generates a wrong token, and a recurrent confidence carries that drop
along the answer.

For each selected layer l (default the middle third, layers floor(L/3) .. ceil(2L/3), as the paper's code and
lm-polygraph), the head h_l = argmax_h mean_{t>=2} a^{l,h}_{t,t-1} of this answer; the confidence
c_l(y_1) = p(y_1 | x), c_l(y_t) = alpha p(y_t | y_<t, x) + (1 - alpha) a^{l,h_l}_{t,t-1} c_l(y_{t-1}); the layer's
uncertainty u_l = -(1/N) sum_t log c_l(y_t); the score s = max_l u_l. a_{t,t-1} is the attention, in the step that
chooses y_t, of that step's query on y_{t-1} (TOKEN_ATTN_PREV, from the generate stage's teacher-forced token pass
over the exact answer ids: the attention decoding computed). lm-polygraph 0.7.0 and the paper's code return
1 + max_l u_l (the same ranking). Default alpha 0.2, the paper's setting (lm-polygraph uses 0.5 for instruction-tuned
models). The paper's entropy variant (log p replaced by log(log V - H_t)) is not implemented.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.msp import answer_logprobs
from haldet.signals import Signal, SignalView


def middle_layers(n_layers: int) -> list[int]:
    """The paper's layers: floor(L/3) .. ceil(2L/3) inclusive, within the model's L layers."""
    return [x for x in range(n_layers // 3, math.ceil(n_layers / 3 * 2) + 1) if x < n_layers]


def layer_uncertainty(lp: np.ndarray, attn: np.ndarray, alpha: float) -> float:
    """u_l = -(1/N) sum_t log c_t for one layer: `lp` [N] token log-probs, `attn` [H, N] each head's a_{t,t-1}
    (column 0 unused); the head is the one with the highest mean over t >= 2 (head 0 for a one-token answer)."""
    p = np.exp(lp)
    head = int(np.argmax(attn[:, 1:].mean(axis=1))) if len(lp) > 1 else 0
    c = np.empty(len(lp))
    c[0] = p[0]
    for t in range(1, len(lp)):
        c[t] = alpha * p[t] + (1.0 - alpha) * float(attn[head, t]) * c[t - 1]
    return float(-np.log(c).mean())


@register("rauq")
class RAUQ(Detector):
    """s = max over layers l of -(1/N) sum_t log c_l(y_t), c_l the recurrent attention-weighted confidence of the
    layer's most previous-token-attentive head (`layers`: "middle" (default), "all", or a list of layer indices)."""
    method_family = "attention"
    paper = ("Vazhentsev et al. 2025, Uncertainty-aware attention heads: efficient unsupervised uncertainty "
             "quantification for LLMs (RAUQ)")
    peers = ("lm-polygraph",)

    requires = frozenset({Signal.TOKEN_LOGPROBS, Signal.TOKEN_ATTN_PREV})
    defaults: ClassVar[dict[str, Any]] = {"alpha": 0.2, "layers": "middle"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not 0.0 <= float(self.params["alpha"]) <= 1.0:
            raise ValueError(f"detector 'rauq': alpha must lie in [0, 1], got {self.params['alpha']}")
        layers = self.params["layers"]
        if not (layers in ("middle", "all") or (isinstance(layers, list | tuple) and layers
                                                 and all(isinstance(x, int) for x in layers))):
            raise ValueError(f"detector 'rauq': layers must be 'middle', 'all' or a list of layer indices, "
                             f"got {layers!r}")

    def _layers(self, n_layers: int) -> list[int] | str:
        layers = self.params["layers"]
        if layers == "middle":
            return middle_layers(n_layers)
        if layers == "all":
            return list(range(n_layers))
        bad = [x for x in layers if not -n_layers <= x < n_layers]
        return f"layers {bad} outside the model's {n_layers}" if bad else [x % n_layers for x in layers]

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        alpha = float(self.params["alpha"])
        for i, (logprobs, value) in enumerate(zip(items.get(Signal.TOKEN_LOGPROBS), items.get(Signal.TOKEN_ATTN_PREV),
                                                  strict=True)):
            lp, why = answer_logprobs(logprobs)
            if lp is None:
                out.invalid(i, why)
                continue
            if value is None:
                out.invalid(i, "per-head attention on the previous token (TOKEN_ATTN_PREV) missing")
                continue
            attn = np.asarray(value, dtype=np.float64)
            if attn.ndim != 3 or attn.shape[-1] != len(lp):
                out.invalid(i, f"attention of shape {attn.shape} for {len(lp)} answer tokens")
                continue
            if not np.all(np.isfinite(attn[..., 1:])):  # column 0 (the prompt's last query) is never read
                out.invalid(i, "non-finite attention weight")
                continue
            layers = self._layers(attn.shape[0])
            if isinstance(layers, str):
                out.invalid(i, layers)
                continue
            out.set(i, max(layer_uncertainty(lp, attn[layer], alpha) for layer in layers))
        return out
