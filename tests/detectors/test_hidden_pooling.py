"""Hidden-state feature selection: first:N / last:N poolings against hand-computed means of synthetic states, the
features stage's names for them, and the probes' `pooling` parameter reading exactly the selected states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from haldet.backends.base import pooling_window
from haldet.backends.hf.states import pool_states
from haldet.detectors.haloscope import HaloScope
from haldet.detectors.saplma import Saplma
from haldet.signals import Signal
from haldet.stages.features import hidden_poolings_for
from haldet.testing.conformance import synthetic_view


def test_first_and_last_n_pool_the_span_ends_by_hand() -> None:
    # two layers, one row, 8 positions, D = 2: position t holds (t, 10 t) on layer 0 and (-t, t) on layer 1
    t = torch.arange(8, dtype=torch.float32)
    hidden = [torch.stack([t, 10 * t], dim=-1)[None], torch.stack([-t, t], dim=-1)[None]]
    span = (2, 7)  # answer tokens at positions 2..6
    first2 = pool_states(hidden, [0, 1], 0, *span, "first:2")
    assert first2 == pytest.approx(np.array([[2.5, 25.0], [-2.5, 2.5]]))  # positions 2, 3
    last3 = pool_states(hidden, [0, 1], 0, *span, "last:3")
    assert last3 == pytest.approx(np.array([[5.0, 50.0], [-5.0, 5.0]]))  # positions 4, 5, 6
    # N longer than the answer: every answer token, i.e. the mean pooling
    assert pool_states(hidden, [0], 0, *span, "first:9") == pytest.approx(pool_states(hidden, [0], 0, *span, "mean"))
    assert pool_states(hidden, [0], 0, *span, "last:1") == pytest.approx(pool_states(hidden, [0], 0, *span, "last"))
    assert pooling_window("mean") is None and pooling_window("last:4") == ("last", 4)
    with pytest.raises(ValueError, match="positive integer"):
        pooling_window("first:0")


def test_probe_pooling_selects_the_states_it_reads() -> None:
    assert hidden_poolings_for({Signal.HIDDEN_FIRST_N, Signal.HIDDEN_LAST}) == {"first_n", "last"}
    assert Saplma().signals() == {Signal.HIDDEN_LAST}  # the SAPLMA paper's last token stays the default
    assert Saplma(pooling="mean").signals() == {Signal.HIDDEN_MEAN}  # the OpenHalDet paper's setting
    assert Signal.HIDDEN_LAST_N in HaloScope(pooling="last_n").signals()
    with pytest.raises(ValueError, match="pooling must be one of"):
        Saplma(pooling="middle")
    # trained and scored on a view that serves only the first-N states (any other read raises)
    view = synthetic_view({Signal.HIDDEN_FIRST_N}, n=60)
    det = Saplma(pooling="first_n", hidden=[16], max_epochs=30, device="cpu")
    det.fit(view.subset(list(range(40)), with_labels=True), view.subset(list(range(40, 50)), with_labels=True))
    test = view.subset(list(range(50, 60)), with_labels=False)
    scores = np.asarray(det.score(test).values)
    y = view.labels[50:]
    assert np.isfinite(scores).all() and scores[y == 1].mean() > scores[y == 0].mean()
