"""Hosted providers through the multi-provider client (issue 42): a provider model (the mock Anthropic Messages
server, `api:anthropic/...` with a base URL) serves as target (answers, K samples, black-box detectors) and as
LLM judge, through the same retry, breaker and usage path as OpenAI-compatible endpoints; what a provider cannot
give (log-probs) refuses its detectors before any request; prices give USD per item and per 100 items."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("any_llm")

from haldet.backends.providers import ProviderBackend, ProviderEndpoint, check_provider, split_spec
from haldet.backends.select import check_signals
from haldet.config import EndpointConfig, RunConfig
from haldet.errors import HaldetError, SignalUnavailableError
from haldet.signals import Signal
from mock_anthropic import FakeAnthropic
from mock_openai import default_key, text_content


@pytest.fixture(scope="module")
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(content=text_content, default="ok:It is Paris.") as srv:
        yield srv


def test_provider_declares_what_it_gives_and_refuses_the_rest_before_any_request(server: FakeAnthropic) -> None:
    server.reset()
    config = RunConfig(models=["api:anthropic/claude-mock"], endpoint=EndpointConfig(base_url=server.base_url))
    needs = {"perplexity": frozenset({Signal.TOKEN_LOGPROBS}), "verbalized": frozenset({Signal.VERBALIZED}),
             "lexical_similarity": frozenset({Signal.SAMPLES})}
    with pytest.raises(SignalUnavailableError) as err:
        check_signals(config, needs, needs)
    assert "perplexity (token_logprobs)" in err.value.message and "'api' backend" in err.value.message
    assert "lexical_similarity, verbalized" in err.value.hint
    check_signals(config, {k: needs[k] for k in ("verbalized", "lexical_similarity")}, needs)
    with pytest.raises(HaldetError, match=r"endpoint\.n_samples: calls"):
        check_provider("api:anthropic/claude-mock", config.model_copy(
            update={"endpoint": EndpointConfig(base_url=server.base_url, n_samples="n")}))
    with pytest.raises(HaldetError, match="ANTHROPIC_API_KEY"):  # a hosted provider without its key
        check_provider("api:anthropic/claude-mock", RunConfig(models=["api:anthropic/claude-mock"]))
    with pytest.raises(HaldetError, match="api:PROVIDER/MODEL"):
        split_spec("api:claude-mock")
    assert server.requests == []


def test_retries_usage_and_the_thinking_block_through_the_client(server: FakeAnthropic) -> None:
    server.reset()
    server.plans["q"] = ["429", "500", "hang", "ok:It is Paris."]
    server.hang_seconds = 1.0
    be = ProviderBackend("api:anthropic/claude-mock", EndpointConfig(base_url=server.base_url, backoff=0.01,
                                                                     timeout=0.3, price_in=3.0, price_out=15.0))
    prompt = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}])
    out = be.generate([prompt], max_new_tokens=32, batch_size=4)[0]
    assert out.text == "It is Paris." and not out.error  # the thinking block is not the answer
    assert out.extra["cost_usd"] == pytest.approx((100 * 3.0 + 20 * 15.0) / 1e6)
    usage = be.usage_report()
    assert usage["errors"] == {"429": 1, "500": 1, "timeout": 1} and usage["calls"] == 4 and usage["retries"] == 3
    sent = server.requests[-1]
    assert sent["system"] == "Be brief." and sent["max_tokens"] == 32 and "seed" not in sent  # no seed on Anthropic
    samples = be.sample([prompt], k=3, temperature=1.0, top_p=0.9, seeds=[5], max_new_tokens=8, batch_size=4)[0]
    assert len(samples) == 3 and all("n" not in body for body in server.requests)  # K separate requests
    assert be.fingerprint()["client"] == "any-llm" and be.fingerprint()["model"] == "api:anthropic/claude-mock"

    async def reasoning() -> str | None:
        from haldet.backends.openai_client import Usage

        ep = ProviderEndpoint("api:anthropic/claude-mock", base_url=server.base_url)
        try:
            reply = await ep.call([{"role": "user", "content": "r"}], attempts=1, backoff=0, usage=Usage(),
                                  max_tokens=16)
        finally:
            await ep.close()
        return reply.choices[0].reasoning

    from haldet.backends.openai_client import run_coroutine

    assert run_coroutine(reasoning()) == server.thinking_text  # the thinking block, apart from the answer


def test_json_mode_on_a_provider_without_it_is_named_before_a_request(server: FakeAnthropic) -> None:
    from haldet.backends.structured import ClientSettings, Request, StructuredClient
    from haldet.config import JudgeConfig

    server.reset()
    judge = JudgeConfig(model="api:anthropic/claude-judge", base_url=server.base_url, json_mode=True)
    client = StructuredClient(ClientSettings.of_judge(judge, option="--judge-model", where="judge"), correction=str)
    with pytest.raises(HaldetError) as err:
        client.ask([Request([{"role": "user", "content": "x"}], str)])
    assert "`response_format`" in err.value.message and "judge.json_mode: false" in err.value.hint
    assert server.requests == []
    from haldet.backends.providers import check_roles  # and the run refuses it before any work

    with pytest.raises(HaldetError, match=r"judge\.json_mode: false"):
        check_roles(RunConfig(judge=judge))
    check_roles(RunConfig(judge=judge.model_copy(update={"json_mode": False})))


def _answers(limit: int) -> dict[str, tuple[str, str]]:
    from haldet.datasets.base import get_adapter

    items, _ = get_adapter("halueval_qa", None, None).load(limit=limit, seed=42, on_bad_row="fail")
    return {i.question: (i.references[0], i.incorrect[0] if i.incorrect else "nobody") for i in items}


def test_provider_model_as_target_and_as_judge_end_to_end(tmp_path: Path) -> None:
    """`haldet run` with an Anthropic-format model as target (answers, K samples, verbalized confidence) and as LLM
    judge: every other answer wrong, the judge labels by the known answers, faults on both roles are retried and
    counted, and the cost columns come from the declared prices and the billed tokens."""
    from typer.testing import CliRunner

    from haldet.cli import app

    answers = _answers(8)
    questions = sorted(answers)
    wrong = set(questions[::2])

    def question(body: dict[str, Any]) -> str:
        return next(q for q in questions if any(q.strip() in m["content"] for m in body["messages"]))

    def key_of(body: dict[str, Any]) -> str:
        if body["model"] == "claude-judge":
            return "judge:" + default_key(body)
        kind = "greedy" if body.get("temperature") == 0 else "sample"
        return f"{kind}:{question(body)}"

    def content(arg: str, body: dict[str, Any], j: int) -> str:
        q = question(body)
        bad = q in wrong
        if body["model"] == "claude-judge":
            return json.dumps({"reasoning": "compared", "category": "hallucination" if bad else "correct"})
        if "one number between 0 and 1" in body["messages"][-1]["content"]:
            return "0.1" if bad else "0.9"
        return answers[q][1] if bad else answers[q][0]

    config = tmp_path / "config.yaml"
    config.write_text("sample: {k: 2}\nendpoint: {backoff: 0.01, timeout: 5}\n"
                      "judge: {json_mode: false, backoff: 0.01}\n"
                      "prices: {api:anthropic/claude-mock: [3.0, 15.0], api:anthropic/claude-judge: [1.0, 5.0]}\n"
                      "evaluation: {bootstrap: 20, min_per_class: 0, split: [0.25, 0.25, 0.5]}\n")
    with FakeAnthropic(content=content, key_of=key_of, default="ok:") as srv:
        srv.plans[f"greedy:{questions[0]}"] = ["429", "ok:"]
        srv.plans[f"greedy:{questions[1]}"] = ["500", "500", "ok:"]
        srv.plans["judge:" + answers[questions[1]][0]] = ["429", "ok:"]
        out = tmp_path / "run"
        res = CliRunner().invoke(app, [
            "run", "--model", "api:anthropic/claude-mock", "--model-base-url", srv.base_url, "--limit", "8",
            "--detector", "verbalized,lexical_similarity", "--judge", "llm", "--judge-model",
            "api:anthropic/claude-judge", "--judge-base-url", srv.base_url, "--out", str(out),
            "--config", str(config), "--json"])
        assert res.exit_code == 0, res.output[-3000:]
    rows = json.loads(res.stdout)
    auroc = {r["detector"]: r for r in rows if r["metric"] == "auroc"}
    assert auroc["verbalized"]["value"] == pytest.approx(1.0)  # the judge's labels follow the known answers
    manifest = json.loads((out / "manifest.json").read_text())
    cell = manifest["cells"][0]
    assert cell["labels"] == {"correct": 4, "hallucination": 4}
    usage = cell["data"]["backend_usage"]
    assert usage["errors"] == {"429": 1, "500": 2} and usage["retries"] == 3
    [judge_usage] = cell["annotation"]["usage"].values()
    assert judge_usage["errors"] == {"429": 1} and judge_usage["calls"] == 9
    assert judge_usage["cost_usd"] == pytest.approx(8 * (100 * 1.0 + 20 * 5.0) / 1e6)  # tokens billed per role
    # USD: the answer ($3 / $15 per 1M tokens: 100 prompt + 20 completion tokens), and K=2 samples as 2 requests
    # and per 100 items beside Cost@100 s: 100 x the extra evidence (2 samples; 1 verbalized-confidence question)
    lex, verb = auroc["lexical_similarity"], auroc["verbalized"]
    assert lex["gen_usd_item"] == pytest.approx(0.0006)  # (100 x $3 + 20 x $15) / 1M
    assert lex["prep_usd_item"] == pytest.approx(0.0012) and lex["usd_at_n"] == pytest.approx(0.12)
    assert verb["prep_usd_item"] == pytest.approx(0.0006) and verb["usd_at_n"] == pytest.approx(0.06)
    assert lex["access"] == "api:anthropic text (no log-probs)"
    table = CliRunner().invoke(app, ["report", str(out)], env={"COLUMNS": "200"})
    assert "Cost@100 $" in table.output and "$0.12" in table.output, table.output[-2000:]
