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
models).

Variants (the paper's and its code's): "probability" (above); "entropy", the token confidence p(y_t) replaced by
log V - H_t (the distance of the next-token entropy from its maximum; the KL column of TOKEN_CHERNOFF at T = 1, so
no second signal; plus 1e-10 as the authors' code, clipped at 0 against float rounding), default alpha 0.8 (the
authors' setting for it in lm-polygraph). The single-head variant, whose head per layer is chosen once on training
answers, is `rauq_single_head` (a detector of its own: it trains).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.msp import answer_logprobs
from haldet.signals import CHERNOFF_EXPONENTS, KL_EXPONENTS, Signal, SignalView

KL_AT_T1 = len(CHERNOFF_EXPONENTS) + KL_EXPONENTS.index(1.0)  # TOKEN_CHERNOFF's column KL(p || uniform) = log V - H
ALPHA = {"probability": 0.2, "entropy": 0.8}  # default alpha per variant


def middle_layers(n_layers: int) -> list[int]:
    """The paper's layers: floor(L/3) .. ceil(2L/3) inclusive, within the model's L layers."""
    return [x for x in range(n_layers // 3, math.ceil(n_layers / 3 * 2) + 1) if x < n_layers]


def layer_uncertainty(p: np.ndarray, attn: np.ndarray, alpha: float, head: int | None = None) -> float:
    """u_l = -(1/N) sum_t log c_t for one layer: `p` [N] token confidences (probabilities, or log V - H_t), `attn`
    [H, N] each head's a_{t,t-1} (column 0 unused); the head given, or the one with the highest mean over t >= 2 of
    this answer (head 0 for a one-token answer, where no attention is read)."""
    if head is None:
        head = int(np.argmax(attn[:, 1:].mean(axis=1))) if len(p) > 1 else 0
    c = np.empty(len(p))
    c[0] = p[0]
    for t in range(1, len(p)):
        c[t] = alpha * p[t] + (1.0 - alpha) * float(attn[head, t]) * c[t - 1]
    return float(-np.log(c).mean())


@register("rauq")
class RAUQ(Detector):
    """s = max over layers l of -(1/N) sum_t log c_l(y_t), c_l the recurrent attention-weighted confidence of the
    layer's most previous-token-attentive head (`layers`: "middle" (default), "all", or a list of layer indices;
    `variant` "probability" or "entropy"; `alpha` None takes the variant's default, recorded resolved)."""
    method_family = "attention"
    paper = ("Vazhentsev et al. 2025, Uncertainty-aware attention heads: efficient unsupervised uncertainty "
             "quantification for LLMs (RAUQ)")
    peers: ClassVar[tuple[str, ...]] = ("lm-polygraph",)

    requires = frozenset({Signal.TOKEN_LOGPROBS, Signal.TOKEN_ATTN_PREV})
    variants: ClassVar[dict[str, str]] = {
        "probability": "token confidence p(y_t) (the paper's main method)",
        "entropy": "token confidence log V - H_t, the entropy's distance from its maximum (the paper's variant)"}
    defaults: ClassVar[dict[str, Any]] = {"variant": "probability", "alpha": None, "layers": "middle"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["alpha"] is None:
            self.params["alpha"] = ALPHA[self.params["variant"]]
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

    def signals(self) -> frozenset[Signal]:
        if self.params["variant"] == "entropy":
            return frozenset({Signal.TOKEN_CHERNOFF, Signal.TOKEN_ATTN_PREV})
        return self.requires

    def _confidences(self, items: SignalView) -> list[tuple[np.ndarray | None, str]]:
        """Per item the token confidences [N] (p(y_t), or log V - H_t + 1e-10), or None with why not."""
        if self.params["variant"] == "probability":
            out = [answer_logprobs(v) for v in items.get(Signal.TOKEN_LOGPROBS)]
            return [(np.exp(lp), why) if lp is not None else (None, why) for lp, why in out]
        found: list[tuple[np.ndarray | None, str]] = []
        for value in items.get(Signal.TOKEN_CHERNOFF):
            terms = None if value is None else np.asarray(value, dtype=np.float64)
            if terms is None:
                found.append((None, "next-token distribution statistics (TOKEN_CHERNOFF) missing"))
            elif terms.size == 0:
                found.append((None, "empty response"))
            elif terms.ndim != 2 or terms.shape[1] <= KL_AT_T1 or not np.all(np.isfinite(terms[:, KL_AT_T1])):
                found.append((None, f"TOKEN_CHERNOFF of shape {terms.shape} without finite log V - H"))
            else:
                found.append((np.maximum(terms[:, KL_AT_T1], 0.0) + 1e-10, ""))
        return found

    def _valid_attention(self, value: Any, n: int) -> np.ndarray | str:
        if value is None:
            return "per-head attention on the previous token (TOKEN_ATTN_PREV) missing"
        attn = np.asarray(value, dtype=np.float64)
        if attn.ndim != 3 or attn.shape[-1] != n:
            return f"attention of shape {attn.shape} for {n} answer tokens"
        if not np.all(np.isfinite(attn[..., 1:])):  # column 0 (the prompt's last query) is never read
            return "non-finite attention weight"
        return attn

    def _heads(self, attn: np.ndarray, layers: list[int]) -> list[int | None] | str:
        """The head of each layer: None, chosen per answer (`rauq_single_head` overrides)."""
        return [None] * len(layers)

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        alpha = float(self.params["alpha"])
        for i, ((conf, why), value) in enumerate(zip(self._confidences(items), items.get(Signal.TOKEN_ATTN_PREV),
                                                     strict=True)):
            if conf is None:
                out.invalid(i, why)
                continue
            attn = self._valid_attention(value, len(conf))
            if isinstance(attn, str):
                out.invalid(i, attn)
                continue
            layers = self._layers(attn.shape[0])
            heads = self._heads(attn, layers) if not isinstance(layers, str) else layers
            if isinstance(heads, str) or isinstance(layers, str):
                out.invalid(i, heads if isinstance(heads, str) else str(layers))
                continue
            out.set(i, max(layer_uncertainty(conf, attn[layer], alpha, head)
                           for layer, head in zip(layers, heads, strict=True)))
        return out
