"""The ensemble detector: its declaration, known-answer combinations, and its cost (shared evidence once)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from haldet.detectors.base import DETECTORS, Detector, Scores
from haldet.detectors.ensemble import DEFAULT_MEMBERS, Ensemble
from haldet.evaluation.cost import detector_cost
from haldet.signals import Signal, SignalView
from haldet.stages.plan import stage_provides
from haldet.testing.conformance import synthetic_view


class _Column(Detector):
    """Reads a fixed per-item column (the synthetic truth of the test), a stand-in member."""

    requires = frozenset({Signal.TOKEN_LOGPROBS})
    defaults: ClassVar[dict] = {}
    values: ClassVar[dict[str, float]] = {}

    def score(self, items: SignalView) -> Scores:
        return Scores(np.array([self.values[i] for i in items.ids], dtype=np.float64))


def _ensemble(variant: str, columns: dict[str, dict[str, float]]) -> Ensemble:
    ens = Ensemble(variant=variant, members=["perplexity", "verbalized"])
    members = []
    for name, vals in columns.items():
        cls = type(name, (_Column,), {"name": name, "values": vals})
        members.append(cls())
    ens.members = members
    return ens


def test_requires_is_the_union_of_the_default_members():
    assert Ensemble.requires == frozenset().union(*(DETECTORS.get(m).requires for m in DEFAULT_MEMBERS))
    ens = Ensemble(members=["perplexity", "ln_entropy", "lexical_similarity"])
    assert ens.signals() == {Signal.TOKEN_LOGPROBS, Signal.SAMPLE_LOGLIKS, Signal.SAMPLES}
    ident = ens.identity()
    assert [m["detector"] for m in ident["members"]] == ["perplexity", "ln_entropy", "lexical_similarity"]
    with pytest.raises(ValueError, match="two or more"):
        Ensemble(members=["perplexity"])
    with pytest.raises(ValueError, match="cannot be a member"):
        Ensemble(members=["perplexity", "ensemble"])


def test_logistic_weights_follow_the_informative_member_and_score_is_the_log_odds():
    view = synthetic_view(frozenset({Signal.TOKEN_LOGPROBS}), n=200)
    rng = np.random.default_rng(0)
    y = view.labels
    good = dict(zip(view.ids, y * 2.0 + rng.normal(size=200), strict=True))
    noise = dict(zip(view.ids, rng.normal(size=200) * 5, strict=True))
    ens = _ensemble("logistic", {"good": good, "noise": noise})
    train = view.subset(range(150), with_labels=True)
    ens.fit(train, None)
    w = ens.meta["ensemble"]["weights"]
    assert w["good"] > 1.0 and abs(w["noise"]) < 0.3 and ens.meta["ensemble"]["fitted_on"] == "train"
    # the score is the log-odds of the fitted model on the standardised member scores (hand formula)
    x = np.array([[good[i], noise[i]] for i in train.ids])
    mu, sd = x.mean(axis=0), x.std(axis=0)
    test = view.subset(range(150, 200), with_labels=False)
    xt = np.array([[good[i], noise[i]] for i in test.ids])
    expect = ((xt - mu) / sd) @ ens.weights + ens.intercept
    np.testing.assert_allclose(ens.score(test).values, expect, rtol=1e-12)


def test_rank_average_is_the_mean_empirical_cdf_and_nan_names_the_member():
    ids = [f"synth/test/{i}" for i in range(6)]
    view = synthetic_view(frozenset({Signal.TOKEN_LOGPROBS}), n=6)
    a = dict(zip(ids, [1.0, 2.0, 3.0, 4.0, 5.0, np.nan], strict=True))
    b = dict(zip(ids, [40.0, 30.0, 20.0, 10.0, 0.0, 1.0], strict=True))
    ens = _ensemble("rank", {"a": a, "b": b})
    fit = view.subset(range(4), with_labels=True)
    fit.labels = np.array([0, 1, 0, 1])
    ens.fit(fit, None)
    out = ens.score(view.subset(range(6), with_labels=False))
    # item 0: F_a(1) = 1/4, F_b(40) = 4/4 -> 0.625; item 4: F_a(5) = 1, F_b(0) = 0 -> 0.5
    assert out.values[0] == pytest.approx(0.625) and out.values[4] == pytest.approx(0.5)
    assert np.isnan(out.values[5]) and "member a" in out.reasons[5]
    assert ens.meta["ensemble"]["weights"] == {"a": 0.5, "b": 0.5}


def test_cost_counts_shared_evidence_once():
    stages = stage_provides()
    ev = {"generate": {"seconds_per_item": 0.2}, "sample": {"seconds_per_item": 1.5, "calls_per_item": 5.0,
                                                            "tokens_per_item": 40.0}}
    members = [DETECTORS.get(m).requires for m in ("ln_entropy", "lexical_similarity")]
    alone = [detector_cost(r, ev, stage_signals=stages, fit_s=0.0, score_s=0.0, n_scored=10) for r in members]
    both = detector_cost(Ensemble(members=["ln_entropy", "lexical_similarity"]).signals(), ev,
                         stage_signals=stages, fit_s=0.0, score_s=0.0, n_scored=10)
    assert [c["prep_s_item"] for c in alone] == [1.5, 1.5]
    assert both["prep_s_item"] == pytest.approx(1.5)  # the samples are drawn once for both members
    assert both["extra_calls_item"] == pytest.approx(5.0)


def test_family_follows_the_members(tmp_path):
    from haldet.config import RunConfig
    from haldet.flow.scoring import ResponseScoring, score_detector
    from haldet.store import CellStore
    from haldet.testing.conformance import split_of

    params = {"members": ["perplexity", "eigenscore"], "variant": "rank"}
    view = synthetic_view(Ensemble(**params).signals(), n=60)
    config = RunConfig(detectors=["ensemble"], detector_params={"ensemble": params}, evaluation={"bootstrap": 0})
    run = score_detector("ensemble", "response", ResponseScoring(config), CellStore(tmp_path), view,
                         split_of(view), "synthetic-evidence")
    assert Ensemble.family() == "gray" and run.family == "white"  # a white-box member makes it white-box
    assert run.reads == {Signal.TOKEN_LOGPROBS, Signal.SAMPLE_HIDDEN}
    assert [m["detector"] for m in run.identity["members"]] == ["perplexity", "eigenscore"]
