"""LLM judge (paper appendix D): the judge model reads the question, optional context, acceptable answers (r+)
and known traps (r-) and returns `{"reasoning", "category"}`, validated against a pydantic schema.

Prompt: `templates/judge_system.txt` (rules), calibration examples from `templates/judge_examples.json`
(acceptable-answer match, known-trap match, abstention) as earlier user/assistant turns, then the item rendered
with `templates/judge_user.txt` (jinja2). Every file can be overridden from `judge.template_dir`; the digest of
the texts used goes into the cache key. Decoding is deterministic (temperature 0, fixed seed).

Backends: any OpenAI-compatible endpoint through `haldet.backends.openai_client.OpenAIEndpoint` (a semaphore
bounds requests in flight; 429, 5xx, timeouts, connection errors and malformed replies are retried with
exponential backoff, honouring Retry-After; 400/401/403/404 stop the run with one clear message, since every item
would fail the same way; after `breaker_after` consecutive timeouts/connection failures the circuit breaker stops
calling and the remaining items are listed as failed), or a local model through `haldet.backends.hf.backend.HFBackend`
(batched greedy generation; the reply is prefilled with the JSON opening so small models stay on format).
A malformed reply is retried with the bad reply and a correction request appended. An item still failing after
all attempts gets no label: it is reported as a `JudgeFailure` (and written to `annotate.failed.jsonl` by the
annotate stage).
Tokens, calls, retries and cost are counted in `LLMJudge.usage`.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
from haldet.judges.base import Judge, JudgeFailure, Pair, Verdict, register
from haldet.judges.short_answer import is_unanswerable
from haldet.schema import Category, Generation, Instance, Label

TEMPLATE_FILES = ("judge_system.txt", "judge_user.txt", "judge_correction.txt", "judge_examples.json")
MAX_CONTEXT_CHARS = 12000
HF_PREFILL = '{"reasoning": "'


class JudgeOutput(BaseModel):
    """The structured judge reply. Extra keys are ignored; the category must be one of the three."""

    model_config = ConfigDict(extra="ignore")
    reasoning: str = Field(min_length=1, max_length=4000)
    category: Literal["correct", "hallucination", "abstention"]

    @field_validator("category", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class MalformedOutput(ValueError):
    """The judge's reply is not a valid `JudgeOutput`."""


