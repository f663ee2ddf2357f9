"""The `openai` target backend against a real local HTTP server (tests/mock_openai.py): answers, log-probs, K
samples (n=K and the fallback for servers that ignore n), retries on 429/500/timeouts/bad bodies, failures that
store nothing, the circuit breaker on a dead endpoint (non-zero exit unless --allow-failures), hidden-state
detectors refused before any request, and a whole run with black- and gray-box detectors and USD cost columns."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from haldet.backends.openai_backend import OpenAIBackend, prompt_messages
from haldet.config import EndpointConfig, RunConfig
from haldet.errors import HaldetError, SignalUnavailableError
from mock_openai import FakeOpenAI, text_content


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(content=text_content, default="ok:Paris is the capital.", slow_seconds=3.0) as srv:
        yield srv


def backend(server: FakeOpenAI, **kw: Any) -> OpenAIBackend:
    cfg = {"base_url": server.base_url, "retries": 3, "backoff": 0.01, "timeout": 10.0, "concurrency": 4,
           "price_in": 1.0, "price_out": 2.0, **kw}
    return OpenAIBackend("openai:mock-model", EndpointConfig(**cfg))


def chat(text: str) -> str:
    return json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}])


def test_greedy_answers_with_logprobs_tokens_and_cost(server: FakeOpenAI) -> None:
    server.reset()
    server.plans["q1"] = ["ok:It is Paris."]
    be = backend(server)
    out = be.generate([chat("q1")], max_new_tokens=16, batch_size=4)[0]
    assert out.text == "It is Paris." and not out.error and out.finish_reason == "stop"
    assert out.extra["tokens"] == ["It", " is", " Paris."]
    assert out.token_logprobs == pytest.approx([-0.1, -0.2, -0.3]) and out.n_tokens == 3
    assert out.extra["cost_usd"] == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
    sent = server.requests[-1]
    assert sent["model"] == "mock-model" and sent["temperature"] == 0 and sent["max_tokens"] == 16
    assert sent["logprobs"] is True and sent["top_logprobs"] == 20
    assert sent["messages"] == prompt_messages(chat("q1"))  # the stored prompt is exactly what was sent
    assert be.render_chat([{"role": "user", "content": "x"}]) == '[{"role": "user", "content": "x"}]'
    # log-probs off: none asked for, none stored, the billed token count is kept
    out = backend(server, logprobs=False).generate([chat("q1")], max_new_tokens=16, batch_size=4)[0]
    assert "logprobs" not in server.requests[-1] and out.token_logprobs == [] and out.n_tokens == 20


def test_k_samples_with_n_and_with_separate_calls(server: FakeOpenAI) -> None:
    server.reset()
    server.plans["s"] = ["ok:a|b|c|d"]
    be = backend(server)
    outs = be.sample([chat("s")], k=3, temperature=1.0, top_p=0.9, seeds=[10], max_new_tokens=8, batch_size=8)
    assert [o.text for o in outs[0]] == ["c", "d", "a"]  # one request, n=3, choice j from seed 10 + j
    assert len(server.requests) == 1 and server.requests[0]["n"] == 3 and be.n_supported is True
    # a server that ignores n (llama.cpp): the missing samples come from separate seeded requests
    server.reset()
    server.plans["s"] = ["ok:a|b|c|d"]
    server.max_n = 1
    be = backend(server)
    outs = be.sample([chat("s")], k=3, temperature=1.0, top_p=0.9, seeds=[10], max_new_tokens=8, batch_size=8)
    assert [o.text for o in outs[0]] == ["c", "d", "a"] and be.n_supported is False
    assert sorted(r.get("seed") for r in server.requests) == [10, 11, 12]  # concurrent: any order
    assert all(len(o.token_logprobs) == 1 for o in outs[0])


def test_retries_recover_and_exhausted_calls_store_nothing(server: FakeOpenAI) -> None:
    server.reset()
    server.plans.update({"r429": ["429", "ok:A"], "r500": ["500", "500", "ok:B"], "rslow": ["slow", "ok:C"],
                         "rbody": ["badbody", "ok:D"], "rnone": ["nochoices", "ok:E"], "dead": ["500"]})
    be = backend(server, timeout=1.5)  # "slow" answers after 3 s
    names = ["r429", "r500", "rslow", "rbody", "rnone", "dead"]
    outs = be.generate([chat(n) for n in names], max_new_tokens=8, batch_size=8)
    assert [o.text for o in outs[:5]] == ["A", "B", "C", "D", "E"]
    assert outs[5].error and "server error 500" in outs[5].error and outs[5].text == ""
    assert server.calls["dead"] == 4  # 1 + 3 retries, then given up: no answer invented
    usage = be.usage_report()
    assert usage["errors"] == {"429": 1, "500": 2 + 4, "timeout": 1, "malformed": 2} and usage["failures"] == 1
    assert usage["retries"] == 1 + 2 + 1 + 1 + 1 + 3 and not usage["breaker_open"]


def test_hidden_state_detector_refused_before_any_request(tmp_path: Path, server: FakeOpenAI) -> None:
    import haldet

    server.reset()
    config = RunConfig(models=["openai:mock-model"], detectors=["perplexity", "saplma"], limit=4,
                       endpoint=EndpointConfig(base_url=server.base_url))
    with pytest.raises(SignalUnavailableError) as err:
        haldet.run(config, tmp_path / "run")
    assert "saplma (hidden_last)" in err.value.message and "perplexity" in err.value.hint
    assert server.requests == [] and not (tmp_path / "run" / "manifest.json").exists()
    no_lp = config.model_copy(update={"detectors": ["perplexity"], "endpoint": EndpointConfig(
        base_url=server.base_url, logprobs=False)})
    with pytest.raises(SignalUnavailableError, match="token_logprobs"):
        haldet.run(no_lp, tmp_path / "run")
    with pytest.raises(HaldetError, match="HALDET_TEST_NO_SUCH_KEY"):
        OpenAIBackend("openai:gpt-4o-mini", EndpointConfig(api_key_env="HALDET_TEST_NO_SUCH_KEY"))
    hosted = RunConfig(models=["openai:gpt-4o-mini"], detectors=["perplexity"],
                       endpoint=EndpointConfig(api_key_env="HALDET_TEST_NO_SUCH_KEY"))
    with pytest.raises(HaldetError, match="HALDET_TEST_NO_SUCH_KEY"):  # before the run directory is touched
        haldet.run(hosted, tmp_path / "hosted")
    assert not (tmp_path / "hosted").exists()


def _answers(limit: int) -> dict[str, tuple[str, str]]:
    """question -> (correct, wrong) answer of the packaged HaluEval-QA items a run with `limit` evaluates."""
    from haldet.datasets.base import get_adapter

    items, _ = get_adapter("halueval_qa", None, None).load(limit=limit, seed=42, on_bad_row="fail")
    return {i.question: (i.references[0], i.incorrect[0] if i.incorrect else "nobody") for i in items}


def invoke(*args: str) -> Any:
    """The real `haldet` command line, in this process (no interpreter start-up per call)."""
    from typer.testing import CliRunner

    from haldet.cli import app

    if args and args[0] == "run":  # tiny cells: their thinness is tested in tests/report/test_thin_cells.py
        args = (*args, "--min-per-class", "0")
    return CliRunner().invoke(app, list(args))


def test_run_end_to_end_black_and_gray_box_with_costs(tmp_path: Path) -> None:
    """A whole `haldet run` whose target is the mock endpoint: every other item answered wrongly; the verbalized
    and self-eval replies agree with correctness, so those detectors separate the classes perfectly."""
    answers = _answers(8)
    questions = sorted(answers)
    wrong = set(questions[::2])

    def content(arg: str, body: dict[str, Any], j: int) -> str:
        text = body["messages"][-1]["content"]  # the task, or a follow-up question after the model's answer
        q = next(q for q in questions if any(q.strip() in m["content"] for m in body["messages"]))
        bad = q in wrong
        if "one number between 0 and 1" in text:
            return "0.1" if bad else "0.9"
        if "Reply True or False" in text:
            return "False" if bad else "True"
        return answers[q][1] if bad else answers[q][0]

    with FakeOpenAI(content=content, default="ok:") as srv:
        out = tmp_path / "run"
        res = invoke("run", "--model", "openai:mock-model", "--model-base-url", srv.base_url, "--limit", "8",
                  "--detector", "verbalized,self_eval,perplexity,lexical_similarity,ln_entropy", "--out", str(out),
                  "--config", str(_config(tmp_path)), "--json")
        assert res.exit_code == 0, res.output[-3000:]
        rows = json.loads(res.stdout)
        n_requests = len(srv.requests)
    auroc = {r["detector"]: r for r in rows if r["metric"] == "auroc"}
    assert set(auroc) == {"verbalized", "self_eval", "perplexity", "lexical_similarity", "ln_entropy"}
    assert auroc["verbalized"]["value"] == pytest.approx(1.0) and auroc["self_eval"]["value"] == pytest.approx(1.0)
    # USD cost columns: greedy answer and extra evidence, from the configured prices and the billed tokens
    ln = auroc["ln_entropy"]
    assert ln["gen_usd_item"] == pytest.approx((100 * 0.5 + 20 * 1.5) / 1e6)
    assert ln["prep_usd_item"] == pytest.approx((100 * 0.5 + 20 * 3 * 1.5) / 1e6)  # one request, n=3
    assert ln["extra_calls_item"] == 3
    gens = [json.loads(line) for line in (out / "halueval_qa" / "openai_mock-model" / "generate.jsonl").open()]
    assert len(gens) == 8 and all(g["token_text"] and len(g["token_text"]) == len(g["token_logprobs"]) for g in gens)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cells"][0]["data"]["backend_usage"]["calls"] == n_requests
    assert manifest["cells"][0]["model_fingerprint"]["backend"] == "openai"

    # issue 18: relabelling with a dead LLM judge stops at its breaker, exits 1 unless --allow-failures, and the
    # judge's usage in the manifest is summed over the two invocations instead of overwritten
    judge = ["annotate", str(out), "--judge", "llm", "--judge-model", "j", "--judge-base-url", dead_url(), "--json"]
    first = invoke(*judge)
    assert first.exit_code == 1 and "circuit breaker" in first.stderr, first.output[-2000:]
    second = invoke(*judge, "--allow-failures")
    assert second.exit_code == 0 and "circuit breaker" in second.stderr
    calls = [json.loads(r.stdout)[0]["usage"]["llm:j"]["calls"] for r in (first, second)]
    assert all(0 < c <= 5 + 8 for c in calls)  # the threshold + requests already in flight, not 8 items x 5 tries
    usage = json.loads((out / "manifest.json").read_text())["annotation"]["halueval_qa|openai:mock-model"]["llm"]
    assert usage["usage"]["llm:j"]["invocations"] == 2 and usage["usage"]["llm:j"]["calls"] == sum(calls)
    assert usage["failed"] == 8


def dead_url() -> str:
    """An endpoint where nothing listens: every request is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("sample: {k: 3}\nendpoint: {price_in: 0.5, price_out: 1.5, backoff: 0.01, timeout: 5}\n"
                    "evaluation: {bootstrap: 50}\n")
    return path


