"""A real local HTTP server (127.0.0.1, any free port) speaking the OpenAI chat-completions protocol, with faults
injected per request, for tests of everything that calls an endpoint (LLM judge, `openai` target backend, ...).

Each request is assigned a plan by `key_of(body)` (default: the text after "Model answer:" in the last user
message that has one, else the last user message). A plan is a list of actions for the key's 1st, 2nd, ...
request (the last one repeats); keys without a plan use `default`. Actions:

  ok:<arg>   200 with a reply; content = `content(arg, body, j)` for choice j (default: judge JSON with category
             `arg`; `text_content` returns `arg` itself, `a|b|c` giving choice j the j-th part, cycling)
  429 / 500 / 400 / 401 / 404   that status with an OpenAI-style error body (429 carries Retry-After: 0)
  slow       sleeps `slow_seconds` (past a short client timeout), then answers `ok:<default arg>`
  hang       sleeps `hang_seconds` and closes without answering
  drop       closes the connection without an answer (a connection error for the client)
  garbage    200 with non-JSON reply text; badcat: JSON with an invalid category (judge)
  unclosed   200 whose content opens a `<think>` block and never closes it, finish_reason "length"
  badbody    200 whose body is HTML, not JSON; nochoices: a JSON body without `choices`

With `"logprobs": true` in the request, each choice carries per-token log-probs of its content split into
whitespace-led words: token i gets log p = -(i + 1) / 10, its top alternatives are itself and "<token>~" one nat
lower; `top_first[key]` replaces the first position's alternatives (e.g. {"True": log 0.8, "False": log 0.2}).
`max_n` caps the number of choices returned (a server ignoring `n`); `ignore_logprobs` answers without log-probs
whatever was asked (a server without them); `reasoning` (a string) is sent as every reply's separate
`reasoning_content` field, as reasoning endpoints do (vLLM's reasoning parsers, DeepSeek). `requests` keeps every
body, `calls` counts per key.

`reasoning_endpoint=True` makes it an OpenAI reasoning-style endpoint: a request carrying `temperature` or `top_p` is
refused (400 naming the parameter, as OpenAI's o-series do), so is `max_tokens` (400: use `max_completion_tokens`);
each reply carries `reasoning` (else `reasoning_text`) in a separate `reasoning_content` field and counts reasoning
tokens in its usage.
`logprobs_fault` spoils the log-probs a reply sends ("empty", "truncated" or "malformed").
`sent_params` lists, per request, the parameters it carried.

Usage (tests/ is on sys.path): `from mock_openai import FakeOpenAI`; `with FakeOpenAI() as srv: ... srv.base_url`.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ContentFn = Callable[[str, dict[str, Any], int], str]


def judge_content(arg: str, body: dict[str, Any], j: int) -> str:
    return json.dumps({"reasoning": "Matches the acceptable answer.", "category": arg})


def text_content(arg: str, body: dict[str, Any], j: int) -> str:
    parts = arg.split("|")
    return parts[j % len(parts)]


def default_key(body: dict[str, Any]) -> str:
    users = [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]
    for content in reversed(users):
        if "Model answer:" in content:
            return str(content.rsplit("Model answer:", 1)[1].strip())
    return str(users[-1]) if users else ""


def words(text: str) -> list[str]:
    """The mock's tokenisation: whitespace-led words."""
    return re.findall(r"\s*\S+", text) or ([text] if text else [])


