"""RAUQ with one head per layer chosen on training answers (Vazhentsev et al. 2025, the single-head variant of the
paper's code): the same recurrent confidence and score as `rauq`, but the head of layer l is fixed for every answer,
h_l = argmax_h mean a^{l,h}_{t,t-1} over the tokens t >= 2 of all training answers pooled (no labels read; answers of
one token add nothing), instead of being chosen anew on each answer. Both variants of `rauq` (probability, entropy)
apply. A training split without an answer of two or more tokens chooses no head: the items are NaN with the reason
(the authors' code falls back to head 0).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.rauq import RAUQ
from haldet.signals import Signal, SignalView


@register("rauq_single_head")
class RAUQSingleHead(RAUQ):
    """RAUQ whose head per layer is the most previous-token-attentive one over the training answers (`rauq`'s
    parameters and variants)."""

    method_family = "attention"
    paper = ("Vazhentsev et al. 2025, Uncertainty-aware attention heads: efficient unsupervised uncertainty "
             "quantification for LLMs (RAUQ; its single-head variant)")
    trains: ClassVar[bool] = True
    peers = ()  # lm-polygraph 0.7.0's RAUQ has no single-head option; the authors' code has

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        total: np.ndarray | None = None
        count = 0
        self.shape: tuple[int, ...] | None = None
        for value in train.get(Signal.TOKEN_ATTN_PREV):
            attn = None if value is None else np.asarray(value, dtype=np.float64)
            # column 0 (the prompt's last query) is never read: NaN when the attention was read while decoding
            if attn is None or attn.ndim != 3 or attn.shape[-1] < 2 or not np.all(np.isfinite(attn[:, :, 1:])):
                continue
            if self.shape is not None and attn.shape[:2] != self.shape:
                raise ValueError(f"rauq_single_head: training answers with attention of {attn.shape[:2]} and "
                                 f"{self.shape} (layers, heads): one model's answers expected")
            self.shape = attn.shape[:2]
            part = attn[:, :, 1:].sum(axis=-1)
            total = part if total is None else total + part
            count += attn.shape[-1] - 1
        self.selected: list[int] | None = (None if total is None else
                                           [int(h) for h in np.argmax(total / count, axis=-1)])

    def _heads(self, attn: np.ndarray, layers: list[int]) -> list[int | None] | str:
        if self.selected is None:
            return "no training answer of two or more tokens to choose the heads on"
        if attn.shape[:2] != self.shape:
            return f"attention of {attn.shape[:2]} (layers, heads); the heads were chosen on {self.shape}"
        return [self.selected[layer] for layer in layers]
