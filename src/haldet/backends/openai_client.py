"""One client for OpenAI-compatible chat endpoints, shared by the LLM judge and the `openai` target backend.

`OpenAIEndpoint.chat` makes ONE request through `openai.AsyncOpenAI` (the library's own retries off, so ours are
counted) and classifies what went wrong: 429, 5xx, 408/409, timeouts, connection errors and unreadable bodies are
`RetryableError`; 400/401/403/404 raise `HaldetError` at once (every item would fail the same way).
`OpenAIEndpoint.call` retries a request with exponential backoff, honouring Retry-After, and counts calls,
retries, errors and tokens in a `Usage`.

A `CircuitBreaker` per endpoint counts consecutive timeouts / connection failures across all requests in flight:
after `breaker_after` of them it opens, and every later attempt raises `EndpointDown` without calling, so a dead or
hanging endpoint costs about `breaker_after` timeouts instead of one per item and retry. Callers keep what was done
and report the rest as failed (never a made-up answer). Any successful reply closes the count again.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from haldet.endpoint_params import refusal_hint, refused_param
from haldet.errors import HaldetError

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

T = TypeVar("T")
RETRY_AFTER_CAP = 60.0
OPENAI_BASE_URL = "https://api.openai.com/v1"  # where the client goes when no base URL is given


# --- accounting -----------------------------------------------------------------------------------------------
@dataclass
class Usage:
    """What calling an endpoint cost: calls (every attempt), retries, failed items, errors by kind, tokens."""

    calls: int = 0
    retries: int = 0
    failures: int = 0
    malformed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    breaker_open: bool = False  # the circuit breaker stopped calling a dead endpoint

    def cost_usd(self, price_in: float | None, price_out: float | None) -> float | None:
        """Cost from per-1M-token prices; None when a price is unknown (never a guessed zero)."""
        if price_in is None or price_out is None:
            return None
        return (self.prompt_tokens * price_in + self.completion_tokens * price_out) / 1e6

    def merge(self, other: Usage) -> None:
        """Add another account (one request's) to this one."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.breaker_open = self.breaker_open or other.breaker_open

    def note_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def add_reply(self, reply: ChatReply) -> None:
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens

    def report(self, price_in: float | None = None, price_out: float | None = None) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(out["seconds"], 3)
        out["cost_usd"] = self.cost_usd(price_in, price_out)
        return out


COUNTERS = ("calls", "retries", "failures", "malformed", "prompt_tokens", "completion_tokens", "seconds")


def accumulate_usage(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Usage reports of successive invocations summed (counters, errors by kind, cost when both are known), so a
    resumed or repeated annotation shows what it cost in total; `invocations` counts the reports summed."""
    if not old:
        return {**new, "invocations": 1}
    if not new.get("calls"):  # nothing was called this time (all cached): the totals stand
        return dict(old)
    out = dict(new)
    for key in COUNTERS:
        if key in old or key in new:
            out[key] = round(float(old.get(key) or 0) + float(new.get(key) or 0), 3) if key == "seconds" else \
                int(old.get(key) or 0) + int(new.get(key) or 0)
    errors = dict(old.get("errors") or {})
    for kind, n in (new.get("errors") or {}).items():
        errors[kind] = errors.get(kind, 0) + n
    out["errors"] = errors
    a, b = old.get("cost_usd"), new.get("cost_usd")
    out["cost_usd"] = None if a is None or b is None else a + b
    out["breaker_open"] = bool(new.get("breaker_open"))
    out["invocations"] = int(old.get("invocations") or 1) + 1
    return out


def accumulate_usages(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """`accumulate_usage` per judge id ({judge id: usage report}); judges absent this time keep their totals."""
    old = old or {}
    return {**old, **{jid: accumulate_usage(old.get(jid), usage) for jid, usage in new.items()}}


# --- replies and errors ---------------------------------------------------------------------------------------
@dataclass
class Choice:
    """One returned completion. `tokens`/`logprobs`/`top_logprobs` are set when the endpoint sent log-probs
    (token strings, log p of each, and per position {token: log p} of the top alternatives)."""

    text: str
    finish_reason: str
    tokens: list[str] | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[dict[str, float]] | None = None
    reasoning: str | None = None  # an endpoint's separate reasoning field (`reasoning_content` / `reasoning`)


@dataclass
class ChatReply:
    choices: list[Choice]
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def text(self) -> str:
        return self.choices[0].text


class RetryableError(Exception):
    """A failed attempt worth repeating; `kind` names it in the error counts ("429", "500", "timeout", ...)."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class EndpointDown(Exception):
    """The circuit breaker is open: no request was made."""


class CallFailed(Exception):
    """Every attempt of one request failed (or the breaker opened); `error` is the last reason."""

    def __init__(self, error: str, attempts: int) -> None:
        super().__init__(error)
        self.error = error
        self.attempts = attempts


class CircuitBreaker:
    """Opens after `threshold` consecutive timeouts or connection failures; a success resets the count."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.consecutive = 0
        self.open = False
        self.reason = ""

    def success(self) -> None:
        if not self.open:
            self.consecutive = 0

    def failure(self, kind: str, message: str) -> None:
        if kind not in ("timeout", "connection"):
            return
        self.consecutive += 1
        if self.consecutive >= self.threshold and not self.open:
            self.open = True
            self.reason = (f"endpoint unreachable: {self.consecutive} consecutive timeouts/connection failures "
                           f"(last: {message}); stopped calling it")

    def check(self) -> None:
        if self.open:
            raise EndpointDown(self.reason)


# --- the endpoint ---------------------------------------------------------------------------------------------
def api_key(model: str, base_url: str | None, api_key_env: str, option: str) -> str:
    """The key from `$api_key_env`; a local server (base_url given) accepts any key; else one clear error."""
    key = os.environ.get(api_key_env)
    if key:
        return key
    if base_url is None:
        raise HaldetError(f"no API key for {model}: ${api_key_env} is not set", where=option,
                          hint=f"export {api_key_env}=..., or point the base URL at a local OpenAI-compatible server")
    return "not-needed"  # local servers (vLLM, llama.cpp) accept any key


class OpenAIEndpoint:
    """An OpenAI-compatible chat endpoint. `where` names it in messages, `option` is the flag that sets its model
    (for hints), `section` the config section whose `params` shape its requests (named when the server refuses
    one). A local server (base_url given) needs no API key."""

    def __init__(self, model: str, *, base_url: str | None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, breaker_after: int = 5, where: str = "", option: str = "--model",
                 section: str = "endpoint") -> None:
        key = self.lookup_key(model, base_url, api_key_env, option)
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.where = where or f"{model} at {base_url or 'api.openai.com'}"
        self.option = option
        self.section = section
        self.breaker = CircuitBreaker(breaker_after)
        self.client = self.connect(key)

    def lookup_key(self, model: str, base_url: str | None, api_key_env: str, option: str) -> Any:
        return api_key(model, base_url, api_key_env, option)

    def connect(self, key: str) -> Any:
        """The library client (its own retries off, so ours are counted)."""
        import openai

        return openai.AsyncOpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=0)

    def refused(self, status: int, message: str, named: str | None, params: dict[str, Any]) -> HaldetError:
        """The one error for a request the server refused: the parameter it names and the setting to change, or
        the status's hint."""
        sent = [*params, *(params.get("extra_body") or {})]
        param = refused_param(named, message, sent) if status in (400, 422) else None
        if param is not None:
            return HaldetError(f"the endpoint refused the parameter `{param}` ({status}): {message}", where=self.where,
                               hint=refusal_hint(param, self.section))
        return HaldetError(f"the endpoint refused the request ({status}): {message}", where=self.where,
                           hint=status_hint(status, self.option))

    async def chat(self, messages: list[dict[str, str]], **params: Any) -> ChatReply:
        """One request. Raises `RetryableError`, `EndpointDown` (breaker open) or `HaldetError` (fatal status)."""
        import openai

        self.breaker.check()
        try:
            resp = await self.client.chat.completions.create(
                model=self.model, messages=cast("list[ChatCompletionMessageParam]", messages), **params)
        except openai.APITimeoutError as exc:
            err = RetryableError("timeout", f"request timed out after {self.timeout:g}s")
            self.breaker.failure(err.kind, str(err))
            raise err from exc
        except openai.APIConnectionError as exc:
            err = RetryableError("connection", f"connection error: {_short(exc)}")
            self.breaker.failure(err.kind, str(err))
            raise err from exc
        except openai.RateLimitError as exc:
            raise RetryableError("429", "rate limited (429)", _retry_after(exc.response)) from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code in (408, 409):
                raise RetryableError(str(exc.status_code), f"server error {exc.status_code}",
                                     _retry_after(exc.response)) from exc
            raise self.refused(exc.status_code, _short(exc), getattr(exc, "param", None), params) from None
        except (openai.APIError, ValueError) as exc:  # a 200 whose body is not a chat completion
            raise RetryableError("malformed", f"unreadable response body: {_short(exc)}") from exc
        self.breaker.success()
        return _reply(resp)

    async def call(self, messages: list[dict[str, str]], *, attempts: int, backoff: float, usage: Usage,
                   check: Callable[[ChatReply], tuple[str, list[dict[str, str]]] | None] | None = None,
                   **params: Any) -> ChatReply:
        """`chat` with retries: up to `attempts` tries, waiting backoff * 2^i (or Retry-After, if longer).
        `check` (optional) inspects a reply: None accepts it; (reason, messages) rejects it, and the next attempt
        sends those messages (a correction turn). Raises `CallFailed` when all fail or the breaker opens;
        `HaldetError` on a fatal status."""
        last = ""
        for attempt in range(1, attempts + 1):
            wait: float | None = None
            try:
                reply = await self.attempt(messages, usage=usage, retry=attempt > 1, **params)
            except EndpointDown as exc:
                raise CallFailed(str(exc), attempt - 1) from None
            except RetryableError as exc:
                last, wait = str(exc), exc.retry_after
            else:
                rejected = check(reply) if check is not None else None
                if rejected is None:
                    return reply
                last, messages = rejected
            if attempt < attempts:
                await asyncio.sleep(max(backoff * 2 ** (attempt - 1), wait or 0.0))
        raise CallFailed(last, attempts)

    async def attempt(self, messages: list[dict[str, str]], *, usage: Usage, retry: bool, **params: Any) -> ChatReply:
        """One counted attempt: calls, retries, errors by kind and tokens go into `usage`."""
        try:
            self.breaker.check()
        except EndpointDown:
            usage.breaker_open = True
            raise
        usage.calls += 1
        usage.retries += int(retry)
        try:
            reply = await self.chat(messages, **params)
        except RetryableError as exc:
            usage.note_error(exc.kind)
            raise
        usage.add_reply(reply)
        return reply

    async def close(self) -> None:
        await self.client.close()


def _reply(resp: Any) -> ChatReply:
    """The parts of a chat completion haldet reads; a body without choices[i].message is `malformed`."""
    try:
        choices = []
        for ch in resp.choices:
            text = ch.message.content or ""
            reasoning = getattr(ch.message, "reasoning_content", None) or getattr(ch.message, "reasoning", None)
            reasoning = getattr(reasoning, "content", reasoning)  # the provider client's Reasoning(content=...)
            tokens = logprobs = top = None
            content = getattr(getattr(ch, "logprobs", None), "content", None)
            if content:
                tokens = [t.token for t in content]
                logprobs = [float(t.logprob) for t in content]
                top = [{a.token: float(a.logprob) for a in (t.top_logprobs or [])} for t in content]
            choices.append(Choice(text=text, finish_reason=str(ch.finish_reason or "stop"), tokens=tokens,
                                  logprobs=logprobs, top_logprobs=top,
                                  reasoning=reasoning if isinstance(reasoning, str) else None))
        if not choices:
            raise IndexError("no choices")
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        raise RetryableError("malformed", f"response without choices[].message ({exc})") from exc
    usage = getattr(resp, "usage", None)
    return ChatReply(choices=choices, prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                     completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0))


def _retry_after(response: Any) -> float | None:
    try:
        value = response.headers.get("retry-after")
        return min(float(value), RETRY_AFTER_CAP) if value is not None else None
    except (AttributeError, ValueError):
        return None


def _short(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def status_hint(status: int, option: str = "--model") -> str:
    return {
        400: "the endpoint rejected the request; if it does not support JSON mode or log-probs, turn them off "
             "(judge.json_mode: false / endpoint.logprobs: false)",
        401: "check the API key ($OPENAI_API_KEY, or the api_key_env setting)",
        403: "the key has no access to this model",
        404: f"check {option} and the base URL (it usually ends in /v1)",
    }.get(status, "check the endpoint settings")


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also from code that already runs inside an event loop (then in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def gather_closing(coros: Iterable[Awaitable[T]], endpoint: OpenAIEndpoint, *,
                         first_alone: bool = False) -> list[T]:
    """Every request coroutine at once (each bounds itself by the caller's semaphore); when one raises, the others
    are cancelled and awaited before the error propagates; the endpoint's client is closed either way.
    `first_alone`: the first request runs before the others start, so a request the server refuses (a parameter
    it does not take) stops the stage after one request, not after a batch of them."""
    pending = iter(coros)
    head: list[T] = []
    try:
        first = next(pending, None) if first_alone else None
        if first is not None:
            head.append(await first)
        tasks = [asyncio.ensure_future(coro) for coro in pending]
        try:
            return head + list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    finally:
        await endpoint.close()
