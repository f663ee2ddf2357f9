"""Structured LLM calls for HalluLens construction and judging, cached on disk.

HalluLens needs many kinds of model calls (write a question, check answerability, judge a refusal, extract
claims, ...), each with its own reply format. `StructuredLLM.ask` takes requests (chat messages plus a parser
that turns the reply text into a value or raises `ValueError`) and returns, per request, the parsed value or a
`CallFailure` after its retries: a failure is listed, never turned into a value.

Backends are the ones the LLM judge uses: any OpenAI-compatible endpoint through the shared
`haldet.backends.openai_client.OpenAIEndpoint` (bounded concurrency, retries with backoff, Retry-After honoured,
circuit breaker for a dead endpoint), or a local model through `HFBackend` (batched greedy decoding). A malformed
reply is retried with the bad reply and a correction request appended. Decoding is deterministic (temperature 0,
fixed seed), so a reply is a function of the request; replies are cached in a JSONL file keyed by the model's
fingerprint and the whole request, which makes construction and judging resumable and reruns free.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from haldet.backends.openai_client import (
    EndpointDown,
    OpenAIEndpoint,
    RetryableError,
    Usage,
    gather_closing,
    run_coroutine,
)
from haldet.config import JudgeConfig, digest
from haldet.errors import HaldetError
from haldet.store import StageLog

T = TypeVar("T")
CORRECTION = ("Your reply could not be read: {error}. Reply again, following the requested format exactly "
              "and adding nothing else.")


@dataclass
class Request(Generic[T]):
    """One call: `messages` (chat turns), `parse` (reply text -> value, `ValueError` when malformed), `prefill`
    (start of the reply forced on a local model so small models stay on format; part of the parsed text)."""

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
    value: T
    text: str
    cached: bool = False


Outcome = Reply[Any] | CallFailure


@dataclass
class CallLog:
    """Every failed call, with what it was for, so a report can list them."""

    failures: list[dict[str, Any]] = field(default_factory=list)


class StructuredLLM:
    """A model answering structured requests. `config` is a `JudgeConfig` (backend, model, endpoint, retries,
    concurrency, seed, max_tokens); `cache` a JSONL file of earlier replies (None = no cache)."""

    def __init__(self, config: JudgeConfig, *, cache: Path | None = None, backend: Any = None,
                 option: str = "--judge-model") -> None:
        if not config.model:
            raise HaldetError("no model configured for HalluLens calls", where=option,
                              hint="name an OpenAI-compatible model (with --*-base-url) or a local one with "
                                   "backend hf, e.g. smollm2-135m")
        self.config = config
        self.option = option  # the flag naming this model, for messages
        self.cache = StageLog(cache) if cache is not None else None
        self._hf = backend
        self._fingerprint: list[Any] | None = None
        self.usage = Usage()

    @property
    def id(self) -> str:
        return f"{self.config.backend}:{self.config.model}"

    def fingerprint(self) -> list[Any]:
        """What makes a reply: the endpoint model, or the local model's own fingerprint (file hashes)."""
        c = self.config
        if self._fingerprint is None:
            self._fingerprint = (["hf", self.local_backend().fingerprint()] if c.backend == "hf" else
                                 [c.backend, c.model, c.base_url, c.seed, c.json_mode])
        return self._fingerprint

    def local_backend(self) -> Any:
        if self._hf is None:
            from haldet.backends.hf.backend import HFBackend

            assert self.config.model is not None
            self._hf = HFBackend(self.config.model)
        return self._hf

    def request_key(self, request: Request[Any]) -> str:
        return digest([self.fingerprint(), request.messages, request.prefill,
                       request.max_tokens or self.config.max_tokens], length=24)

    def ask(self, requests: Sequence[Request[T]], progress: Callable[[int], None] | None = None) -> list[Outcome]:
        """Parsed replies (or failures) in request order; cached replies are reused and new ones cached."""
        out: list[Outcome | None] = [None] * len(requests)
        keys = [self.request_key(r) for r in requests]
        cached = self.cache.read() if self.cache is not None else {}
        todo: list[int] = []
        for i, (req, key) in enumerate(zip(requests, keys, strict=True)):
            rec = cached.get(key)
            if rec is not None:
                try:
                    out[i] = Reply(req.parse(rec["text"]), rec["text"], cached=True)
                    if progress:
                        progress(1)
                    continue
                except ValueError:
                    pass  # a parser changed since: ask again
            todo.append(i)
        if todo:
            start = time.perf_counter()

            def done(local: int, outcome: Outcome) -> None:
                index = todo[local]
                out[index] = outcome
                if isinstance(outcome, Reply) and self.cache is not None:
                    self.cache.append([{"id": keys[index], "key": keys[index], "text": outcome.text}])
                if progress:
                    progress(1)

            pending = [requests[i] for i in todo]
            try:
                if self.config.backend == "hf":
                    self._ask_hf(pending, done)
                else:
                    run_coroutine(self._ask_openai(pending, done))
            finally:
                self.usage.seconds += time.perf_counter() - start
        return [o for o in out if o is not None]

    # --- OpenAI-compatible endpoint ---------------------------------------------------------------------------
    def endpoint(self) -> OpenAIEndpoint:
        c = self.config
        assert c.model is not None
        return OpenAIEndpoint(c.model, base_url=c.base_url, api_key_env=c.api_key_env, timeout=c.timeout,
                              breaker_after=c.breaker_after, option=self.option,
                              where=f"{self.option} {c.model} at {c.base_url or 'api.openai.com'}")

    async def _ask_openai(self, requests: Sequence[Request[Any]], done: Callable[[int, Outcome], None]) -> None:
        client = self.endpoint()
        limit = asyncio.Semaphore(self.config.concurrency)

        async def one(index: int) -> None:
            async with limit:
                outcome = await self._attempts(client, requests[index])
            done(index, outcome)

        await gather_closing((one(i) for i in range(len(requests))), client)

    async def _attempts(self, client: OpenAIEndpoint, request: Request[Any]) -> Outcome:
        c = self.config
        messages = request.messages
        attempts = c.retries + 1
        extra: dict[str, Any] = {"response_format": {"type": "json_object"}} if c.json_mode else {}
        last = ""
        for attempt in range(1, attempts + 1):
            wait: float | None = None
            try:
                reply = await client.attempt(messages, usage=self.usage, retry=attempt > 1, temperature=0.0,
                                             top_p=1.0, max_tokens=request.max_tokens or c.max_tokens, seed=c.seed,
                                             **extra)
            except EndpointDown as exc:  # the breaker opened: no more calls; listed as failed
                self.usage.failures += 1
                return CallFailure(error=str(exc), attempts=attempt - 1)
            except RetryableError as exc:
                last, wait = str(exc), exc.retry_after
            else:
                try:
                    return Reply(request.parse(reply.text), reply.text)
                except ValueError as exc:
                    self.usage.malformed += 1
                    self.usage.note_error("malformed")
                    last = f"malformed reply: {exc}"
                    messages = _corrected(request.messages, reply.text, str(exc))
            if attempt < attempts:
                await asyncio.sleep(max(c.backoff * 2 ** (attempt - 1), wait or 0.0))
        self.usage.failures += 1
        return CallFailure(error=last, attempts=attempts)

    # --- local model ------------------------------------------------------------------------------------------
    def _ask_hf(self, requests: Sequence[Request[Any]], done: Callable[[int, Outcome], None]) -> None:
        backend = self.local_backend()
        messages = {i: r.messages for i, r in enumerate(requests)}
        errors: dict[int, str] = {}
        attempts = min(self.config.retries, 1) + 1  # greedy: only a changed prompt can change the reply
        for attempt in range(1, attempts + 1):
            order = sorted(messages)
            by_budget: dict[int, list[int]] = {}
            for i in order:
                by_budget.setdefault(requests[i].max_tokens or self.config.max_tokens, []).append(i)
            for budget, group in by_budget.items():
                prompts = [backend.render_chat(messages[i]) + requests[i].prefill for i in group]
                outputs = backend.generate(prompts, max_new_tokens=budget, batch_size=8)
                self.usage.calls += len(group)
                if attempt > 1:
                    self.usage.retries += len(group)
                for i, out in zip(group, outputs, strict=True):
                    self.usage.completion_tokens += len(out.token_ids)
                    text = requests[i].prefill + out.text
                    try:
                        value = requests[i].parse(text)
                    except ValueError as exc:
                        self.usage.malformed += 1
                        errors[i] = f"malformed reply: {exc}"
                        messages[i] = _corrected(requests[i].messages, text, str(exc))
                        continue
                    del messages[i]
                    done(i, Reply(value, text))
            if not messages:
                return
        for i in sorted(messages):
            self.usage.failures += 1
            done(i, CallFailure(error=errors[i], attempts=attempts))

    def usage_report(self) -> dict[str, Any]:
        return {"model": self.config.model, "backend": self.config.backend, "calls": self.usage.calls,
                "retries": self.usage.retries, "failures": self.usage.failures, "malformed": self.usage.malformed,
                "prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens,
                "seconds": round(self.usage.seconds, 3),
                "cost_usd": self.usage.cost_usd(self.config.price_in, self.config.price_out)}


def _corrected(messages: list[dict[str, str]], reply: str, error: str) -> list[dict[str, str]]:
    return [*messages, {"role": "assistant", "content": reply[:2000]},
            {"role": "user", "content": CORRECTION.format(error=error)}]
