"""Cost accounting: per-stage stats from records, artifact-inclusive attribution, Cost@N sums."""

import pytest

from haldet.evaluation.cost import detector_cost, evidence_type, stage_stats
from haldet.signals import Signal
from haldet.stages.plan import stage_provides

STAGES = stage_provides()


def _evidence():
    gen = {f"i{k}": {"id": f"i{k}", "n_tokens": 10 + k, "seconds": 0.2} for k in range(4)}
    sample = {f"i{k}": {"id": f"i{k}", "samples": ["a"] * 5, "logliks": [[-1.0, 8]] * 5, "seconds": 1.5}
              for k in range(4)}
    aux = {f"i{k}": {"id": f"i{k}", "verbalized": "80%", "verbalized_n_tokens": 4, "self_eval_text": "True",
                     "self_eval_n_tokens": 2, "seconds": 0.4} for k in range(4)}
    feats = {f"i{k}": {"id": f"i{k}", "shard": "x.h5"} for k in range(4)}
    return {
        "generate": stage_stats("generate", gen),
        "sample": stage_stats("sample", sample),
        "auxiliary": stage_stats("auxiliary", aux),
        "features": stage_stats("features", feats, wall_seconds=2.0, computed=4),
    }


def test_stage_stats_from_records():
    ev = _evidence()
    assert ev["generate"]["seconds_per_item"] == pytest.approx(0.2)
    assert ev["generate"]["tokens_per_item"] == pytest.approx((10 + 11 + 12 + 13) / 4)
    assert ev["sample"]["calls_per_item"] == 5 and ev["sample"]["tokens_per_item"] == 40
    # features have no per-record seconds: the stage wall time over the items it computed
    assert ev["features"]["seconds_per_item"] == pytest.approx(0.5)
    assert ev["features"]["seconds_source"] == "stage wall time"
    assert ev["features"]["calls_per_item"] == 0
    # auxiliary: two parts, each one call; stage time split by call share when parts carry no own seconds
    parts = ev["auxiliary"]["parts"]
    assert parts["verbalized"] == {"seconds_per_item": pytest.approx(0.2), "calls_per_item": 1.0,
                                   "tokens_per_item": 4.0}
    assert parts["self_eval"]["tokens_per_item"] == 2.0


def test_previous_timing_used_when_fully_cached():
    stats = stage_stats("features", {"a": {"id": "a"}}, wall_seconds=None, computed=0,
                        previous={"seconds_per_item": 0.3})
    assert stats["seconds_per_item"] == 0.3 and stats["seconds_source"] == "previous run"
    unknown = stage_stats("features", {"a": {"id": "a"}})
    assert unknown["seconds_per_item"] is None


def test_cost_rows_sum():
    ev = _evidence()
    # a sampling detector that also reads hidden states: sample + features, plus fit and scoring
    cost = detector_cost({Signal.SAMPLES, Signal.HIDDEN_MEAN}, ev, stage_signals=STAGES, fit_s=3.0, score_s=0.8,
                         n_scored=20, n=100)
    assert cost["prep_sample_s_item"] == pytest.approx(1.5)
    assert cost["prep_features_s_item"] == pytest.approx(0.5)
    assert cost["prep_s_item"] == pytest.approx(cost["prep_sample_s_item"] + cost["prep_features_s_item"])
    assert cost["infer_s_item"] == pytest.approx(0.04)
    assert cost["cost_at_n"] == pytest.approx(100 * 2.0 + 3.0 + 100 * 0.04)
    assert cost["score_only_s"] == pytest.approx(3.8)
    assert cost["extra_calls_item"] == 5 and cost["extra_tokens_item"] == 40
    assert cost["gen_s_item"] == pytest.approx(0.2)  # reported apart, not in Cost@N
    assert cost["evidence"] == "repeated generation" and cost["stages"] == "generate+sample+features"


def test_primary_generation_is_not_extra_and_aux_parts_are_separate():
    ev = _evidence()
    ppl = detector_cost({Signal.TOKEN_LOGPROBS}, ev, stage_signals=STAGES, fit_s=0.0, score_s=0.1, n_scored=10)
    assert ppl["extra_calls_item"] == 0 and ppl["prep_s_item"] == 0
    assert ppl["cost_at_n"] == pytest.approx(100 * 0.01)
    verb = detector_cost({Signal.VERBALIZED}, ev, stage_signals=STAGES, fit_s=0.0, score_s=0.0, n_scored=10)
    both = detector_cost({Signal.VERBALIZED, Signal.SELF_EVAL}, ev, stage_signals=STAGES, fit_s=0.0, score_s=0.0,
                         n_scored=10)
    assert verb["extra_calls_item"] == 1 and verb["extra_tokens_item"] == 4
    assert verb["prep_auxiliary_s_item"] == pytest.approx(0.2)
    assert both["extra_calls_item"] == 2 and both["prep_auxiliary_s_item"] == pytest.approx(0.4)


def test_missing_timing_gives_no_cost_number():
    ev = _evidence()
    del ev["features"]
    cost = detector_cost({Signal.HIDDEN_MEAN}, ev, stage_signals=STAGES, fit_s=1.0, score_s=0.1, n_scored=10)
    assert cost["cost_at_n"] is None and "features" in cost["cost_note"]


def test_evidence_types():
    assert evidence_type({Signal.SAMPLES}, STAGES) == "repeated generation"
    assert evidence_type({Signal.SELF_EVAL}, STAGES) == "auxiliary prompt"
    assert evidence_type({Signal.HIDDEN_MEAN}, STAGES) == "internal states"
    assert evidence_type({Signal.TOKEN_LOGPROBS}, STAGES) == "single-generation likelihood"
    assert evidence_type({Signal.RESPONSE}, STAGES) == "output text"


def test_unrecorded_token_counts_are_unknown_not_zero():
    # the auxiliary stage as it records today: texts and seconds, no token counts
    aux = {f"i{k}": {"id": f"i{k}", "verbalized": "0.8", "self_eval_text": "True", "seconds": 0.4} for k in range(3)}
    ev = {"auxiliary": stage_stats("auxiliary", aux)}
    assert ev["auxiliary"]["calls_per_item"] == 2 and ev["auxiliary"]["tokens_per_item"] is None
    cost = detector_cost({Signal.SELF_EVAL}, ev, stage_signals=STAGES, fit_s=0.0, score_s=0.0, n_scored=3)
    assert cost["extra_calls_item"] == 1 and cost["extra_tokens_item"] is None
    assert "token counts" in cost["cost_note"]
    assert cost["cost_at_n"] == pytest.approx(100 * 0.2)  # time is known: Cost@N still stands
