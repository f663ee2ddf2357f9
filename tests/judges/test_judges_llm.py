"""LLM judge against a real local HTTP server (tests/mock_openai.py) speaking the OpenAI chat-completions protocol,
which injects 429s, 500s, timeouts, malformed JSON and bad bodies: retries happen, failures are reported, and no
label is ever invented. Also: output parsing, prompts with the calibration examples, the local hf backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from haldet.config import JudgeConfig
from haldet.errors import HaldetError
from haldet.judges.base import JudgeFailure
from haldet.judges.llm import JudgePrompts, LLMJudge, MalformedOutput, load_judge_templates, parse_judge_output
from haldet.schema import Category, Generation, Instance, Label
from mock_openai import FakeOpenAI


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI()
    yield srv
    srv.close()


def judge_config(server: FakeOpenAI, **kw: Any) -> JudgeConfig:
    base = {"kind": "llm", "base_url": server.base_url, "model": "judge-test", "retries": 3, "backoff": 0.01,
            "timeout": 0.5, "concurrency": 4, "price_in": 0.15, "price_out": 0.6}
    return JudgeConfig(**{**base, **kw})


def item(n: int, answer: str) -> tuple[Instance, Generation]:
    inst = Instance(id=f"t/test/{n}", dataset="t", scenario="qa_open", task_type="short_answer",
                    question="Who wrote Hamlet?", references=["William Shakespeare"], incorrect=["Marlowe"])
    return inst, Generation(id=inst.id, prompt="p", response=answer, token_ids=[], token_logprobs=[],
                            finish_reason="stop", n_tokens=0, model="m")


def run_all(judge: LLMJudge, pairs: list[tuple[Instance, Generation]]) -> dict[str, Label | JudgeFailure]:
    out: dict[str, Label | JudgeFailure] = {}
    judge.judge_many(pairs, lambda i, v: out.__setitem__(pairs[i][0].id, v))  # type: ignore[arg-type]
    return out


# --- parsing and prompt -------------------------------------------------------------------------------------
def test_parse_judge_output_validates_schema() -> None:
    ok = parse_judge_output('```json\n{"reasoning": "Names Shakespeare.", "category": "Correct"}\n```')
    assert ok.category == "correct" and ok.reasoning == "Names Shakespeare."
    for bad in ("no json here", '{"reasoning": "x", "category": "maybe"}', '{"category": "correct"}',
                '{"reasoning": "", "category": "correct"}', "[1, 2]"):
        with pytest.raises(MalformedOutput):
            parse_judge_output(bad)


def test_prompt_has_rules_calibration_examples_and_the_item(tmp_path: Path) -> None:
    builder = JudgePrompts(load_judge_templates(None))
    inst, gen = item(0, "It was Marlowe.")
    msgs = builder.messages(inst, gen)
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    cats = [json.loads(m["content"])["category"] for m in msgs if m["role"] == "assistant"]
    assert cats == ["correct", "hallucination", "abstention"]
    assert 'Acceptable answers: ["William Shakespeare"]' in msgs[-1]["content"]
    assert 'Known traps: ["Marlowe"]' in msgs[-1]["content"]
    assert msgs[-1]["content"].endswith("Model answer: It was Marlowe.")
    # a user template overrides the packaged one and changes the digest
    (tmp_path / "judge_system.txt").write_text("Grade strictly. Reply with JSON {reasoning, category}.")
    custom = JudgePrompts(load_judge_templates(str(tmp_path)))
    assert custom.messages(inst, gen)[0]["content"].startswith("Grade strictly")
    assert custom.digest != builder.digest
    mcq = Instance(id="m/test/1", dataset="m", scenario="qa_mcq", task_type="mcq", question="Capital of France?",
                   options={"A": "London", "B": "Paris"}, references=["B"], incorrect=["A"])
    last = builder.messages(mcq, gen)[-1]["content"]
    assert 'Acceptable answers: ["B. Paris"]' in last and 'Known traps: ["A. London"]' in last


# --- the endpoint with injected faults ----------------------------------------------------------------------
def test_retries_recover_from_429_500_timeouts_and_malformed_output(server: FakeOpenAI) -> None:
    server.reset()
    server.plans.update({
        "a429": ["429", "429", "ok:correct"],
        "a500": ["500", "ok:hallucination"],
        "aslow": ["slow", "ok:correct"],
        "agarbage": ["garbage", "ok:abstention"],
        "abody": ["badbody", "ok:correct"],
        "afine": ["ok:hallucination"],
    })
    judge = LLMJudge(judge_config(server))
    pairs = [item(i, a) for i, a in enumerate(server.plans)]
    out = run_all(judge, pairs)
    cats = {pairs[i][1].response: out[pairs[i][0].id] for i in range(len(pairs))}
    assert all(isinstance(v, Label) for v in cats.values()), cats
    assert {k: v.category.value for k, v in cats.items()} == {  # type: ignore[union-attr]
        "a429": "correct", "a500": "hallucination", "aslow": "correct", "agarbage": "abstention",
        "abody": "correct", "afine": "hallucination"}
    assert all(v.judge == "llm:judge-test" for v in cats.values())  # type: ignore[union-attr]
    assert server.calls["a429"] == 3 and server.calls["a500"] == 2 and server.calls["aslow"] == 2
    assert server.calls["afine"] == 1
    usage = judge.usage_report()
    assert usage["retries"] == 2 + 1 + 1 + 1 + 1 and usage["failures"] == 0
    assert usage["errors"]["429"] == 2 and usage["errors"]["timeout"] == 1 and usage["errors"]["malformed"] == 2
    # token accounting: every 200 with a body counts 100 + 20 tokens (the slow one's reply never arrived)
    n_ok = 6 + 1  # six final answers + the garbage reply
    assert usage["prompt_tokens"] == 100 * n_ok and usage["completion_tokens"] == 20 * n_ok
    assert usage["cost_usd"] == pytest.approx((100 * n_ok * 0.15 + 20 * n_ok * 0.6) / 1e6)
    # deterministic decoding, JSON mode, the correction turn after the garbage reply
    first = server.requests[0]
    assert first["temperature"] == 0 and first["seed"] == 0 and first["response_format"] == {"type": "json_object"}
    corrected = [r for r in server.requests if r["messages"][-1]["content"].startswith("That reply could not")]
    assert len(corrected) == 1 and corrected[0]["messages"][-2]["content"].startswith("Sure! I think")


def test_items_failing_after_all_retries_get_no_label(server: FakeOpenAI) -> None:
    server.reset()
    server.plans.update({"down": ["500"], "nonsense": ["badcat"], "limited": ["429"], "good": ["ok:correct"]})
    judge = LLMJudge(judge_config(server, retries=2))
    pairs = [item(i, a) for i, a in enumerate(server.plans)]
    out = run_all(judge, pairs)
    by_answer = {pairs[i][1].response: out[pairs[i][0].id] for i in range(len(pairs))}
    for answer in ("down", "nonsense", "limited"):
        failure = by_answer[answer]
        assert isinstance(failure, JudgeFailure), failure
        assert failure.attempts == 3 and server.calls[answer] == 3
    assert "500" in by_answer["down"].error  # type: ignore[union-attr]
    assert "category" in by_answer["nonsense"].error  # type: ignore[union-attr]
    assert isinstance(by_answer["good"], Label)
    assert judge.usage.failures == 3


def test_fatal_status_stops_with_a_clear_message(server: FakeOpenAI) -> None:
    server.reset()
    server.plans["auth"] = ["401"]
    judge = LLMJudge(judge_config(server))
    with pytest.raises(HaldetError, match="401") as err:
        run_all(judge, [item(0, "auth")])
    assert "API key" in err.value.message
    assert server.calls["auth"] == 1  # not retried


def test_missing_model_and_key_are_user_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(HaldetError, match="needs a model"):
        LLMJudge(JudgeConfig(kind="llm"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = LLMJudge(JudgeConfig(kind="llm", model="gpt-4o-mini"))
    with pytest.raises(HaldetError, match="OPENAI_API_KEY"):
        run_all(judge, [item(0, "x")])


# --- local model through the hf backend ---------------------------------------------------------------------
@pytest.mark.slow
def test_local_hf_judge_labels_or_fails_never_invents() -> None:
    from haldet.backends.hf.backend import HFBackend

    backend = HFBackend("smollm2-135m", device="cpu")
    judge = LLMJudge(JudgeConfig(kind="llm", backend="hf", model="smollm2-135m", max_tokens=24, retries=1,
                                 few_shot=False), backend=backend)
    pairs = [item(0, "It was written by William Shakespeare.")]
    out = run_all(judge, pairs)
    assert set(out) == {p[0].id for p in pairs}
    for verdict in out.values():
        if isinstance(verdict, Label):
            assert verdict.category in (Category.CORRECT, Category.HALLUCINATION, Category.ABSTENTION)
            assert verdict.judge == "llm:smollm2-135m" and verdict.reasoning
        else:
            assert isinstance(verdict, JudgeFailure) and verdict.attempts == 2
    assert judge.usage.calls >= 1 and judge.usage.completion_tokens > 0


def test_dead_endpoint_trips_the_breaker_keeps_done_items_and_lists_the_rest(server: FakeOpenAI) -> None:
    """16 items against an endpoint that hangs past the timeout: after `breaker_after` consecutive timeouts no
    more requests are made; every item is a failure naming the breaker; nothing is labelled."""
    server.reset()
    server.default = "slow"
    try:
        judge = LLMJudge(judge_config(server, retries=4, timeout=0.3, concurrency=2, breaker_after=3))
        pairs = [item(i, f"hang{i}") for i in range(16)]
        out = run_all(judge, pairs)
    finally:
        server.default = "ok:correct"
    assert all(isinstance(v, JudgeFailure) for v in out.values()) and len(out) == 16
    # at most the threshold plus the requests already in flight when it opened (concurrency 2)
    assert sum(server.calls.values()) <= 3 + 2
    assert sum("consecutive timeouts" in v.error for v in out.values()) >= 14  # type: ignore[union-attr]
    usage = judge.usage_report()
    assert usage["breaker_open"] and usage["failures"] == 16 and usage["errors"]["timeout"] <= 5
    # negative control: with a breaker too high to trip, every item would be retried to the end
    server.reset()
    server.plans.update({f"slow{i}": ["slow"] for i in range(2)})
    judge = LLMJudge(judge_config(server, retries=1, timeout=0.3, concurrency=2, breaker_after=100))
    out = run_all(judge, [item(i, f"slow{i}") for i in range(2)])
    assert sum(server.calls.values()) == 4 and not judge.usage_report()["breaker_open"]


def test_usage_accumulates_over_invocations() -> None:
    from haldet.backends.openai_client import accumulate_usage

    first = {"calls": 3, "retries": 1, "failures": 0, "malformed": 0, "prompt_tokens": 300, "completion_tokens": 60,
             "seconds": 1.5, "errors": {"429": 1}, "cost_usd": 0.01, "breaker_open": False}
    second = {**first, "calls": 2, "errors": {"timeout": 2}, "cost_usd": 0.02, "breaker_open": True}
    total = accumulate_usage(accumulate_usage(None, first), second)
    assert total["calls"] == 5 and total["prompt_tokens"] == 600 and total["seconds"] == 3.0
    assert total["errors"] == {"429": 1, "timeout": 2} and total["cost_usd"] == pytest.approx(0.03)
    assert total["invocations"] == 2 and total["breaker_open"]
    assert accumulate_usage(first, {**second, "cost_usd": None})["cost_usd"] is None  # unknown stays unknown
