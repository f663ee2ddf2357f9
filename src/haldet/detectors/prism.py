"""PRISM (paper appendix E.11; Zhang et al. 2024, prompt-guided internal states): an MLP on the hidden state of
a prompt-guided statement about the answer (the features stage's PRISM group, last token).

MLP with input dropout 0.2, hidden (256, 128, 64), ReLU, two-class softmax output; Adam (lr 1e-3), batches of
32, 10 epochs; cross-entropy weighted by the training class frequencies ("balanced"); the epoch with the best
held-out accuracy is kept. The paper holds out an internal 80/20 split of train (seed 0) for that checkpoint;
here the run's validation view is the held-out set by default (every epoch choice on validation), and
`checkpoint_on="internal"` restores the paper's split.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.probe import ProbeDetector
from haldet.detectors.probe_training import TrainedMLP, train_mlp
from haldet.signals import Signal


@register("prism")
class Prism(ProbeDetector):
    method_family = "internal states"
    paper = "Zhang et al. 2024, Prompt-guided internal states for hallucination detection of LLMs (PRISM)"
    peers = ()
    requires = frozenset({Signal.PRISM_FEATURES})
    signal = Signal.PRISM_FEATURES
    defaults: ClassVar[dict[str, Any]] = {
        "layer": -1, "hidden": [256, 128, 64], "input_dropout": 0.2, "epochs": 10, "batch_size": 32,
        "lr": 1e-3, "class_weight": True, "stop_metric": "accuracy", "checkpoint_on": "val",
        "internal_fraction": 0.2, "split_seed": 0, "seed": 42, "standardize": True, "device": "auto"}

    def extract(self, value: np.ndarray, layer: int) -> np.ndarray:
        return value[layer]

    def train_model(self, X: np.ndarray, y: np.ndarray, val: tuple[np.ndarray, np.ndarray] | None) -> TrainedMLP:
        p = self.params
        return train_mlp(X, y, hidden=p["hidden"], n_out=2, input_dropout=p["input_dropout"], epochs=p["epochs"],
                         batch_size=p["batch_size"], lr=p["lr"], class_weight=p["class_weight"], seed=p["seed"],
                         val=val, select=p["stop_metric"], device=p["device"])