def parse_judge_output(text: str) -> JudgeOutput:
    """The first JSON object in the reply (code fences allowed), validated; `MalformedOutput` otherwise."""
    body = re.sub(r"```(?:json)?", "", text).strip()
    decoder = json.JSONDecoder()
    for start in (i for i, c in enumerate(body) if c == "{"):
        try:
            obj, _ = decoder.raw_decode(body[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            try:
                return JudgeOutput.model_validate(obj)
            except ValidationError as exc:
                err = exc.errors()[0]
                raise MalformedOutput(f"field {'.'.join(map(str, err['loc'])) or '?'}: {err['msg']}") from None
    raise MalformedOutput(f"no JSON object in the reply: {text[:120]!r}")


# --- prompt ---------------------------------------------------------------------------------------------------
def load_templates(template_dir: str | None) -> dict[str, str]:
    """Packaged judge templates, each replaced by a file of the same name in `template_dir` when present."""
    out: dict[str, str] = {}
    for name in TEMPLATE_FILES:
        override = Path(template_dir) / name if template_dir else None
        if override is not None and override.is_file():
            out[name] = override.read_text()
        else:
            out[name] = resources.files("haldet").joinpath("templates", name).read_text()
    if template_dir and not Path(template_dir).is_dir():
        raise HaldetError(f"judge template directory not found: {template_dir}", where="judge.template_dir",
                          hint=f"a folder holding any of {', '.join(TEMPLATE_FILES)}")
    return out


def truths_and_traps(instance: Instance) -> tuple[list[str], list[str]]:
    """What counts as right and what is a known wrong answer, per task type."""
    truths, traps = list(instance.references), list(instance.incorrect)
    if instance.options:  # option letters are shown with their text: "B. Paris"
        truths, traps = _named_options(instance, truths), _named_options(instance, traps)
    if is_unanswerable(instance):
        truths = ["The question cannot be answered from the context; the answer should say so."]
    return truths, traps


def _named_options(instance: Instance, refs: list[str]) -> list[str]:
    named = []
    for ref in refs:
        keys = [k.strip(" ().") for k in re.split(r"[,;]", ref)]
        if all(k in instance.options for k in keys if k):
            named += [f"{k}. {instance.options[k]}" for k in keys if k]
        else:
            named.append(ref)
    return named


class PromptBuilder:
    def __init__(self, templates: dict[str, str], few_shot: bool = True) -> None:
        import jinja2

        env = jinja2.Environment(autoescape=False, keep_trailing_newline=False, undefined=jinja2.StrictUndefined)
        self.system = templates["judge_system.txt"].strip()
        self.user = env.from_string(templates["judge_user.txt"])
        self.correction = env.from_string(templates["judge_correction.txt"])
        try:
            self.examples = json.loads(templates["judge_examples.json"]) if few_shot else []
        except json.JSONDecodeError as exc:
            raise HaldetError(f"judge_examples.json is not valid JSON: {exc.msg} (line {exc.lineno})",
                              where="judge templates") from None
        self.digest = digest([templates, few_shot])

    def render_user(self, *, question: str, answer: str, truths: list[str], traps: list[str], context: str = "",
                    instruction: str = "", options: dict[str, str] | None = None) -> str:
        if len(context) > MAX_CONTEXT_CHARS:
            context = context[:MAX_CONTEXT_CHARS] + " [...]"
        return self.user.render(question=question, answer=answer, truths=truths, traps=traps, context=context,
                                instruction=instruction, options=options or {}).strip()

    def messages(self, instance: Instance, generation: Generation) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}]
        for ex in self.examples:
            inp = ex["input"]
            msgs.append({"role": "user", "content": self.render_user(
                question=inp["question"], answer=inp["answer"], truths=inp.get("truths", []),
                traps=inp.get("traps", []), context=inp.get("context", ""))})
            msgs.append({"role": "assistant", "content": json.dumps(ex["output"], ensure_ascii=False)})
        truths, traps = truths_and_traps(instance)
        msgs.append({"role": "user", "content": self.render_user(
            question=instance.question, answer=generation.response, truths=truths, traps=traps,
            context=instance.context, instruction=instance.instruction, options=instance.options)})
        return msgs

    def corrected(self, messages: list[dict[str, str]], reply: str, error: str) -> list[dict[str, str]]:
        return [*messages, {"role": "assistant", "content": reply},
                {"role": "user", "content": self.correction.render(error=error).strip()}]


