"""MIND (paper appendix E.10; Su et al. 2024, "Unsupervised real-time hallucination detection based on the
internal states of LLMs"): an MLP on [last-token state, mean-pooled state] of the final layer.

MLP with input dropout 0.2, hidden (256, 128, 64), ReLU, two-class softmax; Adam (lr 1e-3), batches of 32,
20 epochs, cross-entropy, the last epoch kept (no early stopping, as in the paper). Features are standardised
on train.

Variants. `paper` (default, as the issue and the benchmark table): supervised on the run's training labels.
`self_labelled`: MIND's own idea is that no human/benchmark annotation is needed; it builds its training set
automatically from Wikipedia, letting the model continue a truncated article and calling the continuation a
hallucination when it does not reproduce the true next entity. That corpus and its generations are not part of a
haldet run, so this variant applies MIND's automatic labelling rule to the training items the run already has:
target 0 when the model's answer contains one of the instance's references (normalised, whole tokens), 1 when it
does not; items without references or with an abstaining answer are left out. The run's annotations are not read.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.probe import ProbeDetector, stack
from haldet.detectors.probe_training import TrainedMLP, train_mlp
from haldet.judges.text import contains_phrase, is_abstention
from haldet.signals import Signal, SignalView


@register("mind")
class Mind(ProbeDetector):
    method_family = "internal states"
    paper = "Su et al. 2024, Unsupervised real-time hallucination detection based on the internal states of LLMs (MIND)"
    peers = ()
    requires = frozenset({Signal.HIDDEN_LAST, Signal.HIDDEN_MEAN})
    signal = Signal.HIDDEN_LAST
    variants: ClassVar[dict[str, str]] = {
        "paper": "supervised on the run's training labels (OpenHalDet E.10)",
        "self_labelled": "MIND's automatic reference-match labels on the training items; no annotations used",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "variant": "paper", "layer": -1, "hidden": [256, 128, 64], "input_dropout": 0.2, "epochs": 20,
        "batch_size": 32, "lr": 1e-3, "checkpoint_on": "none", "seed": 42, "standardize": True,
        "device": "auto"}

    def features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        last, mean = view.get(Signal.HIDDEN_LAST), view.get(Signal.HIDDEN_MEAN)
        both = [None if a is None or b is None else np.concatenate([np.asarray(a), np.asarray(b)], axis=-1)
                for a, b in zip(last, mean, strict=True)]
        first = next((v for v in both if v is not None), None)
        if first is None:
            return stack(both, lambda v: v)
        row = layer if layer >= 0 else first.shape[0] + layer
        if not 0 <= row < first.shape[0]:
            raise ValueError(f"layer {layer} is out of range for features with {first.shape[0]} layer rows")
        return stack(both, lambda v: v[row])

    def train_labels(self, train: SignalView) -> tuple[np.ndarray | None, str]:
        if self.params["variant"] == "paper":
            return train.labels, "train labels"
        y = np.full(len(train), np.nan)
        for i, (inst, gen) in enumerate(zip(train.instances, train.generations, strict=True)):
            refs = [r for r in inst.references if r.strip()]
            if not refs or not gen.response.strip() or is_abstention(gen.response):
                continue
            y[i] = 0.0 if any(contains_phrase(gen.response, r) for r in refs) else 1.0
        return y, "self-labelled: reference match of the model's own answer"

    def train_model(self, X: np.ndarray, y: np.ndarray, val: tuple[np.ndarray, np.ndarray] | None) -> TrainedMLP:
        p = self.params
        return train_mlp(X, y, hidden=p["hidden"], n_out=2, input_dropout=p["input_dropout"], epochs=p["epochs"],
                         batch_size=p["batch_size"], lr=p["lr"], seed=p["seed"], device=p["device"])
