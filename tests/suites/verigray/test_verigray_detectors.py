"""VeriGray's detectors at sentence level on fixture items: the 7-way classifier's verdict records become unit
scores, and the NLI verifier checks each sentence against the document (transparent word-overlap NLI model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_verigray_nli import Overlap

from haldet.datasets.base import get_adapter
from haldet.detectors.base import DETECTORS
from haldet.schema import Generation
from haldet.signals import Signal, SignalView
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"


def view(signals: dict[Signal, list[Any]]) -> SignalView:
    items, _ = get_adapter("verigray", FIX).load()
    items = items[:2]
    gens = [Generation(id=i.id, prompt="p", response=i.response or "", token_ids=[], token_logprobs=[],
                       finish_reason="provided", n_tokens=0, model="m", provided=True) for i in items]
    return SignalView(ids=[i.id for i in items], instances=[i.without_labels() for i in items], generations=gens,
                      loader=lambda signal, ids: signals[signal])


def test_classifier_unit_scores_follow_the_verdicts() -> None:
    first = view({}).instances[0]
    n0 = len(first.units_of("sentence"))
    units = [{"reply": "Option: D", "label": "Fabricated", "reason": ""},
             *[{"reply": "hm", "label": None, "reason": "unparsable reply: 'hm'"}] * (n0 - 1)]
    records = [{"verigray_7way": {"judge": "j", "units": units}}, None]
    scores = DETECTORS.get("verigray_llm")().score_units(view({Signal.VERDICT: records}), "sentence")
    assert scores.values[0][0] == 5.0 and np.isnan(scores.values[0][1:]).all()
    assert scores.reasons[0][1] == "unparsable reply: 'hm'"
    assert np.isnan(scores.values[1]).all() and "no verigray_7way verdict" in scores.reasons[1][0]


def test_nli_verifier_scores_each_sentence_against_the_document(monkeypatch: pytest.MonkeyPatch) -> None:
    import haldet.suites.verigray.nli_verifier as mod

    model = Overlap()
    monkeypatch.setattr(mod, "pair_model", lambda det, *a, **k: model)
    v = view({Signal.RESPONSE: []})
    det = DETECTORS.get("nli_verifier")()
    scores = det.score_units(v, "sentence")
    for inst, values in zip(v.instances, scores.values, strict=True):
        probs = model.compute([(inst.context, u.text) for u in inst.units_of("sentence")])
        assert values == pytest.approx(np.maximum(probs[:, 1], probs[:, 2]) - probs[:, 0])
    assert det.decision_threshold == 0.0
