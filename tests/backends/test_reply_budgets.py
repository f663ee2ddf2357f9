"""Reply budgets sized for reasoning models (issue 42): a role whose model reasons (declared in its `params`, or the
run's own model when it thinks) gets `REASONING_REPLY_BUDGET` where its budget is left unset; a role whose model does
not reason keeps its direct-answer default, so the keys of labels made before stay; a budget set is used as set.
Requests reach the mock OpenAI reasoning endpoint (tests/mock_openai.py) with the budget sized so."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from haldet.backends.structured import ClientSettings, Request, StructuredClient
from haldet.config import ClaimsConfig, JudgeConfig
from haldet.endpoint_params import REASONING_REPLY_BUDGET, EndpointParams, reply_budget
from haldet.judges.llm import LLMJudge
from mock_openai import FakeOpenAI, text_content

THINKING = {"reasoning": True, "temperature": False, "top_p": False, "max_tokens_field": "max_completion_tokens"}


def test_defaults_grow_only_for_a_model_that_reasons() -> None:
    assert JudgeConfig().reply_budget() == 256 and JudgeConfig().max_tokens is None
    assert JudgeConfig(params={"reasoning": True}).reply_budget() == REASONING_REPLY_BUDGET == 4096
    assert JudgeConfig(params={"reasoning_effort": "low"}).reply_budget() == 4096
    assert JudgeConfig(params={"reasoning_effort": "none"}).reply_budget() == 256  # effort "none": no thinking
    assert JudgeConfig(max_tokens=1000, params={"reasoning": True}).reply_budget() == 1000  # set: used as set
    assert ClaimsConfig().reply_budget(own_model_thinks=False) == 512
    assert ClaimsConfig().reply_budget(own_model_thinks=True) == 4096  # the run's own model thinks
    assert ClaimsConfig(model="m").reply_budget(own_model_thinks=True) == 512  # an endpoint: its params decide
    assert ClaimsConfig(model="m", params={"reasoning": True}).reply_budget(own_model_thinks=False) == 4096
    assert reply_budget(None, 8000, reasons=True) == 8000  # a default above the reasoning budget stays
    assert EndpointParams(reasoning=True).identity() == {"reasoning": True} and EndpointParams().identity() is None


def test_a_plain_judge_keeps_its_key_and_a_reasoning_one_is_keyed_by_its_budget() -> None:
    plain = LLMJudge(JudgeConfig(model="m", base_url="http://x/v1", api_key_env="NO_KEY_NEEDED"))
    # the identity a judge had when the default was the number 256 (labels made before stay valid)
    assert plain.fingerprint()[:6] == ["llm:m", "openai", "http://x/v1", 256, 0, True]
    thinking = LLMJudge(JudgeConfig(model="m", base_url="http://x/v1", params=THINKING))
    assert thinking.fingerprint()[3] == 4096 and thinking.fingerprint() != plain.fingerprint()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(content=text_content, default="ok:Paris.") as srv:
        yield srv


def test_the_reasoning_endpoint_is_asked_with_the_grown_budget(server: FakeOpenAI) -> None:
    server.reset()
    server.reasoning_endpoint = True  # refuses temperature/top_p/max_tokens, sends a separate reasoning field
    judge = JudgeConfig(model="o-mock", base_url=server.base_url, retries=0, json_mode=False, params=THINKING)
    client = StructuredClient(ClientSettings.of_judge(judge, option="--judge-model", where="mock"), correction=str)
    # the judge's own budget, and a prompt's own budget (HalluLens, the claim verifier) raised as well
    out = client.ask([Request([{"role": "user", "content": "a"}], str),
                      Request([{"role": "user", "content": "b"}], str, max_tokens=100)])
    assert [o.value for o in out] == ["Paris.", "Paris."]
    assert [r["max_completion_tokens"] for r in server.requests] == [4096, 4096]
    assert all("temperature" not in r and "max_tokens" not in r for r in server.requests)
    server.reset()  # negative control: the same judge without the declaration asks with its direct-answer budgets
    plain = JudgeConfig(model="o-mock", base_url=server.base_url, retries=0, json_mode=False,
                        params={**THINKING, "reasoning": False})
    client = StructuredClient(ClientSettings.of_judge(plain, option="--judge-model", where="mock"), correction=str)
    client.ask([Request([{"role": "user", "content": "a"}], str),
                Request([{"role": "user", "content": "b"}], str, max_tokens=100)])
    assert sorted(json.loads(json.dumps(r))["max_completion_tokens"] for r in server.requests) == [100, 256]
