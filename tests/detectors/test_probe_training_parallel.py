"""HaloScope's pseudo-labellings train side by side (haldet.detectors.probe_training.train_mlps): each model must be
bit-identical to the one trained alone, one after another, as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from haldet.detectors import probe_training
from haldet.detectors.probe_training import train_mlp, train_mlps

SETTINGS = {"hidden": [1024], "n_out": 1, "epochs": 6, "batch_size": 512, "lr": 0.05, "weight_decay": 3e-4,
            "optimizer": "sgd_cosine", "seed": 42, "device": "cpu"}  # HaloScope's classifier, fewer epochs


def _data() -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((25, 576))  # tens of wild items x SmolLM2's width, as in the default protocol
    return X, [(rng.random(25) > q).astype(int) for q in (0.2, 0.4, 0.5, 0.6, 0.8)]


def _same(a: probe_training.TrainedMLP, b: probe_training.TrainedMLP) -> bool:
    return a.state.keys() == b.state.keys() and all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_side_by_side_trainings_equal_sequential_ones_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_training, "available_cores", lambda: 2)  # side by side even on one core
    X, labels = _data()
    alone = [train_mlp(X, y, **SETTINGS) for y in labels]
    together = train_mlps(X, labels, **SETTINGS)
    assert [_same(a, b) for a, b in zip(alone, together, strict=True)] == [True] * len(labels)
    # the comparison can fail: another label vector (or seed) gives other weights
    assert not _same(alone[0], alone[1])
    assert not _same(alone[0], train_mlp(X, labels[0], **{**SETTINGS, "seed": 43}))


def test_threads_restored_after_side_by_side_training(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_training, "available_cores", lambda: 2)
    before = torch.get_num_threads()
    X, labels = _data()
    train_mlps(X, labels[:2], **{**SETTINGS, "epochs": 1})
    assert torch.get_num_threads() == before
