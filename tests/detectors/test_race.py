"""RACE (haldet.detectors.race) by hand on a small synthetic input: SINdex's clusters and entropy, SelfCheck-NLI's
two-way ratio over the trace's steps against the sampled traces, the sampled answers against the primary trace,
and their sum, with the pair models replaced by known probabilities (the formulas are what is tested; the pair
models are tested where they live)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from haldet.detectors import race as race_module
from haldet.detectors.base import DETECTORS
from haldet.detectors.race import NO_TRACE, contradiction_ratio, sindex
from haldet.schema import Generation, Instance
from haldet.signals import SampleTexts, Signal, SignalView

STEP1, STEP2 = "France's capital is Paris.", "It is in Europe."


def test_sindex_by_hand() -> None:
    # 0 and 1 are close (distance 0.05 < 0.1): one cluster of cohesion 0.95; 2 is alone (mean distance 0.75)
    sim = np.array([[1.0, 0.95, 0.2], [0.95, 1.0, 0.3], [0.2, 0.3, 1.0]])
    p0, p1 = 2 / 3 * 0.95, 1 / 3
    assert sindex(sim, 0.9) == pytest.approx(-(p0 * math.log(p0) + p1 * math.log(p1)))
    assert sindex(sim, 0.9) == pytest.approx(0.655484, abs=1e-6)
    assert sindex(np.ones((3, 3)), 0.9) == 0.0  # one cluster of identical meaning: no uncertainty
    assert sindex(np.eye(2), 0.9) == pytest.approx(math.log(2))
    # a looser threshold merges 2 as well (mean distance 0.75 < 1 - 0.2)
    assert sindex(sim, 0.2) == pytest.approx(-(np.mean([0.95, 0.2, 0.3]) * math.log(np.mean([0.95, 0.2, 0.3]))))


def test_contradiction_ratio_ignores_neutral() -> None:
    probs = np.array([[0.9, 0.0, 0.1], [0.1, 0.8, 0.1], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(contradiction_ratio(probs), [0.1, 0.5, 0.5])


def _nli(premise: str, hypothesis: str) -> list[float]:
    """[entailment, neutral, contradiction] of the synthetic pairs (neutral mass set to show it is ignored)."""
    table = {("Paris is the capital.", STEP1): (0.9, 0.0, 0.1), ("Lyon is the capital.", STEP1): (0.2, 0.0, 0.8),
             ("Paris is the capital.", STEP2): (0.25, 0.5, 0.25), ("Lyon is the capital.", STEP2): (0.1, 0.8, 0.1),
             (f"{STEP1}\n{STEP2}", "Paris"): (0.7, 0.2, 0.1), (f"{STEP1}\n{STEP2}", "Lyon"): (0.1, 0.3, 0.6)}
    return list(table[(premise, hypothesis)])


def _fake_pairs(det: Any, kind: str, param: str, pairs: list[tuple[str, str]], label: str) -> np.ndarray:
    if kind == "nli":
        return np.array([_nli(p, h) for p, h in pairs])
    assert kind == "similarity" and pairs == [("Q? [SEP] Lyon", "Q? [SEP] Paris")]  # distinct texts, sorted
    return np.array([[0.3]])


def _view(with_reasoning: bool = True) -> SignalView:
    inst = Instance(id="d/t/0", dataset="d", scenario="qa_open", task_type="short_answer", question="Q?")
    gen = Generation(id=inst.id, prompt="p", response="Paris", token_ids=[], token_logprobs=[],
                     finish_reason="stop", n_tokens=0, model="m",
                     reasoning=f"{STEP1} {STEP2}" if with_reasoning else None)
    samples = SampleTexts(["Paris", "Lyon"], ["Paris is the capital.", "Lyon is the capital."])
    values = {Signal.SAMPLES: samples, Signal.RESPONSE: "Paris",
              Signal.TRACE_ANSWER_ENTROPIES: np.array([0.4, 1.0])}  # the sampled answers read after the trace
    return SignalView(ids=[inst.id], instances=[inst], generations=[gen],
                      loader=lambda signal, ids: [values[signal]])


@pytest.fixture
def fake_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(race_module, "pair_scores", _fake_pairs)
    monkeypatch.setattr(race_module, "split_many",
                        lambda texts: [[s.strip() + "." for s in t.split(".") if s.strip()] for t in texts])


def test_race_by_hand(fake_pairs: None) -> None:
    s_cc = np.mean([np.mean([0.1, 0.8]), np.mean([0.5, 0.5])])  # steps x sampled traces, P(c) / (P(c) + P(e))
    s_ca = np.mean([0.1 / 0.8, 0.6 / 0.7])                       # sampled answers against the primary trace
    s_aa = math.log(2)  # "Paris" (primary and a sample: one distinct text) and "Lyon", cosine 0.3: two clusters
    assert s_cc == pytest.approx(0.475) and s_ca == pytest.approx(0.4910714, abs=1e-6)
    got = {v: DETECTORS.get("race")(variant=v, alignment="nli").score(_view()).values[0]
           for v in ("race", "cc", "aa", "ca")}
    assert got["cc"] == pytest.approx(s_cc) and got["ca"] == pytest.approx(s_ca) and got["aa"] == pytest.approx(s_aa)
    assert got["race"] == pytest.approx(s_cc + s_aa + s_ca) == pytest.approx(1.6592186, abs=1e-6)
    # alignment: entropy (the default): S_CA = the mean over samples of each sampled answer's mean token entropy
    # after the primary trace (the target model as the paper's proxy)
    race = DETECTORS.get("race")()
    assert Signal.TRACE_ANSWER_ENTROPIES in race.signals()
    assert Signal.TRACE_ANSWER_ENTROPIES not in DETECTORS.get("race")(variant="cc").signals()
    assert DETECTORS.get("race")(variant="ca").score(_view()).values[0] == pytest.approx(0.7)
    assert race.score(_view()).values[0] == pytest.approx(s_cc + s_aa + 0.7)


def test_race_needs_a_trace_and_refuses_other_views(fake_pairs: None) -> None:
    scores = DETECTORS.get("race")(alignment="nli").score(_view(with_reasoning=False))
    assert np.isnan(scores.values[0]) and scores.reasons[0] == NO_TRACE
    assert DETECTORS.get("race")(variant="aa").score(_view(with_reasoning=False)).values[0] == pytest.approx(
        math.log(2))  # the answers alone need no trace
    with pytest.raises(ValueError, match="cannot read 'reasoning'"):  # the entropy alignment: refused by its signal
        DETECTORS.get("race")(reads="reasoning")
    with pytest.raises(ValueError, match="steps must be one of sentences"):
        DETECTORS.get("race")(steps="llm")
