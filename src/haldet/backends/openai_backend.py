"""The `openai` backend: a target model behind any OpenAI-compatible chat endpoint (hosted APIs, vLLM or llama.cpp
servers, LM Studio, ...), selected by the model spec `openai:NAME` and `endpoint.base_url` (`--model-base-url`).

Black-box always (answers, K samples, verbalized confidence); gray-box when the endpoint returns log-probs
(`endpoint.logprobs`, on by default): token log-probs of the answer, sample log-likelihoods, and self-evaluation
P(True) read from the first reply position's top alternatives (`top_logprobs`): the mass on "True" spellings over
"True" + "False" spellings among the returned alternatives (None when neither is among them). No hidden states,
no teacher-forced pass: detectors needing them are refused before any work (`haldet.backends.select`).

The stored prompt of an item is the exact message list sent (JSON), so caches key on what the model saw.
K samples: one request with `n=K` (`endpoint.n_samples: n`), K requests seeded `seed + j` (`calls`), or `auto`:
`n=K` first and, when the server returns fewer choices (llama.cpp ignores `n`), the missing samples as separate
requests. All requests of a call run concurrently (`endpoint.concurrency`), with retries, timeouts and the circuit
breaker of `OpenAIEndpoint`. A request that still fails gives a `GenOutput` with `error` set and no text: the stage
writes no record for it (the item is listed as failed and retried on the next run), never an invented answer.
Token counts and cost (`endpoint.price_in/out`, USD per 1M tokens) are kept per output (`extra`) and in `usage`.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from haldet.backends.base import Backend, Capability, GenOutput
from haldet.backends.openai_client import (
    CallFailed,
    ChatReply,
    Choice,
    CircuitBreaker,
    OpenAIEndpoint,
    Usage,
    api_key,
    gather_closing,
    run_coroutine,
)
from haldet.config import EndpointConfig
from haldet.text.reasoning import Markers, no_answer_reason, split_text

PREFIX = "openai:"
# black-box always: answers, K samples, self-evaluation read by spelling, usage accounting
ALWAYS = frozenset({Capability.TEXT, Capability.N_SAMPLES, Capability.SELF_EVAL_LOGPROBS, Capability.USAGE})


def endpoint_capabilities(endpoint: EndpointConfig) -> frozenset[Capability]:
    """What an endpoint configured so provides: gray-box log-probs only when it is asked for them."""
    return ALWAYS | ({Capability.LOGPROBS} if endpoint.logprobs else set())


def endpoint_model(spec: str) -> str:
    """`openai:gpt-4o-mini` -> `gpt-4o-mini`."""
    return spec[len(PREFIX):] if spec.startswith(PREFIX) else spec


def prompt_messages(prompt: str) -> list[dict[str, str]]:
    """The messages a stored prompt stands for: the JSON list `render_chat` wrote, or plain text as one user turn."""
    if prompt.startswith("["):
        try:
            msgs = json.loads(prompt)
        except json.JSONDecodeError:
            msgs = None
        if isinstance(msgs, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            return msgs
    return [{"role": "user", "content": prompt}]


class OpenAIBackend(Backend):
    kind = "openai"
    capabilities = ALWAYS | {Capability.LOGPROBS}  # at most; an instance has its endpoint's (`declared`)

    @classmethod
    def declared(cls, config: Any) -> frozenset[Capability]:
        return endpoint_capabilities(config.endpoint)

    price_source = "price unknown: not looked up"  # set by `make_backend` (`haldet.model_prices`)

    def __init__(self, name: str, config: EndpointConfig, *,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(name)
        self.config = config
        # sent as `chat_template_kwargs` in every request body (servers that render the template: vLLM, SGLang)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.capabilities = endpoint_capabilities(config)
        self.model = endpoint_model(name)
        self.usage = Usage()
        self._shared_breaker: CircuitBreaker | None = None
        # parameter sets a request went through with: requests carrying one of them may run at once; another set's
        # first request goes alone (a refused parameter costs one request, not a batch)
        self._accepted: set[frozenset[str]] = set()
        self.n_supported: bool | None = {"n": True, "calls": False}.get(config.n_samples)
        self.check_key()  # a missing key fails now, not mid-run

    def check_key(self) -> None:
        api_key(self.model, self.config.base_url, self.config.api_key_env, "--model")

    def thinks(self) -> bool:
        return self.config.params.reasons()

    def fingerprint(self) -> dict[str, Any]:
        c = self.config
        fp: dict[str, Any] = {"backend": self.kind, "model": self.model, "base_url": c.base_url, "logprobs": c.logprobs,
              "top_logprobs": c.top_logprobs if c.logprobs else None, "seed": c.seed}
        if self.chat_template_kwargs:
            fp["chat_template_kwargs"] = self.chat_template_kwargs
        if c.params.identity() is not None:  # declared request parameters (haldet.endpoint_params)
            fp["params"] = c.params.identity()
        return fp

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return json.dumps(messages, ensure_ascii=False)

    def follow_up(self, prompt: str, answer: str, question: str) -> str:
        return self.render_chat([*prompt_messages(prompt), {"role": "assistant", "content": answer},
                                 {"role": "user", "content": question}])

    # --- the protocol -----------------------------------------------------------------------------------------
    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        params = {**self.config.params.build(temperature=0.0, top_p=1.0, max_tokens=max_new_tokens),
                  "seed": self.config.seed}
        jobs = [(prompt_messages(p), params, 1) for p in prompts]
        return [outs[0] for outs in self._run(jobs)]

    def sample(self, prompts: list[str], *, k: int, temperature: float, top_p: float, seeds: Sequence[int],
               max_new_tokens: int, batch_size: int, progress: Any = None,
               hidden: tuple[int, str] | None = None) -> list[list[GenOutput]]:
        """K answers per prompt; seeds make reruns reproducible where the server honours `seed`."""
        base = self.config.params.build(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens)
        if self.n_supported is False or k == 1:
            jobs = [(prompt_messages(p), {**base, "seed": _seed(s, j)}, 1)
                    for p, s in zip(prompts, seeds, strict=True) for j in range(k)]
            flat = [outs[0] for outs in self._run(jobs)]
            return [flat[i * k:(i + 1) * k] for i in range(len(prompts))]
        jobs = [(prompt_messages(p), {**base, "seed": _seed(s, 0)}, k) for p, s in zip(prompts, seeds, strict=True)]
        results = self._run(jobs)
        short = [i for i, outs in enumerate(results) if len(outs) < k and not any(o.error for o in outs)]
        if short and self.n_supported is None:
            self.n_supported = False  # the server ignores `n`: from now on K separate requests
        refill = [(i, j) for i in short for j in range(len(results[i]), k)]
        if refill:
            more = self._run([(prompt_messages(prompts[i]), {**base, "seed": _seed(seeds[i], j)}, 1)
                              for i, j in refill])
            for (i, _), outs in zip(refill, more, strict=True):
                results[i].append(outs[0])
        elif self.n_supported is None and results:
            self.n_supported = True
        return results

    def self_eval_logprobs(self, prompts: list[str], true_words: Sequence[str], false_words: Sequence[str], *,
                           max_new_tokens: int, batch_size: int) -> list[tuple[GenOutput, list[float], list[float]]]:
        """Greedy replies plus the first position's log-probs of each True/False spelling among the returned
        top alternatives (-inf when a spelling is not among them)."""
        outs = self.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
        result = []
        for out in outs:
            top = (out.extra.get("top_logprobs") or [{}])[0] if not out.error else {}
            result.append((out, [top.get(w, -math.inf) for w in true_words],
                           [top.get(w, -math.inf) for w in false_words]))
        return result

    # --- requests ---------------------------------------------------------------------------------------------
    def _run(self, jobs: list[tuple[list[dict[str, str]], dict[str, Any], int]]) -> list[list[GenOutput]]:
        """Each job (messages, params, n) -> its outputs (one failed GenOutput when every attempt failed)."""
        start = time.perf_counter()
        try:
            return run_coroutine(self._gather(jobs))
        finally:
            self.usage.seconds += time.perf_counter() - start

    async def _gather(self, jobs: list[tuple[list[dict[str, str]], dict[str, Any], int]]) -> list[list[GenOutput]]:
        c = self.config
        endpoint = self.make_endpoint()
        endpoint.breaker = self._breaker(endpoint)
        limit = asyncio.Semaphore(c.concurrency)
        extra: dict[str, Any] = {"logprobs": True, "top_logprobs": c.top_logprobs} if c.logprobs else {}
        if self.chat_template_kwargs:
            extra["extra_body"] = {"chat_template_kwargs": self.chat_template_kwargs}

        async def one(messages: list[dict[str, str]], params: dict[str, Any], n: int) -> list[GenOutput]:
            sent: dict[str, Any] = {**params, **extra, **({"n": n} if n > 1 else {})}
            async with limit:
                try:
                    reply = await endpoint.call(messages, attempts=c.retries + 1, backoff=c.backoff,
                                                usage=self.usage, **sent)
                except CallFailed as exc:
                    self.usage.failures += 1
                    return [GenOutput(text="", token_ids=[], token_logprobs=[], finish_reason="error",
                                      extra={"attempts": exc.attempts},
                                      error=f"{exc.error} (after {exc.attempts} attempt(s))")]
            return self._outputs(reply)

        names = frozenset([*(jobs[0][1] if jobs else {}), *extra, *(["n"] if jobs and jobs[0][2] > 1 else [])])
        results = await gather_closing((one(*job) for job in jobs), endpoint, first_alone=names not in self._accepted)
        self._accepted.add(names)
        return results

    def make_endpoint(self) -> OpenAIEndpoint:
        c = self.config
        return OpenAIEndpoint(self.model, base_url=c.base_url, api_key_env=c.api_key_env, timeout=c.timeout,
                              breaker_after=c.breaker_after, option="--model",
                              where=f"model {self.name} at {c.base_url or 'api.openai.com'}")

    def _breaker(self, endpoint: OpenAIEndpoint) -> CircuitBreaker:
        """One breaker for the backend's lifetime: once the endpoint is declared dead, later stages do not call it."""
        if self._shared_breaker is None:
            self._shared_breaker = endpoint.breaker
        return self._shared_breaker

    def _outputs(self, reply: ChatReply) -> list[GenOutput]:
        c = self.config
        outs = []
        share = 1.0 / len(reply.choices)
        for choice in reply.choices:
            broken = logprobs_problem(choice) if c.logprobs else None
            if broken is not None:  # a recorded failure of the log-probs, never a score from what came back
                self.usage.note_error("logprobs")
                choice = replace(choice, tokens=None, logprobs=None, top_logprobs=None)
            n_tokens = len(choice.logprobs) if choice.logprobs is not None else (
                reply.completion_tokens if len(reply.choices) == 1 else None)
            usage = Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)
            cost = usage.cost_usd(c.price_in, c.price_out)
            out = GenOutput(
                text=choice.text, token_ids=[], token_logprobs=list(choice.logprobs or []),
                finish_reason="length" if choice.finish_reason == "length" else "stop",
                extra={"tokens": choice.tokens, "n_tokens": n_tokens, "logprobs": choice.logprobs is not None,
                       "top_logprobs": choice.top_logprobs, "prompt_tokens": reply.prompt_tokens * share,
                       "completion_tokens": reply.completion_tokens * share,
                       "cost_usd": None if cost is None else cost * share,
                       **({"logprobs_error": broken} if broken is not None else {})})
            outs.append(endpoint_reasoning(out, choice.reasoning))
        return outs

    def reset_usage(self) -> None:
        self.usage = Usage()

    def usage_report(self) -> dict[str, Any]:
        """Calls, retries, errors, tokens and cost since `reset_usage`; `breaker_open` once the endpoint was given
        up on (for the rest of this process: later cells do not call a dead endpoint again)."""
        report = self.usage.report(self.config.price_in, self.config.price_out)
        report["model"] = self.name
        report["price_source"] = self.price_source
        report["breaker_open"] = bool(self._shared_breaker and self._shared_breaker.open)
        return report


