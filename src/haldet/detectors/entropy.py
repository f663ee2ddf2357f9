"""Entropy (Malinin & Gales, 2021; HalluEntity section 4): token score = entropy (nats) of the model's next-token
distribution at the token's position, from the token pass; aggregated per unit (mean by default)."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.unit import UnitDetector
from haldet.signals import Signal, SignalView


@register("entropy")
class Entropy(UnitDetector):
    method_family = "information (token probabilities)"
    paper = "mean token entropy (Malinin & Gales 2021); HalluEntity's baseline (Yeh et al. 2025)"
    peers = ("lm-polygraph", "uqlm")
    requires = UnitDetector.requires | {Signal.ANSWER_ENTROPIES}
    version = "1"

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        return ["no token entropies for this item (empty answer, or it exceeds the model window)"
                if e is None or len(e) == 0 else np.asarray(e, dtype=np.float64)
                for e in items.get(Signal.ANSWER_ENTROPIES)]