def test_dead_endpoint_stops_at_the_breaker_and_exits_non_zero(tmp_path: Path) -> None:
    args = ["run", "--model", "openai:mock-model", "--model-base-url", dead_url(), "--limit", "12", "--detector",
            "perplexity", "--config", str(_config(tmp_path))]
    res = invoke(*args, "--out", str(tmp_path / "a"))
    assert res.exit_code == 1, res.output[-3000:]
    assert "failure(s)" in res.stderr and "circuit breaker" in res.stderr
    assert "Traceback" not in res.stderr and "--allow-failures" in res.stderr
    cell = json.loads((tmp_path / "a" / "manifest.json").read_text())["cells"][0]
    usage = cell["data"]["backend_usage"]
    assert usage["breaker_open"] and usage["calls"] <= 5 + 4  # threshold + requests already in flight
    failed = (tmp_path / "a" / "halueval_qa" / "openai_mock-model" / "generate.failed.jsonl").read_text().splitlines()
    assert len(failed) == 12 and not (tmp_path / "a" / "halueval_qa" / "openai_mock-model" / "generate.jsonl").exists()
    res = invoke(*args, "--out", str(tmp_path / "b"), "--allow-failures")
    assert res.exit_code == 0 and "failure(s)" in res.stderr


def test_chat_template_kwargs_reach_the_endpoint_and_key_the_model(server: FakeOpenAI) -> None:
    """`chat_template_kwargs` go into every request body (vLLM/SGLang read them there) and into the fingerprint;
    without them nothing extra is sent and the fingerprint is unchanged."""
    server.reset()
    plain = backend(server)
    plain.generate([chat("q1")], max_new_tokens=8, batch_size=1)
    assert "chat_template_kwargs" not in server.requests[-1]
    be = OpenAIBackend("openai:mock-model", plain.config, chat_template_kwargs={"enable_thinking": False})
    be.sample([chat("q1")], k=2, temperature=1.0, top_p=0.9, seeds=[1], max_new_tokens=8, batch_size=2)
    assert server.requests[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert be.fingerprint() == {**plain.fingerprint(), "chat_template_kwargs": {"enable_thinking": False}}