def logprobs_problem(choice: Choice) -> str | None:
    """Why a choice's log-probs cannot be used (asked for, but empty, truncated or malformed), or None: they must
    cover the whole reply text, one finite log-prob <= 0 per token."""
    if not choice.text:
        return None
    if not choice.logprobs or not choice.tokens:
        return "the endpoint returned no log-probs for a non-empty reply"
    if len(choice.tokens) != len(choice.logprobs):
        return f"malformed log-probs: {len(choice.tokens)} tokens but {len(choice.logprobs)} log-probs"
    if any(not math.isfinite(x) or x > 1e-6 for x in choice.logprobs):
        return "malformed log-probs: a value is not a finite log-probability <= 0"
    covered = "".join(choice.tokens).strip()
    if len(covered) < len(choice.text.strip()):  # (multi-byte pieces may spell a token longer, never shorter)
        return (f"truncated log-probs: their tokens cover {len(covered)} of the reply's {len(choice.text.strip())} "
                "characters")
    return None


def endpoint_reasoning(out: GenOutput, field: str | None) -> GenOutput:
    """A reasoning model's reply split into reasoning and answer: the endpoint's separate reasoning field, else a
    `<think>` block at the start of the content (its tokens and log-probs cut at the answer's first token). A
    content that opens a block and never closes it has no answer (`no_answer`, as for a local model)."""
    n = len(out.extra.get("tokens") or [])
    if field is not None:
        out.extra.update(reasoning=field.strip(), reasoning_span=None, answer_tokens=[0, n], no_answer=None)
        if not out.text.strip() and out.finish_reason == "length":
            out.extra["no_answer"] = no_answer_reason("length", None)
        return out
    if not out.text.lstrip().startswith(THINK.open):
        return out
    cut = split_text(out.text, THINK, finish_reason=out.finish_reason)
    start = len(out.text) - len(out.text.lstrip()[len(THINK.open):]) if cut.no_answer else out.text.find(
        THINK.close) + len(THINK.close)
    tokens, seen, a0 = out.extra.get("tokens") or [], 0, 0
    while a0 < len(tokens) and (seen < start or not tokens[a0].strip()):  # the answer's first token
        seen += len(tokens[a0])
        a0 += 1
    if cut.no_answer:
        a0 = len(tokens)
    out.extra.update(reasoning=cut.reasoning, reasoning_span=None, answer_tokens=[a0, len(tokens)],
                     no_answer=cut.no_answer, reasoning_logprobs=out.token_logprobs[:a0])
    out.text = cut.answer
    if tokens:
        out.token_logprobs = out.token_logprobs[a0:]
        out.extra["tokens"] = tokens[a0:]
        if out.extra.get("top_logprobs") is not None:
            out.extra["top_logprobs"] = out.extra["top_logprobs"][a0:]
    return out


THINK = Markers(open="<think>", close="</think>")  # the inline thinking tags endpoints pass through unparsed


def _seed(seed: int, j: int) -> int:
    return (int(seed) + j) % (2**31 - 1)

