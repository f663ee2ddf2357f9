"""The `verdict` stage: an LLM asked a classification prompt about each answer (LLM-as-a-judge and zero-shot
classifier detectors), asked once per item and cached like every other evidence.

Detectors never call a model, so a detector that *is* a prompted LLM (TRIVIA+'s LLM-as-a-judge and its few-shot
variant, VeriGray's 7-way classifier) declares an `Ask`: which registered `VerdictPrompt` and how many few-shot
examples. This stage asks every ask of the selected detectors, through the run's own backend (the default) or
an OpenAI-compatible endpoint (`verdict.model` / `verdict.base_url`), and stores the raw reply with the parsed
label. An unparsable reply is stored as such (label None, reason); a call that fails after its retries writes no
record at all (it is listed in the stage's failures and asked again on the next run), so a failure never becomes
a label.

A prompt of a unit level (`VerdictPrompt.level`, e.g. "sentence") is asked once per unit of that kind
(`Instance.units_of`), the unit passed to `messages`; its record holds one verdict per unit, in order.

Few-shot examples (response level) are validation items the zero-shot ask got wrong (seeded choice among them),
shown with their training-regime labels: they need the split and labels (`CellContext.split`,
`CellContext.labels`), and their ids and labels are part of the few-shot key. Test items are never examples.

Record: {id, key, ask, judge, reply, label, reason, seconds}; at a unit level {id, key, ask, judge, units:
[{reply, label, reason}], seconds}.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from haldet.backends.structured import CallFailure, ClientSettings, Request, StructuredClient
from haldet.config import digest, stage_key
from haldet.errors import HaldetError
from haldet.schema import Instance, SpanLabel
from haldet.signals import Signal
from haldet.stages.base import STAGES, Item, Stage
from haldet.text.templates import override_digest, template_text


@dataclass(frozen=True)
class Example:
    """A labelled demonstration for a few-shot prompt: the item, its answer and its (training) label."""

    instance: Instance
    response: str
    label: str


@dataclass(frozen=True)
class VerdictPrompt:
    """A classification prompt: `messages(instance, response, examples, unit, texts)` builds the chat (`unit` is the
    unit asked about at a unit level, else None; `texts` the prompt's `templates` by name, as the run config's
    `templates:` gives them or packaged), `parse(reply)` returns (label, "") with a label of `labels`, or (None, why)
    when the reply states none; `scores` maps labels to a detector score (higher = more likely hallucinated). Bump
    `version` when the packaged wording or parsing changes (it is in the key; replaced texts are keyed themselves)."""

    name: str
    version: str
    labels: tuple[str, ...]
    scores: dict[str, float]
    messages: Callable[[Instance, str, Sequence[Example], SpanLabel | None, Mapping[str, str]], list[dict[str, str]]]
    parse: Callable[[str], tuple[str | None, str]]
    max_new_tokens: int = 384
    level: str = "response"
    templates: tuple[str, ...] = ()  # names in haldet.text.templates.PROMPT_TEMPLATES


PROMPTS: dict[str, VerdictPrompt] = {}


def register_prompt(prompt: VerdictPrompt) -> VerdictPrompt:
    PROMPTS[prompt.name] = prompt
    return prompt


def get_prompt(name: str) -> VerdictPrompt:
    if name not in PROMPTS:
        raise HaldetError(f"unknown verdict prompt {name!r}", where="detector_params",
                          hint=f"registered prompts: {', '.join(sorted(PROMPTS)) or '(none)'}")
    return PROMPTS[name]


@dataclass(frozen=True)
class Ask:
    """One prompt asked of every item: `shots` > 0 adds that many misclassified validation examples."""

    prompt: str
    shots: int = 0
    seed: int = 42

    @property
    def name(self) -> str:
        return self.prompt if not self.shots else f"{self.prompt}@{self.shots}shot"

    def check(self) -> VerdictPrompt:
        """The prompt, after checking the ask fits it (few-shot demonstrations exist at response level only)."""
        prompt = get_prompt(self.prompt)
        if self.shots and prompt.level != "response":
            raise HaldetError(f"few-shot asks need a response-level prompt; {self.prompt!r} is {prompt.level}-level",
                              where="detector_params", hint="set shots: 0")
        return prompt


def asks_of(detectors: Sequence[Any]) -> list[Ask]:
    """The asks the given detector instances read, plus the zero-shot ask of every few-shot one (its wrong
    validation verdicts pick the demonstrations); zero-shot asks first."""
    asks = {d.ask for d in detectors if getattr(d, "ask", None) is not None}
    asks |= {Ask(a.prompt) for a in asks if a.shots}
    for ask in asks:
        ask.check()
    return sorted(asks, key=lambda a: (a.shots, a.prompt))


@STAGES.register("verdict")
class VerdictStage(Stage):
    provides = frozenset({Signal.VERDICT})
    after = ("generate", "sample", "auxiliary", "features")

    def __init__(self, ctx: Any, asks: Sequence[Ask] | None = None) -> None:
        super().__init__(ctx)
        self.asks = list(asks) if asks is not None else asks_of(ctx.detectors)
        self.failures: dict[str, dict[str, str]] = {}  # ask name -> item id -> last error
        self._examples: dict[Ask, list[Item]] = {}
        self._current = self.asks[0] if self.asks else Ask("")

    # --- who answers -----------------------------------------------------------------------------------------
    def judge_id(self) -> dict[str, Any]:
        cfg = self.ctx.config.verdict
        if cfg.model is None:
            return {"backend": "run", "model": self.ctx.backend.fingerprint()}
        return {"backend": "openai", "model": cfg.model, "base_url": cfg.base_url}

    def judge_name(self) -> str:
        cfg = self.ctx.config.verdict
        return cfg.model or self.ctx.model

    # --- keys and records ------------------------------------------------------------------------------------
    def ask_key(self, ask: Ask, item: Item) -> str:
        cfg = self.ctx.config.verdict
        prompt = get_prompt(ask.prompt)
        labels = self.ctx.labels or {}
        examples = [(e.id, labels.get(e.id)) for e in self._examples.get(ask, [])] if ask.shots else []
        response = item.generation.response if item.generation is not None else None
        return stage_key(self.name, self.judge_id(), ask.name, prompt.version, examples, item.prompt, response,
                         cfg.temperature, self.max_new_tokens(prompt),
                         *override_digest(prompt.templates, self.ctx.config.templates))

    def max_new_tokens(self, prompt: VerdictPrompt) -> int:
        return self.ctx.config.verdict.max_new_tokens or prompt.max_new_tokens

    def key(self, item: Item) -> str:
        return digest([self.ask_key(ask, item) for ask in self.asks])

    def records(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Per item, {"id", "asks": {ask name: record}} over the asks with a current record."""
        out: dict[str, dict[str, Any]] = {item.id: {"id": item.id, "asks": {}} for item in items}
        log = self.ctx.store.log(self.name)
        for ask in self.asks:
            if ask.shots and ask not in self._examples:
                continue  # examples not chosen yet: its records are read after `ensure`
            for item_id, rec in log.read({item.id: self.ask_key(ask, item) for item in items}).items():
                out[item_id]["asks"][ask.name] = rec
        return out

    def ensure(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Each ask in turn (zero-shot before few-shot), computing only the items lacking its record."""
        computed = 0
        for ask in self.asks:
            if ask.shots:
                self._examples[ask] = self._choose_examples(ask, items)
            keys = {item.id: self.ask_key(ask, item) for item in items}
            log = self.ctx.store.log(self.name)
            todo = [item for item in items if item.id not in log.read(keys)]
            if todo:
                with self.ctx.store.lock(self.name):
                    done = log.read(keys)
                    todo = [item for item in items if item.id not in done]
                    computed += len(todo)
                    self._current = ask
                    self._compute_missing(todo, {})
        counts = self.ctx.counts.stage(self.name)
        counts.computed = computed
        n_failed = sum(len(v) for v in self.failures.values())
        if n_failed:
            counts.failed = n_failed
        return self.records(items)

    def _choose_examples(self, ask: Ask, items: Sequence[Item]) -> list[Item]:
        """`ask.shots` validation items whose zero-shot verdict disagrees with their label (seeded)."""
        split, labels = self.ctx.split, self.ctx.labels
        if split is None or labels is None:
            raise HaldetError(f"few-shot verdicts ({ask.name}) need the split and training labels",
                              hint="run them through `haldet run`, which splits before the evidence stages")
        zero = Ask(ask.prompt)
        log = self.ctx.store.log(self.name)
        val = [item for item in items if item.id in set(split["val"])]
        verdicts = log.read({item.id: self.ask_key(zero, item) for item in val})
        prompt = get_prompt(ask.prompt)
        wrong = [item for item in sorted(val, key=lambda it: it.id) if item.id in verdicts
                 and verdicts[item.id].get("label") in prompt.scores
                 and int(prompt.scores[verdicts[item.id]["label"]] >= 0.5) != labels[item.id]]
        random.Random(ask.seed).shuffle(wrong)
        return wrong[: ask.shots]

    # --- asking ----------------------------------------------------------------------------------------------
    def items_per_batch(self) -> int:
        return max(1, self.ctx.config.verdict.batch_size)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        ask: Ask = self._current
        prompt = ask.check()
        labels = self.ctx.labels or {}
        examples = [Example(it.instance, it.generation.response if it.generation else "",
                            _label_word(prompt, labels.get(it.id))) for it in self._examples.get(ask, [])]
        texts = {name: template_text(name, self.ctx.config.templates) for name in prompt.templates}
        chats: list[list[dict[str, str]]] = []
        owners: list[int] = []  # batch index of each chat
        for b, item in enumerate(batch):
            if item.generation is None:
                raise ValueError(f"verdict stage needs the answer of {item.id}")
            units: list[SpanLabel | None] = (
                [None] if prompt.level == "response" else list(item.instance.units_of(prompt.level)))
            for unit in units:
                chats.append(prompt.messages(item.instance, item.generation.response, examples, unit, texts))
                owners.append(b)
        start = time.perf_counter()
        replies = self._ask(chats, self.max_new_tokens(prompt))
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        verdicts: list[list[dict[str, Any]]] = [[] for _ in batch]
        failed: dict[int, str] = {}
        for b, reply in zip(owners, replies, strict=True):
            if isinstance(reply, CallFailure):
                failed[b] = f"{reply.error} (after {reply.attempts} attempts)"
                continue
            label, why = prompt.parse(reply)
            verdicts[b].append({"reply": reply, "label": label,
                                "reason": "" if label is not None else why or "the reply states no verdict"})
        out = []
        for b, item in enumerate(batch):
            if b in failed:  # no record: never a label, asked again on the next run
                self.failures.setdefault(ask.name, {})[item.id] = failed[b]
                continue
            rec: dict[str, Any] = {"id": item.id, "key": self.ask_key(ask, item), "ask": ask.name,
                                   "judge": self.judge_name(), "seconds": per_item}
            rec.update(verdicts[b][0] if prompt.level == "response" else {"units": verdicts[b]})
            out.append(rec)
        return out

    def _ask(self, chats: list[list[dict[str, str]]], max_new_tokens: int) -> list[str | CallFailure]:
        """Each chat's raw reply (parsed later: an unparsable one is stored as such), or its failure after the
        retries, through the structured-LLM client: the run's own backend, or the configured endpoint."""
        cfg = self.ctx.config.verdict
        if cfg.model is None:
            settings = ClientSettings(model=self.ctx.model, backend="hf", retries=0, max_tokens=max_new_tokens,
                                      temperature=cfg.temperature, batch_size=cfg.batch_size,
                                      count_prompt_tokens=False)
            client = StructuredClient(settings, correction=str, local=self.ctx.backend)
        else:
            settings = ClientSettings(model=cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
                                      timeout=cfg.timeout, concurrency=cfg.concurrency, retries=cfg.retries,
                                      backoff=cfg.backoff, max_tokens=max_new_tokens, temperature=cfg.temperature,
                                      option="verdict.model", where=f"verdict model {cfg.model}")
            client = StructuredClient(settings, correction=str)
        outcomes = client.ask([Request(chat, str) for chat in chats])  # `str` never refuses: no correction turn
        return [o if isinstance(o, CallFailure) else o.text for o in outcomes]


def _label_word(prompt: VerdictPrompt, label: int | None) -> str:
    """The prompt's label word for a binary training label (the highest- / lowest-scored label)."""
    ranked = sorted(prompt.labels, key=lambda lab: prompt.scores[lab])
    return ranked[-1] if label == 1 else ranked[0]