class FakeOpenAI:
    """A threaded chat-completions server with per-key fault plans (see the module docstring)."""

    def __init__(self, *, content: ContentFn = judge_content, key_of: Callable[[dict[str, Any]], str] = default_key,
                 default: str = "ok:correct", slow_seconds: float = 1.5, hang_seconds: float = 3.0,
                 usage: tuple[int, int] = (100, 20)) -> None:
        self.plans: dict[str, list[str]] = {}
        self.top_first: dict[str, dict[str, float]] = {}
        self.calls: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.clients: list[tuple[str, Any]] = []  # (key, client address) per request: who asked
        self.lock = threading.Lock()
        self.content, self.key_of, self.default = content, key_of, default
        self.slow_seconds, self.hang_seconds, self.usage = slow_seconds, hang_seconds, usage
        self.max_n: int | None = None
        self.ignore_logprobs = False
        self.reasoning_endpoint = False
        self.reasoning_text = "Let me think about the question first."
        self.reasoning: str | None = None  # a reasoning model's separate field (`reasoning_content`) on every reply
        self.logprobs_fault: str | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = server.key_of(body)
                with server.lock:
                    n = server.calls[key]
                    server.calls[key] += 1
                    server.requests.append(body)
                    server.clients.append((key, self.client_address))
                    plan = server.plans.get(key, [server.default])
                action = plan[min(n, len(plan) - 1)]
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.respond(action, key, body)  # the client may have given up (timeout): what `slow` tests

            def respond(self, action: str, key: str, body: dict[str, Any]) -> None:
                if action in ("429", "500", "400", "401", "404"):
                    self.send_json(int(action), server.error_body(int(action), f"injected {action}"),
                                   {"retry-after": "0"} if action == "429" else {})
                    return
                refused = server.refuses(body)
                if refused is not None:
                    self.send_json(400, server.error_body(400, refused[1], refused[0]))
                    return
                if action in ("hang", "drop"):
                    if action == "hang":
                        time.sleep(server.hang_seconds)
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(2)
                    return
                if action == "slow":
                    time.sleep(server.slow_seconds)
                    action = server.default
                if action == "badbody":
                    self.send_raw(200, b"<html>502 Bad Gateway</html>")
                    return
                if action == "nochoices":
                    self.send_json(200, {"id": "x", "object": "chat.completion", "model": body["model"]})
                    return
                self.send_json(200, server.completion(action, key, body))

            def send_raw(self, status: int, raw: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def send_json(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self.send_raw(status, json.dumps(obj).encode(), headers)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reply_text(self, action: str, body: dict[str, Any], j: int) -> str:
        """Choice j's text for an `ok:`/`garbage`/`badcat`/`unclosed` action."""
        if action == "garbage":
            return "Sure! I think this one is probably right."
        if action in ("badcat", "unclosed"):
            return json.dumps({"reasoning": "hmm", "category": "partially correct"})
        return self.content(action.split(":", 1)[1], body, j + int(body.get("seed") or 0))

    def refuses(self, body: dict[str, Any]) -> tuple[str, str] | None:
        """(parameter, message) a reasoning-style endpoint refuses in this request, or None."""
        if not self.reasoning_endpoint:
            return None
        for name in ("temperature", "top_p"):
            if name in body:
                return name, f"Unsupported parameter: '{name}' is not supported with this model."
        if "max_tokens" in body:
            return "max_tokens", ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                                  "Use 'max_completion_tokens' instead.")
        return None

    def error_body(self, status: int, message: str, param: str | None = None) -> dict[str, Any]:
        return {"error": {"message": message, "type": "invalid_request_error" if status == 400 else "test",
                          "param": param, "code": "unsupported_parameter" if param else None}}

    def completion(self, action: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """A chat-completion body with n choices."""
        n = int(body.get("n") or 1)
        if self.max_n is not None:
            n = min(n, self.max_n)
        choices = []
        for j in range(n):
            content, finish = self.reply_text(action, body, j), "stop"
            if action == "unclosed":  # a reasoning reply cut off inside its thinking block
                content, finish = "<think> Let me weigh the answer against the references", "length"
            message: dict[str, Any] = {"role": "assistant", "content": content}
            thought = self.reasoning if self.reasoning is not None else (
                self.reasoning_text if self.reasoning_endpoint else None)
            if thought is not None:
                message["reasoning_content"] = thought
            choice: dict[str, Any] = {"index": j, "finish_reason": finish, "message": message}
            if body.get("logprobs") and not self.ignore_logprobs:
                choice["logprobs"] = {"content": self.spoil(self.logprobs(key, content))}
            choices.append(choice)
        p, c = self.usage
        usage: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": c * n, "total_tokens": p + c * n}
        if self.reasoning_endpoint:
            usage["completion_tokens_details"] = {"reasoning_tokens": c // 2 * n}
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": choices, "usage": usage}

    def spoil(self, tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.logprobs_fault == "empty":
            return []
        if self.logprobs_fault == "truncated":
            return tokens[:1]
        if self.logprobs_fault == "malformed":
            return [{**t, "logprob": 0.5} for t in tokens]
        return tokens

    def logprobs(self, key: str, content: str) -> list[dict[str, Any]]:
        out = []
        for i, tok in enumerate(words(content)):
            lp = -(i + 1) / 10
            top = {tok: lp, tok + "~": lp - 1.0}
            if i == 0 and key in self.top_first:
                top = dict(self.top_first[key])
                lp = top.get(tok, lp)
            out.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                                         for t, v in top.items()]})
        return out

    @property
    def sent_params(self) -> list[set[str]]:
        return [set(body) - {"model", "messages"} for body in self.requests]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reset(self) -> None:
        with self.lock:
            self.plans.clear()
            self.top_first.clear()
            self.calls.clear()
            self.requests.clear()
            self.clients.clear()
            self.max_n = None
            self.ignore_logprobs = False
            self.reasoning_endpoint = False
            self.reasoning = None
            self.logprobs_fault = None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
