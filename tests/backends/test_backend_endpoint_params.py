"""Request parameters that differ by model (issue 42): declared per role (`endpoint.params`, `judge.params`, ...),
sent as declared, part of the identity, a refused parameter named once with the setting to change, and samples at a
set temperature refused before the run on an endpoint declared to take none. The mock endpoint runs in OpenAI
reasoning mode (refuses temperature/top_p and max_tokens, returns a separate reasoning field)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from haldet.backends.openai_backend import OpenAIBackend, logprobs_problem
from haldet.backends.openai_client import Choice
from haldet.backends.structured import ClientSettings, Request, StructuredClient
from haldet.config import EndpointConfig, JudgeConfig, RunConfig
from haldet.endpoint_params import EndpointParams
from haldet.errors import HaldetError, SignalUnavailableError
from mock_openai import FakeOpenAI, text_content

REASONING = EndpointParams(temperature=False, top_p=False, max_tokens_field="max_completion_tokens",
                           reasoning_effort="low")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(content=text_content, default="ok:Paris is the capital.") as srv:
        yield srv


def backend(server: FakeOpenAI, **kw: Any) -> OpenAIBackend:
    cfg = {"base_url": server.base_url, "retries": 3, "backoff": 0.01, "timeout": 1.0, "concurrency": 4, **kw}
    return OpenAIBackend("openai:o-mock", EndpointConfig(**cfg))


def chat(text: str) -> str:
    return json.dumps([{"role": "user", "content": text}])


def test_refused_parameter_named_once_with_the_setting_to_change(server: FakeOpenAI) -> None:
    server.reset()
    server.reasoning_endpoint = True
    be = backend(server)
    with pytest.raises(HaldetError) as err:
        be.generate([chat(f"q{i}") for i in range(6)], max_new_tokens=16, batch_size=8)
    assert "refused the parameter `temperature`" in err.value.message
    assert "endpoint.params.temperature: false" in err.value.hint
    assert len(server.requests) == 1  # the first request alone: no batch spent on a refused parameter
    # temperature declared off: the next refusal names the reply budget's field
    server.reset()
    server.reasoning_endpoint = True
    with pytest.raises(HaldetError) as err:
        backend(server, params=EndpointParams(temperature=False, top_p=False)).generate(
            [chat("q")], max_new_tokens=16, batch_size=8)
    assert "`max_tokens`" in err.value.message
    assert "endpoint.params.max_tokens_field: max_completion_tokens" in err.value.hint


def test_declared_parameters_are_sent_as_declared_and_key_the_model(server: FakeOpenAI) -> None:
    server.reset()
    server.reasoning_endpoint = True
    server.plans["q"] = ["429", "500", "ok:It is Paris."]  # faults on a reasoning endpoint: retried, counted
    be = backend(server, params=REASONING)
    out = be.generate([chat("q")], max_new_tokens=64, batch_size=8)[0]
    assert out.text == "It is Paris." and not out.error
    assert server.sent_params[-1] == {"max_completion_tokens", "reasoning_effort", "seed", "logprobs",
                                      "top_logprobs"}
    assert server.requests[-1]["reasoning_effort"] == "low" and server.requests[-1]["max_completion_tokens"] == 64
    assert be.usage_report()["errors"] == {"429": 1, "500": 1}
    plain = backend(server).fingerprint()
    assert "params" not in plain  # default parameters leave keys made before they existed unchanged
    assert be.fingerprint()["params"] == {"temperature": False, "top_p": False,
                                          "max_tokens_field": "max_completion_tokens", "reasoning_effort": "low"}
    # samples: no temperature sent, as declared (the run-level check refuses sample-based detectors: below)
    outs = be.sample([chat("s")], k=2, temperature=1.0, top_p=0.9, seeds=[3], max_new_tokens=8, batch_size=8)
    assert len(outs[0]) == 2 and "temperature" not in server.requests[-1]


def test_structured_client_reads_the_reasoning_field_and_names_the_judge_setting(server: FakeOpenAI) -> None:
    server.reset()
    server.reasoning_endpoint = True
    server.plans["judge me"] = ["hang", "ok:yes"]  # a timeout, then the answer
    settings = ClientSettings.of_judge(JudgeConfig(model="o-judge", base_url=server.base_url, backoff=0.01,
                                                   timeout=0.5, json_mode=False, params=REASONING),
                                       option="--judge-model", where="judge")
    client = StructuredClient(settings, correction=str)
    [reply] = client.ask([Request([{"role": "user", "content": "judge me"}], str)])
    assert reply.value == "yes" and client.usage.errors == {"timeout": 1}
    assert "temperature" not in server.requests[-1] and "max_completion_tokens" in server.requests[-1]
    assert {"params": REASONING.identity()} in client.fingerprint()
    refused = StructuredClient(ClientSettings.of_judge(JudgeConfig(model="o-judge", base_url=server.base_url,
                                                                   json_mode=False), option="--judge-model",
                                                       where="judge"), correction=str)
    with pytest.raises(HaldetError) as err:
        refused.ask([Request([{"role": "user", "content": f"x{i}"}], str) for i in range(4)])
    assert "judge.params.temperature: false" in err.value.hint
    # the separate reasoning field reaches the reply (the client's Choice)
    from haldet.backends.openai_client import OpenAIEndpoint, Usage, run_coroutine

    async def ask() -> Any:
        ep = OpenAIEndpoint("o", base_url=server.base_url)
        try:
            return await ep.call([{"role": "user", "content": "r"}], attempts=1, backoff=0, usage=Usage(),
                                 **REASONING.build(temperature=0.0, top_p=1.0, max_tokens=8))
        finally:
            await ep.close()

    assert run_coroutine(ask()).choices[0].reasoning == server.reasoning_text


def test_samples_at_a_temperature_refused_before_the_run(server: FakeOpenAI) -> None:
    """The check every run makes before any work (`check_signals`, as for hidden states on an API model)."""
    from haldet.backends.select import check_signals
    from haldet.signals import Signal

    server.reset()
    needs = {"lexical_similarity": frozenset({Signal.SAMPLES}), "verbalized": frozenset({Signal.VERBALIZED})}
    config = RunConfig(models=["openai:o-mock"], endpoint=EndpointConfig(base_url=server.base_url, params=REASONING))
    with pytest.raises(SignalUnavailableError) as err:
        check_signals(config, needs, needs)
    assert "lexical_similarity need K samples at temperature 1" in err.value.message
    assert "endpoint.params.temperature is false" in err.value.message and "verbalized" not in err.value.message
    check_signals(config, {"verbalized": needs["verbalized"]}, needs)  # a detector without samples runs
    check_signals(config.model_copy(update={"sample": config.sample.model_copy(update={"model": "smollm2-135m"})}),
                  needs, needs)  # samples drawn by another (local) model: allowed
    assert server.requests == []


@pytest.mark.parametrize("fault", ["empty", "truncated", "malformed"])
def test_spoilt_logprobs_are_a_recorded_failure_never_a_score(server: FakeOpenAI, fault: str) -> None:
    server.reset()
    server.logprobs_fault = fault
    server.plans["q"] = ["ok:It is Paris."]
    be = backend(server)
    out = be.generate([chat("q")], max_new_tokens=16, batch_size=8)[0]
    assert out.text == "It is Paris." and out.token_logprobs == [] and out.extra["logprobs"] is False
    assert out.extra["logprobs_error"].startswith({"empty": "the endpoint returned no log-probs",
                                                   "truncated": "truncated", "malformed": "malformed"}[fault])
    assert be.usage_report()["errors"] == {"logprobs": 1}


def test_logprobs_problem_accepts_whole_replies() -> None:
    good = Choice(text="It is Paris.", finish_reason="stop", tokens=["It", " is", " Paris."], logprobs=[-1, -0.5, 0])
    assert logprobs_problem(good) is None
    assert logprobs_problem(Choice(text="", finish_reason="stop")) is None  # nothing to cover
    assert "truncated" in str(logprobs_problem(Choice(text="It is Paris.", finish_reason="stop", tokens=["It"],
                                                      logprobs=[-1.0])))
