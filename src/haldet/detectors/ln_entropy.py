"""Length-normalised predictive entropy (Malinin and Gales 2021; paper appendix E.15 without normalisation)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import sample_logliks
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


@register("ln_entropy")
class LNEntropy(Detector):
    """Monte-Carlo entropy estimate from K samples: s = -(1/K) sum_k log P(y_k|x) / |y_k| (variant
    "normalized", the method's source). The paper drops the length normalisation: s = -(1/K) sum_k log P(y_k|x)
    (variant "paper"). Samples with no tokens or a non-finite log-likelihood are left out."""
    method_family = "sample consistency"
    paper = "Malinin & Gales 2021, Uncertainty estimation in autoregressive structured prediction"
    peers = ("lm-polygraph", "TruthTorchLM")

    requires = frozenset({Signal.SAMPLE_LOGLIKS})
    variants: ClassVar[dict[str, str]] = {"normalized": "mean over samples of -log P / length (Malinin & Gales)",
                "paper": "mean over samples of -log P, no length normalisation (OpenHalDet E.15)"}
    defaults: ClassVar[dict[str, Any]] = {"variant": "normalized"}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, value in enumerate(items.get(Signal.SAMPLE_LOGLIKS)):
            arr = sample_logliks(value, -1)
            if arr is None:
                out.invalid(i, "no sample log-likelihoods")
                continue
            ok = np.isfinite(arr[:, 0]) & (arr[:, 1] > 0)
            if not ok.any():
                out.invalid(i, "no sample with tokens and a finite log-likelihood")
                continue
            ll, n = arr[ok, 0], arr[ok, 1]
            per = -ll / n if self.params["variant"] == "normalized" else -ll
            out.set(i, float(per.mean()))
        return out
