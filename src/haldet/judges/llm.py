"""LLM judge (paper appendix D): the judge model reads the question, optional context, acceptable answers (r+)
and known traps (r-) and returns `{"reasoning", "category"}`, validated against a pydantic schema.

Prompt: `templates/judge_system.txt` (rules), calibration examples from `templates/judge_examples.json`
(acceptable-answer match, known-trap match, abstention) as earlier user/assistant turns, then the item rendered
with `templates/judge_user.txt` (jinja2). Every file can be overridden from `judge.template_dir`; the digest of
the texts used goes into the cache key. Decoding is deterministic (temperature 0, fixed seed).

Calls go through the structured-LLM client (`haldet.backends.structured.StructuredClient`): any OpenAI-compatible
endpoint through `haldet.backends.openai_client.OpenAIEndpoint` (a semaphore
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

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from haldet.backends.openai_client import Usage
from haldet.backends.structured import CallFailure, ClientSettings, Outcome, Request, StructuredClient
from haldet.config import JudgeConfig, digest
from haldet.errors import HaldetError
from haldet.judges.base import Judge, JudgeFailure, Pair, Verdict, register
from haldet.judges.short_answer import is_unanswerable
from haldet.schema import Category, Generation, Instance, Label
from haldet.text.templates import template_folder, template_text

TEMPLATE_FILES = ("judge_system.txt", "judge_user.txt", "judge_correction.txt", "judge_examples.json")
REASONING_TEMPLATE = "judge_user_reasoning.txt"  # the item's turn with the candidate's reasoning (when it is shown)
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
def load_judge_templates(template_dir: str | None, overrides: dict[str, Any] | None = None,
                         prompt: str = "haldet", *, see_reasoning: bool = False) -> dict[str, str]:
    """Packaged judge templates (by file name), each replaced by the run config's `templates:` entry of that name
    (judge_system, ...) or else by a file of the same name in `template_dir` when present. `prompt: paper` takes
    the system and user turns from `judge_paper_system` / `judge_paper_user` (OpenHalDet appendix D's structure:
    its three rules and its fields, without haldet's extra rules, task line and options); the reasoning variant of
    the item's turn only when the judge is shown the reasoning (so the default judge's key is unchanged)."""
    names = (*TEMPLATE_FILES, REASONING_TEMPLATE) if see_reasoning else TEMPLATE_FILES
    folder = template_folder(template_dir, what="judge", option="judge.template_dir", names=names)
    paper = {"judge_system.txt": "judge_paper_system", "judge_user.txt": "judge_paper_user"}
    source = paper if prompt == "paper" else {}
    return {name: template_text(source.get(name, name.rsplit(".", 1)[0]), overrides, folder) for name in names}


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


class JudgePrompts:
    """The judge's prompt set: system rules, calibration examples, the item's user turn and the correction turn
    (not the answer prompts of `haldet.text.prompts.PromptBuilder`); `digest` goes into the judge's cache key."""

    def __init__(self, templates: dict[str, str], few_shot: bool = True) -> None:
        import jinja2

        env = jinja2.Environment(autoescape=False, keep_trailing_newline=False, undefined=jinja2.StrictUndefined)
        self.system = templates["judge_system.txt"].strip()
        self.user = env.from_string(templates["judge_user.txt"])
        shown = templates.get(REASONING_TEMPLATE)
        self.user_reasoning = env.from_string(shown) if shown is not None else None
        self.correction = env.from_string(templates["judge_correction.txt"])
        try:
            self.examples = json.loads(templates["judge_examples.json"]) if few_shot else []
        except json.JSONDecodeError as exc:
            raise HaldetError(f"judge_examples.json is not valid JSON: {exc.msg} (line {exc.lineno})",
                              where="judge templates") from None
        self.digest = digest([templates, few_shot])

    def render_user(self, *, question: str, answer: str, truths: list[str], traps: list[str], context: str = "",
                    instruction: str = "", options: dict[str, str] | None = None, reasoning: str | None = None) -> str:
        if len(context) > MAX_CONTEXT_CHARS:
            context = context[:MAX_CONTEXT_CHARS] + " [...]"
        template = self.user if reasoning is None or self.user_reasoning is None else self.user_reasoning
        return template.render(question=question, answer=answer, truths=truths, traps=traps, context=context,
                               instruction=instruction, options=options or {}, reasoning=reasoning or "").strip()

    def messages(self, instance: Instance, generation: Generation, *,
                 see_reasoning: bool = False) -> list[dict[str, str]]:
        """The judge's chat for one answer: the candidate's answer alone, its reasoning too when `see_reasoning`
        (`reasoning.judges_see_reasoning`) and the model gave one."""
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
            context=instance.context, instruction=instance.instruction, options=instance.options,
            reasoning=generation.reasoning if see_reasoning else None)})
        return msgs

    def correction_text(self, error: str) -> str:
        """The user turn that follows a malformed reply (the structured client appends it after that reply)."""
        return self.correction.render(error=error).strip()


