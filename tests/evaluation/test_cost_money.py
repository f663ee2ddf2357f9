"""Cost in money (issue 42): USD per item and per 100 items beside Cost@100 seconds where the model's price is
declared (a section's price_in/price_out, or the run's `prices`), "price unknown" where it is not (never a zero), the
auxiliary stage billed by part (a detector pays only the question it reads), and the reports' USD column."""

from __future__ import annotations

import pytest

from haldet.config import RunConfig
from haldet.endpoint_params import price_of
from haldet.evaluation.cost import PRICE_UNKNOWN, detector_cost, stage_stats, usd_text
from haldet.signals import Signal
from haldet.stages.plan import stage_provides


def _records(n: int, **fields: object) -> dict[str, dict[str, object]]:
    return {f"i{k}": {"id": f"i{k}", "seconds": 0.5, **fields} for k in range(n)}


def test_usd_per_100_items_by_part_hand_computed() -> None:
    """4 items; the answer $0.0006, the verbalized question $0.0002 and the self-evaluation question $0.0004 per
    item: verbalized pays 100 x 0.0002 = $0.02 for 100 items, self_eval 100 x 0.0004 = $0.04."""
    evidence = {
        "generate": stage_stats("generate", _records(4, n_tokens=20, cost_usd=0.0006)),
        "auxiliary": stage_stats("auxiliary", _records(4, verbalized="0.9", verbalized_n_tokens=3,
                                                      verbalized_cost_usd=0.0002, self_eval_text="True",
                                                      self_eval_n_tokens=1, self_eval_cost_usd=0.0004)),
    }
    assert evidence["auxiliary"]["usd_per_item"] == pytest.approx(0.0006)  # the stage: both parts
    kw = {"stage_signals": stage_provides(), "fit_s": 0.0, "score_s": 0.1, "n_scored": 4}
    verbalized = detector_cost([Signal.VERBALIZED], evidence, **kw)
    self_eval = detector_cost([Signal.SELF_EVAL], evidence, **kw)
    assert verbalized["gen_usd_item"] == pytest.approx(0.0006)
    assert verbalized["usd_at_n"] == pytest.approx(0.02) and self_eval["usd_at_n"] == pytest.approx(0.04)
    assert "cost_note" not in verbalized
    local = detector_cost([Signal.VERBALIZED], {"generate": stage_stats("generate", _records(4, n_tokens=20)),
                                                "auxiliary": stage_stats("auxiliary", _records(4, verbalized="1"))},
                          **kw)
    assert "usd_at_n" not in local  # a local model is not billed: seconds only


def test_price_unknown_is_said_never_zero() -> None:
    evidence = {"generate": stage_stats("generate", _records(2, n_tokens=5, cost_usd=None)),
                "sample": stage_stats("sample", _records(2, samples=["a", "b"], n_tokens=4, cost_usd=None))}
    cost = detector_cost([Signal.SAMPLES], evidence, stage_signals=stage_provides(), fit_s=0.0, score_s=0.1,
                         n_scored=2)
    assert cost["usd_at_n"] is None and cost["gen_usd_item"] is None and PRICE_UNKNOWN in cost["cost_note"]
    assert usd_text(None) == PRICE_UNKNOWN and usd_text(0.12) == "$0.12"


def test_prices_reach_every_role_and_a_declared_price_wins() -> None:
    prices = {"api:anthropic/claude-x": (3.0, 15.0), "gpt-5-mini": (0.25, 2.0)}
    assert price_of(prices, "api:anthropic/claude-x") == (3.0, 15.0)
    assert price_of(prices, "openai:gpt-5-mini") == (0.25, 2.0)  # the name after the backend prefix
    assert price_of(prices, "gpt-5-mini", (1.0, 1.0)) == (1.0, 1.0)  # the section's own declaration wins
    assert price_of(prices, "unknown-model") == (None, None)
    config = RunConfig(prices=prices, judge={"model": "gpt-5-mini"})
    assert (config.judge.price_in, config.judge.price_out) == (0.25, 2.0)
    from haldet.backends.select import priced_endpoint

    assert priced_endpoint("openai:gpt-5-mini", config)[0].price_in == 0.25
    assert priced_endpoint("openai:other", config)[0].price_in is None


def test_reports_show_the_usd_column_only_for_billed_models() -> None:
    from haldet.report.tables import cost_markdown

    base = {"dataset": "d", "scenario": "qa", "metric": "auroc", "value": 0.7, "coverage": 1.0, "family": "black",
            "evidence": "repeated generation", "cost_n": 100, "cost_at_n": 12.0}
    rows = [{**base, "model": "api:anthropic/claude-x", "detector": "lexical_similarity", "usd_at_n": 0.12},
            {**base, "model": "openai:m", "detector": "lexical_similarity", "usd_at_n": None},
            {**base, "model": "smollm2-135m", "detector": "lexical_similarity"}]
    text = cost_markdown(rows)
    assert "Cost@100 (USD)" in text and "$0.12" in text and PRICE_UNKNOWN in text
    assert "Cost@100 (USD)" not in cost_markdown(rows[2:])  # no billed model: no money column


def test_verdict_model_requests_billed_per_record() -> None:
    """The verdict model (an endpoint priced in `prices`) bills each request: 100 prompt + 20 completion tokens at
    $2 / $4 per 1M = $0.00028; a retried request (429 first) bills only what was answered."""
    from types import SimpleNamespace

    from haldet.backends.structured import billing
    from haldet.stages.verdict import VerdictStage
    from mock_openai import FakeOpenAI, text_content

    with FakeOpenAI(content=text_content, default="ok:Yes") as srv:
        srv.plans["b"] = ["429", "ok:No"]
        config = RunConfig(verdict={"model": "judge-m", "base_url": srv.base_url, "backoff": 0.01},
                           prices={"judge-m": (2.0, 4.0)})
        ctx = SimpleNamespace(config=config, model="target", backend=None)
        replies = VerdictStage(ctx, asks=[])._ask([[{"role": "user", "content": "a"}],
                                                   [{"role": "user", "content": "b"}]], 16)
    assert [r.text for r in replies] == ["Yes", "No"]
    assert [r.cost_usd for r in replies] == [pytest.approx(0.00028)] * 2
    assert billing(replies) == {"api_prompt_tokens": 200, "api_completion_tokens": 40,
                                "cost_usd": pytest.approx(0.00056), "price_source": "config"}