# --- the judge ------------------------------------------------------------------------------------------------
@register("llm")
class LLMJudge(Judge):
    deterministic = False

    def __init__(self, config: JudgeConfig, *, backend: Any = None) -> None:
        if not config.model:
            raise HaldetError("the LLM judge needs a model", where="--judge-model",
                              hint="e.g. --judge-model gpt-4o-mini (OpenAI-compatible endpoint) or "
                                   "--judge-backend hf --judge-model smollm2-135m (local)")
        self.config = config
        self.prompts = PromptBuilder(load_templates(config.template_dir), few_shot=config.few_shot)
        self._hf = backend
        self.usage = Usage()

    @property
    def id(self) -> str:
        return f"llm:{self.config.model}"

    def fingerprint(self) -> Any:
        c = self.config
        return [self.id, c.backend, c.base_url if c.backend == "openai" else None, c.max_tokens, c.seed,
                c.json_mode, self.prompts.digest]

    def applies(self, instance: Instance) -> bool:
        return True

    def judge(self, instance: Instance, generation: Generation) -> Verdict:
        out: list[Verdict] = []
        self.judge_many([(instance, generation)], lambda i, v: out.append(v))
        return out[0]

    def judge_many(self, pairs: Sequence[Pair], on_done: Callable[[int, Verdict], None]) -> None:
        if not pairs:
            return
        start = time.perf_counter()
        try:
            if self.config.backend == "hf":
                self._judge_hf(pairs, on_done)
            else:
                run_coroutine(self._judge_openai(pairs, on_done))
        finally:
            self.usage.seconds += time.perf_counter() - start

    def usage_report(self) -> dict[str, Any]:
        report = self.usage.report(self.config.price_in, self.config.price_out)
        report["model"] = self.config.model
        report["backend"] = self.config.backend
        return report

    def _verdict(self, instance: Instance, parsed: JudgeOutput) -> Label:
        return Label(id=instance.id, category=Category(parsed.category), reasoning=parsed.reasoning, judge=self.id)

    # OpenAI-compatible endpoint: async, bounded concurrency, retries with backoff, circuit breaker
    def endpoint(self) -> OpenAIEndpoint:
        c = self.config
        assert c.model is not None
        return OpenAIEndpoint(c.model, base_url=c.base_url, api_key_env=c.api_key_env, timeout=c.timeout,
                              breaker_after=c.breaker_after, option="--judge-model",
                              where=f"judge {c.model} at {c.base_url or 'api.openai.com'}")

    async def _judge_openai(self, pairs: Sequence[Pair], on_done: Callable[[int, Verdict], None]) -> None:
        client = self.endpoint()
        limit = asyncio.Semaphore(self.config.concurrency)

        async def one(index: int) -> None:
            instance, generation = pairs[index]
            async with limit:
                verdict = await self._attempts(client, instance, generation)
            on_done(index, verdict)

        await gather_closing((one(i) for i in range(len(pairs))), client)

    async def _attempts(self, client: OpenAIEndpoint, instance: Instance, generation: Generation) -> Verdict:
        c = self.config
        base = self.prompts.messages(instance, generation)
        messages = base
        attempts = c.retries + 1
        extra: dict[str, Any] = {"response_format": {"type": "json_object"}} if c.json_mode else {}
        last = ""
        for attempt in range(1, attempts + 1):
            wait: float | None = None
            try:
                reply = await client.attempt(messages, usage=self.usage, retry=attempt > 1, temperature=0.0,
                                             top_p=1.0, max_tokens=c.max_tokens, seed=c.seed, **extra)
            except EndpointDown as exc:  # the breaker opened: no more calls, the item is listed as failed
                self.usage.failures += 1
                return JudgeFailure(id=instance.id, judge=self.id, error=str(exc), attempts=attempt - 1)
            except RetryableError as exc:
                last, wait = str(exc), exc.retry_after
            else:
                try:
                    return self._verdict(instance, parse_judge_output(reply.text))
                except MalformedOutput as exc:
                    self.usage.malformed += 1
                    self.usage.note_error("malformed")
                    last = f"malformed reply: {exc}"
                    messages = self.prompts.corrected(base, reply.text[:2000], str(exc))
            if attempt < attempts:
                await asyncio.sleep(max(c.backoff * 2 ** (attempt - 1), wait or 0.0))
        self.usage.failures += 1
        return JudgeFailure(id=instance.id, judge=self.id, error=last, attempts=attempts)

    # local model through the hf backend: batched greedy generation, one correction round per retry
    def _judge_hf(self, pairs: Sequence[Pair], on_done: Callable[[int, Verdict], None]) -> None:
        if self._hf is None:
            from haldet.backends.hf.backend import HFBackend

            assert self.config.model is not None
            self._hf = HFBackend(self.config.model)
        backend = self._hf
        base = [self.prompts.messages(inst, gen) for inst, gen in pairs]
        pending = {i: base[i] for i in range(len(pairs))}
        errors: dict[int, str] = {}
        attempts = min(self.config.retries, 1) + 1  # greedy: only a changed prompt can change the reply
        for attempt in range(1, attempts + 1):
            order = sorted(pending)
            prompts = [backend.render_chat(pending[i]) + HF_PREFILL for i in order]
            outputs = backend.generate(prompts, max_new_tokens=self.config.max_tokens, batch_size=8)
            self.usage.calls += len(order)
            if attempt > 1:
                self.usage.retries += len(order)
            for i, prompt, out in zip(order, prompts, outputs, strict=True):
                self.usage.prompt_tokens += len(backend.encode_prompt(prompt))
                self.usage.completion_tokens += len(out.token_ids)
                reply = HF_PREFILL + out.text
                try:
                    parsed = parse_judge_output(reply)
                except MalformedOutput as exc:
                    self.usage.malformed += 1
                    self.usage.note_error("malformed")
                    errors[i] = f"malformed reply: {exc}"
                    pending[i] = self.prompts.corrected(base[i], reply[:2000], str(exc))
                    continue
                del pending[i]
                on_done(i, self._verdict(pairs[i][0], parsed))
            if not pending:
                return
        for i in sorted(pending):
            self.usage.failures += 1
            on_done(i, JudgeFailure(id=pairs[i][0].id, judge=self.id, error=errors[i], attempts=attempts))
