"""SAPLMA (paper appendix E.12; Azaria & Mitchell 2023): an MLP on the last-token hidden state says whether
the model "believes" its own answer is true.

Standardised features (scaler fitted on train), MLP (256, 128) with ReLU, Adam, mini-batches of 200, L2 1e-4,
at most 1,000 epochs with early stopping (patience 10 epochs on the validation view's log-loss), seed 42: the
settings of the paper's scikit-learn `MLPClassifier(hidden_layer_sizes=(256, 128), early_stopping=True,
random_state=42)`, trained with the shared torch trainer so it runs on GPU when present. The paper's
early stopping holds out 10% of train; here the run's validation view is the held-out set (the protocol puts
every epoch choice on validation), `checkpoint_on="internal"` restores the 10% split.

`pooling` picks the hidden-state feature: `last` (default, the SAPLMA paper's last token), `mean` (mean over the
answer tokens, the OpenHalDet paper's SAPLMA setting), `first_n` / `last_n` (mean over the first / last
`features.select_tokens` answer tokens). Each reads only its own pooled states.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.probe import ProbeDetector, pooled_signal
from haldet.detectors.probe_training import TrainedMLP, train_mlp
from haldet.signals import Signal


@register("saplma")
class Saplma(ProbeDetector):
    method_family = "internal states"
    paper = "Azaria & Mitchell 2023, The internal state of an LLM knows when it's lying (SAPLMA)"
    peers = ("TruthTorchLM",)
    requires = frozenset({Signal.HIDDEN_LAST})
    signal = Signal.HIDDEN_LAST
    defaults: ClassVar[dict[str, Any]] = {
        "layer": -1, "hidden": [256, 128], "max_epochs": 1000, "patience": 10, "batch_size": 200,
        "lr": 1e-3, "weight_decay": 1e-4, "stop_metric": "loss", "checkpoint_on": "val",
        "internal_fraction": 0.1, "split_seed": 42, "seed": 42, "standardize": True, "device": "auto",
        "pooling": "last"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.signal = pooled_signal(self.name, self.params["pooling"])  # type: ignore[misc]

    def signals(self) -> frozenset[Signal]:
        return frozenset({self.signal})

    def extract(self, value: np.ndarray, layer: int) -> np.ndarray:
        return value[layer]

    def train_model(self, X: np.ndarray, y: np.ndarray, val: tuple[np.ndarray, np.ndarray] | None) -> TrainedMLP:
        p = self.params
        return train_mlp(X, y, hidden=p["hidden"], n_out=1, epochs=p["max_epochs"], batch_size=p["batch_size"],
                         lr=p["lr"], weight_decay=p["weight_decay"], seed=p["seed"], val=val,
                         select=p["stop_metric"], patience=p["patience"], device=p["device"])
