"""LLM judge against a real local HTTP server (127.0.0.1) speaking the OpenAI chat-completions protocol, which
injects 429s, 500s, timeouts, malformed JSON and bad bodies: retries happen, failures are reported, and no
label is ever invented. Also: output parsing, prompts with the calibration examples, the local hf backend."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from haldet.config import JudgeConfig
from haldet.errors import HaldetError
from haldet.judges.base import JudgeFailure
from haldet.judges.llm import LLMJudge, MalformedOutput, PromptBuilder, load_templates, parse_judge_output
from haldet.schema import Category, Generation, Instance, Label


class FakeOpenAI:
    """A threaded chat-completions server. Each item's answer text selects a plan: a list of actions for its
    1st, 2nd, ... request (the last repeats). Actions: `ok:<category>`, `429`, `500`, `slow` (sleeps past the
    client timeout), `garbage` (non-JSON reply text), `badcat` (JSON with an invalid category), `badbody`
    (HTTP 200 whose body is not JSON), `401`."""

    def __init__(self, slow_seconds: float = 1.5) -> None:
        self.plans: dict[str, list[str]] = {}
        self.calls: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.slow_seconds = slow_seconds
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = server.answer_of(body["messages"])
                with server.lock:
                    n = server.calls[answer]
                    server.calls[answer] += 1
                    server.requests.append(body)
                    plan = server.plans.get(answer, ["ok:correct"])
                action = plan[min(n, len(plan) - 1)]
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.respond(action, body)  # the client may have given up (timeout): what `slow` tests

            def respond(self, action: str, body: dict[str, Any]) -> None:
                if action in ("429", "500", "401"):
                    self.send_json(int(action), {"error": {"message": f"injected {action}", "type": "test"}},
                                   {"retry-after": "0"} if action == "429" else {})
                    return
                if action == "slow":
                    time.sleep(server.slow_seconds)
                    action = "ok:correct"
                if action == "badbody":
                    raw = b"<html>502 Bad Gateway</html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if action == "garbage":
                    content = "Sure! I think this one is probably right."
                elif action == "badcat":
                    content = json.dumps({"reasoning": "hmm", "category": "partially correct"})
                else:
                    content = json.dumps({"reasoning": "Matches the acceptable answer.",
                                          "category": action.split(":", 1)[1]})
                self.send_json(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})

            def send_json(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @staticmethod
    def answer_of(messages: list[dict[str, str]]) -> str:
        for msg in reversed(messages):
            if msg["role"] == "user" and "Model answer:" in msg["content"]:
                return msg["content"].rsplit("Model answer:", 1)[1].strip()
        return ""

    def reset(self) -> None:
        with self.lock:
            self.plans.clear()
            self.calls.clear()
            self.requests.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


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
    builder = PromptBuilder(load_templates(None))
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
    custom = PromptBuilder(load_templates(str(tmp_path)))
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
    from haldet.backends.hf import HFBackend

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
