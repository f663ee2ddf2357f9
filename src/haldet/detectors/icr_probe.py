"""ICR Probe (paper appendix E.17; Zhang et al. 2025): an MLP on the per-layer ICR features (how much each
layer's residual update agrees with its attention), flattened over layers into one vector.

MLP d -> 256 -> 128 -> 1 with ReLU and a sigmoid output; Adam (lr 1e-3), binary cross-entropy, batches of 32,
15 epochs, no early stopping (as in the paper). Features are standardised on train.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.probe import ProbeDetector, stack
from haldet.detectors.probe_training import TrainedMLP, train_mlp
from haldet.signals import Signal, SignalView


@register("icr_probe")
class IcrProbe(ProbeDetector):
    method_family = "internal states"
    paper = "Zhang et al. 2025, ICR Probe: tracking hidden state dynamics for reliable hallucination detection in LLMs"
    peers = ()
    requires = frozenset({Signal.ICR_FEATURES})
    signal = Signal.ICR_FEATURES
    defaults: ClassVar[dict[str, Any]] = {
        "hidden": [256, 128], "epochs": 15, "batch_size": 32, "lr": 1e-3, "checkpoint_on": "none",
        "seed": 42, "standardize": True, "device": "auto"}

    def features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        return stack(view.get(self.signal), lambda v: v.reshape(-1))

    def candidate_layers(self, view: SignalView) -> list[int]:
        return [-1]  # the ICR vector spans all layers

    def train_model(self, X: np.ndarray, y: np.ndarray, val: tuple[np.ndarray, np.ndarray] | None) -> TrainedMLP:
        p: dict[str, Any] = self.params
        return train_mlp(X, y, hidden=p["hidden"], n_out=1, epochs=p["epochs"], batch_size=p["batch_size"],
                         lr=p["lr"], seed=p["seed"], device=p["device"])