# --- the judge ------------------------------------------------------------------------------------------------
@register("llm")
class LLMJudge(Judge):
    deterministic = False

    def __init__(self, config: JudgeConfig, *, backend: Any = None, templates: dict[str, Any] | None = None,
                 see_reasoning: bool = False) -> None:
        if not config.model:
            raise HaldetError("the LLM judge needs a model", where="--judge-model",
                              hint="e.g. --judge-model gpt-4o-mini (OpenAI-compatible endpoint) or "
                                   "--judge-backend hf --judge-model smollm2-135m (local)")
        self.config = config
        self.see_reasoning = see_reasoning  # the candidate's reasoning shown before its answer
        self.prompts = JudgePrompts(load_judge_templates(config.template_dir, templates, config.prompt,
                                                         see_reasoning=see_reasoning),
                                    few_shot=config.few_shot)
        self.client = StructuredClient(
            ClientSettings.of_judge(config, option="--judge-model",
                                    where=f"judge {config.model} at {config.base_url or 'api.openai.com'}"),
            correction=self.prompts.correction_text, local=backend)

    @property
    def id(self) -> str:
        return f"llm:{self.config.model}"

    @property
    def usage(self) -> Usage:
        return self.client.usage

    def fingerprint(self) -> Any:
        c = self.config
        params = [{"params": c.params.identity()}] if c.backend == "openai" and c.params.identity() else []
        return [self.id, c.backend, c.base_url if c.backend == "openai" else None, c.reply_budget(), c.seed,
                c.json_mode, self.prompts.digest, *params, *(["sees reasoning"] if self.see_reasoning else [])]

    def applies(self, instance: Instance) -> bool:
        return True

    def local_models(self, task_types: frozenset[str]) -> list[str]:
        return [str(self.config.model)] if self.config.backend == "hf" and task_types else []

    def judge(self, instance: Instance, generation: Generation) -> Verdict:
        out: list[Verdict] = []
        self.judge_many([(instance, generation)], lambda i, v: out.append(v))
        return out[0]

    def judge_many(self, pairs: Sequence[Pair], on_done: Callable[[int, Verdict], None]) -> None:
        """Each pair asked through the structured client (retries, one correction turn per malformed reply); a
        pair still failing after all attempts is a `JudgeFailure`, never a label."""
        if not pairs:
            return
        requests = [Request(self.prompts.messages(inst, gen, see_reasoning=self.see_reasoning), parse_judge_output,
                            prefill=HF_PREFILL)
                    for inst, gen in pairs]

        def done(index: int, outcome: Outcome) -> None:
            instance = pairs[index][0]
            if isinstance(outcome, CallFailure):
                on_done(index, JudgeFailure(id=instance.id, judge=self.id, error=outcome.error,
                                            attempts=outcome.attempts))
            else:
                on_done(index, self._verdict(instance, outcome.value))

        self.client.ask(requests, on_done=done)

    def usage_report(self) -> dict[str, Any]:
        priced = self.client.settings  # the declared price, else genai-prices' (`haldet.model_prices`)
        report = self.usage.report(priced.price_in, priced.price_out)
        report["model"] = self.config.model
        report["price_source"] = self.client.price_source
        report["backend"] = self.config.backend
        return report

    def _verdict(self, instance: Instance, parsed: JudgeOutput) -> Label:
        return Label(id=instance.id, category=Category(parsed.category), reasoning=parsed.reasoning, judge=self.id)
