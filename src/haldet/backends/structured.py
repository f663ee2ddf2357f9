"""One structured-LLM client: the request / retry / correction loop shared by the LLM judge, the prompted
verdicts and HalluLens (construction and judging), so the three ask a model the same way.

A caller hands `StructuredClient.ask` requests (chat messages plus a parser that turns the reply text into a value
or raises `ValueError`) and gets, per request, the parsed `Reply` or a `CallFailure` after its attempts: a failure
is listed, never turned into a value. What the client does:

- **request** an OpenAI-compatible endpoint (`OpenAIEndpoint`: bounded concurrency, Retry-After, circuit breaker for
  a dead endpoint, fatal statuses raised at once) or a local model (the backend given, else `HFBackend(model)`:
  batched generation, the reply prefilled with `Request.prefill` so small models stay on format; greedy, or one
  sample seeded by the prompt when `temperature` > 0, so a reply is a function of its prompt);
- **retry** with exponential backoff: `retries` extra attempts at an endpoint; a local model gets at most one more,
  since only a changed prompt can change a deterministic reply;
- **correct**: a reply that does not parse is asked again with the bad reply and the caller's correction text
  (`correction(error)`) appended to the original chat;
- **count** calls, retries, failures, malformed replies, errors by kind, tokens, seconds and cost in `usage`;
- **cache** (optional, a JSONL file) replies keyed by the model's fingerprint and the whole request, which makes
  resumed runs and reruns free.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from haldet.backends.hf.backend import HFBackend
from haldet.backends.openai_client import (
    CallFailed,
    ChatReply,
    OpenAIEndpoint,
    Usage,
    gather_closing,
    run_coroutine,
)
from haldet.backends.providers import PROVIDER_PREFIX, ProviderEndpoint
from haldet.config import JudgeConfig, digest
from haldet.endpoint_params import EndpointParams, reply_budget
from haldet.model_prices import resolve_price
from haldet.store import StageLog
from haldet.text.reasoning import Markers, split_text

T = TypeVar("T")
MAX_REPLY_IN_CORRECTION = 2000  # characters of a malformed reply shown back to the model
THINK = Markers(open="<think>", close="</think>")  # a reasoning model's inline thinking block in a reply


@dataclass
class Request(Generic[T]):
    """One call: `messages` (chat turns), `parse` (reply text -> value, `ValueError` when malformed), `prefill`
    (start of the reply forced on a local model so small models stay on format; part of the parsed text),
    `max_tokens` (reply budget; None = the client's)."""

    messages: list[dict[str, str]]
    parse: Callable[[str], T]
    prefill: str = ""
    max_tokens: int | None = None


@dataclass(frozen=True)
class CallFailure:
    """No usable reply after all attempts (endpoint errors or malformed replies)."""

    error: str
    attempts: int


@dataclass
class Reply(Generic[T]):
    """A parsed reply; an endpoint's also says what its request billed (every attempt: tokens, and USD where the
    client knows the model's price, else None)."""

    value: T
    text: str
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    price_source: str = ""  # what made `cost_usd` (`haldet.model_prices`): an endpoint's replies only


Outcome = Reply[Any] | CallFailure


@dataclass(frozen=True)
class ClientSettings:
    """How a client reaches its model and how hard it tries. `backend` "hf" asks the client's local backend object
    (the one given, e.g. the run's own model, else `HFBackend(model)`) instead of an endpoint. `top_p` and `seed`
    are sent only when set; `json_mode` asks the endpoint for a JSON object. `option` is the setting that names the
    model and `where` names the endpoint in messages."""

    model: str
    backend: Literal["openai", "hf"] = "openai"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    breaker_after: int = 5
    concurrency: int = 8
    retries: int = 4
    backoff: float = 1.0
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    json_mode: bool = False
    batch_size: int = 8  # local model: prompts per generate call
    count_prompt_tokens: bool = True  # local model: tokenise each prompt to count its tokens
    option: str = "--judge-model"
    where: str = ""
    params: EndpointParams = field(default_factory=EndpointParams)  # what requests carry, declared per role
    section: str = "judge"  # the config section of this role (named when a server refuses a parameter)
    price_in: float | None = None  # USD per 1M prompt / completion tokens (None = price unknown)
    price_out: float | None = None
    budget: str = "the reply budget"  # the setting that sizes replies (named when a reply ends inside its thinking)

    def reply_tokens(self, own: int | None) -> int:
        """A request's reply budget: its own (a prompt's, sized for a direct reply) raised to
        `REASONING_REPLY_BUDGET` when `params` declare the model to reason, else the role's `max_tokens` (which the
        role has already sized)."""
        if own is None:
            return self.max_tokens
        return reply_budget(None, own, reasons=self.params.reasons())

    @classmethod
    def of_judge(cls, config: JudgeConfig, *, option: str, where: str,
                 count_prompt_tokens: bool = True) -> ClientSettings:
        """Deterministic decoding (temperature 0, top_p 1, the configured seed) as a judge model asks."""
        assert config.model is not None
        return cls(model=config.model, backend=config.backend, base_url=config.base_url,
                   api_key_env=config.api_key_env, timeout=config.timeout, breaker_after=config.breaker_after,
                   concurrency=config.concurrency, retries=config.retries, backoff=config.backoff,
                   max_tokens=config.reply_budget(), temperature=0.0, top_p=1.0, seed=config.seed,
                   json_mode=config.json_mode, count_prompt_tokens=count_prompt_tokens, option=option, where=where,
                   params=config.params, section="judge", price_in=config.price_in, price_out=config.price_out,
                   budget="judge.max_tokens")


def billing(replies: Sequence[Reply[Any]]) -> dict[str, Any]:
    """What a record's requests billed: tokens, and USD (None when a price is unknown), as the target's records
    carry them (`api_prompt_tokens`, `api_completion_tokens`, `cost_usd`), so the cost columns count them."""
    costs = [r.cost_usd for r in replies]
    return {"api_prompt_tokens": sum(r.prompt_tokens for r in replies),
            "api_completion_tokens": sum(r.completion_tokens for r in replies),
            "cost_usd": None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None)),
            **({"price_source": replies[0].price_source} if replies and replies[0].price_source else {})}


class StructuredClient:
    """Asks one model structured requests (see the module doc). `correction(error)` is the user turn that follows
    a malformed reply; `cache` a JSONL file of earlier replies (None = no cache); `local` the local model to use
    (None = `HFBackend(settings.model)` on first use, when `settings.backend` is "hf")."""

    def __init__(self, settings: ClientSettings, *, correction: Callable[[str], str], cache: Path | None = None,
                 local: Any = None) -> None:
        self.price_source = "a local model: no price"
        if settings.backend != "hf":  # an endpoint: the price given (declared), else genai-prices', else unknown
            price = resolve_price({}, settings.model, (settings.price_in, settings.price_out),
                                  base_url=settings.base_url)
            settings = replace(settings, price_in=price.price_in, price_out=price.price_out)
            self.price_source = price.source
        self.settings = settings
        self.correction = correction
        self.cache = StageLog(cache) if cache is not None else None
        self._local = local
        self._fingerprint: list[Any] | None = None
        self.usage = Usage()

    def fingerprint(self) -> list[Any]:
        """What makes a reply: the endpoint model, or the local model's own fingerprint (file hashes)."""
        s = self.settings
        if self._fingerprint is None:
            self._fingerprint = (["hf", self.local_backend().fingerprint()] if s.backend == "hf" else
                                 [s.backend, s.model, s.base_url, s.seed, s.json_mode])
            if s.backend != "hf" and s.params.identity() is not None:  # declared request parameters change replies
                self._fingerprint.append({"params": s.params.identity()})
        return self._fingerprint

    def local_backend(self) -> Any:
        if self._local is None:
            self._local = HFBackend(self.settings.model)
        return self._local

    def request_key(self, request: Request[Any]) -> str:
        return digest([self.fingerprint(), request.messages, request.prefill,
                       self.settings.reply_tokens(request.max_tokens)], length=24)

    def ask(self, requests: Sequence[Request[Any]], progress: Callable[[int], None] | None = None, *,
            on_done: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        """Parsed replies (or failures) in request order; `on_done(index, outcome)` is called as each one is known
        (cached ones first). Cached replies are reused (asked again if the parser now refuses them), new ones
        cached."""
        out: list[Outcome | None] = [None] * len(requests)
        keys = [self.request_key(r) for r in requests] if self.cache is not None else []
        cached = self.cache.read() if self.cache is not None else {}
        todo: list[int] = []
        for i, req in enumerate(requests):
            rec = cached.get(keys[i]) if cached else None
            if rec is not None:
                try:
                    reply: Reply[Any] = Reply(req.parse(rec["text"]), rec["text"], cached=True)
                except ValueError:
                    pass  # a parser changed since: ask again
                else:
                    out[i] = reply
                    if on_done:
                        on_done(i, reply)
                    if progress:
                        progress(1)
                    continue
            todo.append(i)
        if todo:
            start = time.perf_counter()

            def done(local: int, outcome: Outcome) -> None:
                index = todo[local]
                out[index] = outcome
                if isinstance(outcome, Reply) and self.cache is not None:
                    self.cache.append([{"id": keys[index], "key": keys[index], "text": outcome.text}])
                if on_done:
                    on_done(index, outcome)
                if progress:
                    progress(1)

            pending = [requests[i] for i in todo]
            try:
                if self.settings.backend == "hf":
                    self._ask_local(pending, done)
                else:
                    run_coroutine(self._ask_endpoint(pending, done))
            finally:
                self.usage.seconds += time.perf_counter() - start
        return [o for o in out if o is not None]

    def corrected(self, messages: list[dict[str, str]], reply: str, error: str) -> list[dict[str, str]]:
        """The original chat, the malformed reply (shortened) and the correction request."""
        return [*messages, {"role": "assistant", "content": reply[:MAX_REPLY_IN_CORRECTION]},
                {"role": "user", "content": self.correction(error)}]

    def _malformed(self, exc: ValueError) -> str:
        self.usage.malformed += 1
        self.usage.note_error("malformed")
        return f"malformed reply: {exc}"

    # --- OpenAI-compatible endpoint ---------------------------------------------------------------------------
    def endpoint(self) -> OpenAIEndpoint:
        """An OpenAI-compatible endpoint, or a hosted provider through the provider client (`api:PROVIDER/MODEL`,
        `haldet.backends.providers`): the same retry, breaker and usage path either way."""
        s = self.settings
        if s.model.startswith(PROVIDER_PREFIX):
            return ProviderEndpoint(s.model, base_url=s.base_url, api_key_env=s.api_key_env, timeout=s.timeout,
                                    breaker_after=s.breaker_after, option=s.option, where=s.where,
                                    section=s.section)
        return OpenAIEndpoint(s.model, base_url=s.base_url, api_key_env=s.api_key_env, timeout=s.timeout,
                              breaker_after=s.breaker_after, option=s.option, where=s.where, section=s.section)

    def params(self, request: Request[Any]) -> dict[str, Any]:
        """The parameters sent with a request, as the role's `params` declare them."""
        s = self.settings
        params = s.params.build(temperature=s.temperature, top_p=s.top_p, max_tokens=s.reply_tokens(request.max_tokens))
        if s.seed is not None:
            params["seed"] = s.seed
        if s.json_mode:
            params["response_format"] = {"type": "json_object"}
        return params

    async def _ask_endpoint(self, requests: Sequence[Request[Any]], done: Callable[[int, Outcome], None]) -> None:
        client = self.endpoint()
        limit = asyncio.Semaphore(self.settings.concurrency)

        async def one(index: int) -> None:
            async with limit:
                outcome = await self._attempts(client, requests[index])
            done(index, outcome)

        await gather_closing((one(i) for i in range(len(requests))), client, first_alone=True)

    async def _attempts(self, client: OpenAIEndpoint, request: Request[Any]) -> Outcome:
        """The endpoint's retry loop (`OpenAIEndpoint.call`), with the parser as its reply check: a reply that does
        not parse is answered with a correction turn and costs an attempt; the breaker or the last attempt ends it
        as a listed failure."""
        parsed: list[Any] = []
        texts: list[str] = []

        def check(reply: ChatReply) -> tuple[str, list[dict[str, str]]] | None:
            first = reply.choices[0]
            text, unclosed = without_thinking(reply.text, first.reasoning, first.finish_reason, self.settings.budget)
            try:
                if unclosed:
                    raise ValueError(unclosed)
                parsed.append(request.parse(text))
                texts.append(text)
            except ValueError as exc:
                return self._malformed(exc), self.corrected(request.messages, reply.text, str(exc))
            return None

        s = self.settings
        billed = Usage()  # this request's account, added to the client's
        try:
            await client.call(request.messages, attempts=s.retries + 1, backoff=s.backoff, usage=billed,
                              check=check, **self.params(request))
        except CallFailed as exc:
            self.usage.failures += 1
            return CallFailure(error=exc.error, attempts=exc.attempts)
        finally:
            self.usage.merge(billed)
        return Reply(parsed[-1], texts[-1], prompt_tokens=billed.prompt_tokens,
                     completion_tokens=billed.completion_tokens, cost_usd=billed.cost_usd(s.price_in, s.price_out),
                     price_source=self.price_source)

    # --- local model ------------------------------------------------------------------------------------------
    def _ask_local(self, requests: Sequence[Request[Any]], done: Callable[[int, Outcome], None]) -> None:
        backend = self.local_backend()
        s = self.settings
        messages = {i: r.messages for i, r in enumerate(requests)}
        errors: dict[int, str] = {}
        attempts = min(s.retries, 1) + 1  # deterministic: only a changed prompt can change the reply
        for attempt in range(1, attempts + 1):
            by_budget: dict[int, list[int]] = {}
            for i in sorted(messages):
                by_budget.setdefault(s.reply_tokens(requests[i].max_tokens), []).append(i)
            for budget, group in by_budget.items():
                prompts = [backend.render_chat(messages[i]) + requests[i].prefill for i in group]
                outputs = self._generate(backend, prompts, budget)
                self.usage.calls += len(group)
                if attempt > 1:
                    self.usage.retries += len(group)
                for i, prompt, out in zip(group, prompts, outputs, strict=True):
                    if s.count_prompt_tokens:
                        self.usage.prompt_tokens += len(backend.encode_prompt(prompt))
                    self.usage.completion_tokens += len(out.token_ids)
                    finish, extra = getattr(out, "finish_reason", "stop"), getattr(out, "extra", None) or {}
                    text, unclosed = without_thinking(requests[i].prefill + out.text, None, finish, s.budget)
                    if extra.get("no_answer"):  # a local reasoning model's reply cut inside its thinking
                        unclosed = thinking_failure(s.budget)
                    try:
                        if unclosed:
                            raise ValueError(unclosed)
                        value = requests[i].parse(text)
                    except ValueError as exc:
                        errors[i] = self._malformed(exc)
                        messages[i] = self.corrected(requests[i].messages, text, str(exc))
                        continue
                    del messages[i]
                    done(i, Reply(value, text))
            if not messages:
                return
        for i in sorted(messages):
            self.usage.failures += 1
            done(i, CallFailure(error=errors[i], attempts=attempts))

    def _generate(self, backend: Any, prompts: list[str], max_new_tokens: int) -> list[Any]:
        """Greedy replies, or at temperature > 0 one sample per prompt seeded by the prompt alone (a prompt's reply
        does not depend on its batch)."""
        s = self.settings
        if s.temperature > 0:
            seeds = [int(digest(prompt)[:8], 16) for prompt in prompts]
            sampled = backend.sample(prompts, k=1, temperature=s.temperature,
                                     top_p=1.0 if s.top_p is None else s.top_p, seeds=seeds,
                                     max_new_tokens=max_new_tokens, batch_size=s.batch_size)
            return [outs[0] for outs in sampled]
        return list(backend.generate(prompts, max_new_tokens=max_new_tokens, batch_size=s.batch_size))


def thinking_failure(budget: str) -> str:
    """Why a reply that ended inside its thinking block gives no value: never a guessed verdict."""
    return (f"the reply ended inside its thinking block (unclosed {THINK.open}, or only a reasoning field): no "
            f"answer to read; raise {budget}")


def without_thinking(text: str, reasoning: str | None, finish_reason: str, budget: str) -> tuple[str, str | None]:
    """A reasoning model's reply without its thinking block (inline `<think>` ... `</think>`, or a separate
    reasoning field), and why it has no answer when the block never closed (None when it did, or there is none)."""
    cut = split_text(text, THINK, finish_reason=finish_reason)
    if cut.no_answer:
        return "", thinking_failure(budget)
    if cut.reasoning is not None:
        return cut.answer, None
    if reasoning is not None and not text.strip():
        return "", thinking_failure(budget)
    return text, None
