"""The `verdict` stage: an LLM asked a classification prompt about each answer (LLM-as-a-judge and zero-shot
classifier detectors), asked once per item and cached like every other evidence.

Detectors never call a model, so a detector that *is* a prompted LLM (TRIVIA+'s LLM-as-a-judge and its few-shot
variant, VeriGray's 7-way classifier) declares an `Ask`: which registered `VerdictPrompt` and how many few-shot
examples (`haldet.stages.verdict_prompts`). This stage asks every ask of the selected detectors, through the run's
own backend (the default) or an OpenAI-compatible endpoint (`verdict.model` / `verdict.base_url`), and stores the
raw reply with the parsed label. An unparsable reply is stored as such (label None, reason); a call that fails
after its retries writes no record at all (it is listed in the stage's failures and asked again on the next run),
so a failure never becomes a label.

A prompt of a unit level (`VerdictPrompt.level`, e.g. "sentence") is asked once per unit of that kind
(`Instance.units_of`), the unit passed to `messages`; its record holds one verdict per unit, in order.

Few-shot examples (response level) are validation items the zero-shot ask got wrong (seeded choice among them),
shown with their training-regime labels: they need the split and labels (`CellContext.split`,
`CellContext.labels`), and their ids and labels are part of the few-shot key. Test items are never examples.

Where a suite fitted a long article to the judge's own window (`verdict.context_window`; TRIVIA+), the judge reads
that fit (`judge_view`), and its digest is in the key; otherwise the judge reads the context the detectors' model
read, which the rendered prompt in the key already covers.

A prompt of several turns (`VerdictPrompt.follow`, e.g. ANAH-v2's fact / reference / hallucination dialogue) goes
on turn by turn; its record keeps every reply (`turns`), `reply` being the last, the one parsed.

Record: {id, key, ask, judge, reply, label, reason, seconds}; at a unit level {id, key, ask, judge, units:
[{reply, label, reason[, turns]}], seconds}.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from haldet.backends.structured import (
    CallFailure,
    ClientSettings,
    Reply,
    Request,
    StructuredClient,
    billing,
)
from haldet.config import digest, stage_key
from haldet.endpoint_params import price_of, reply_budget
from haldet.errors import HaldetError
from haldet.schema import Instance, SpanLabel
from haldet.signals import Signal
from haldet.stages.base import STAGES, Item, Stage
from haldet.stages.prompt_optimizer import TEMPLATES as OPTIMIZER_TEMPLATES
from haldet.stages.prompt_optimizer import Mistake, Optimize, optimize_instructions
from haldet.stages.verdict_prompts import (
    Ask,
    Example,
    VerdictPrompt,
    asks_of,
    get_prompt,
    judge_context_key,
    judge_view,
)
from haldet.text.templates import override_digest, template_text

OPTIMIZED_FILE = "verdict_po.json"  # optimised instructions and their trials, by optimisation key


@STAGES.register("verdict")
class VerdictStage(Stage):
    provides = frozenset({Signal.VERDICT})
    after = ("generate", "sample", "auxiliary", "features")

    def __init__(self, ctx: Any, asks: Sequence[Ask] | None = None) -> None:
        super().__init__(ctx)
        self.asks = list(asks) if asks is not None else asks_of(ctx.detectors)
        self.failures: dict[str, dict[str, str]] = {}  # ask name -> item id -> last error
        self._examples: dict[Ask, list[Item]] = {}
        self._instructions: dict[Ask, str] = {}  # an optimised ask's instructions (a candidate while optimising)
        self._optimized: dict[Ask, dict[str, Any]] = {}  # an optimised ask's outcome (final prompt, trials)
        self._current = self.asks[0] if self.asks else Ask("")

    # --- who answers -----------------------------------------------------------------------------------------
    def judge_id(self) -> dict[str, Any]:
        cfg = self.ctx.config.verdict
        if cfg.model is None:
            return {"backend": "run", "model": self.ctx.backend.fingerprint()}
        params = {"params": cfg.params.identity()} if cfg.params.identity() else {}  # declared request parameters
        return {"backend": "openai", "model": cfg.model, "base_url": cfg.base_url, **params}

    def judge_name(self) -> str:
        cfg = self.ctx.config.verdict
        return cfg.model or self.ctx.model

    # --- keys and records ------------------------------------------------------------------------------------
    def ask_key(self, ask: Ask, item: Item) -> str:
        cfg = self.ctx.config.verdict
        prompt = get_prompt(ask.prompt)
        labels = self.ctx.labels or {}
        examples = ([(e.id, labels.get(e.id), *judge_context_key(e.instance)) for e in self._examples.get(ask, [])]
                    if ask.shots else [])
        response = item.generation.response if item.generation is not None else None
        optimized = [self._instructions.get(ask)] if ask.optimize is not None else []
        return stage_key(self.name, self.judge_id(), ask.name, prompt.version, examples, item.prompt, response,
                         cfg.temperature, self.max_new_tokens(prompt),
                         *override_digest(prompt.templates, self.ctx.config.templates), *optimized,
                         *judge_context_key(item.instance))

    def max_new_tokens(self, prompt: VerdictPrompt) -> int:
        """`verdict.max_new_tokens`, else the prompt's own budget, raised to `REASONING_REPLY_BUDGET` when the model
        that answers reasons (an endpoint whose `verdict.params` declare it, the run's own model when it thinks)."""
        cfg = self.ctx.config.verdict
        reasons = cfg.params.reasons() if cfg.model is not None else self.ctx.backend.thinks()
        return reply_budget(cfg.max_new_tokens, prompt.max_new_tokens, reasons=reasons)

    def key(self, item: Item) -> str:
        return digest([self.ask_key(ask, item) for ask in self.asks])

    def records(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Per item, {"id", "asks": {ask name: record}} over the asks with a current record. A learned ask's choices
        (demonstrations, optimised instructions) are read back from the stored verdicts when this stage instance
        did not make them (the loader's), so its records are found; an optimised ask's record carries the outcome
        (`po`: final instructions, validation score, trials)."""
        out: dict[str, dict[str, Any]] = {item.id: {"id": item.id, "asks": {}} for item in items}
        log = self.ctx.store.log(self.name)
        for ask in self.asks:
            if ask.learned and not self._recall(ask, items):
                continue  # not asked yet under this split and these labels
            for item_id, rec in log.read({item.id: self.ask_key(ask, item) for item in items}).items():
                if ask in self._optimized:
                    rec = {**rec, "po": self._optimized[ask]}
                out[item_id]["asks"][ask.name] = rec
        return out

    def used_keys(self, records: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        """Each item's keys: one record per ask."""
        return {item_id: [str(r["key"]) for r in (rec.get("asks") or {}).values()] for item_id, rec in records.items()
                if rec.get("asks")}

    def incomplete(self, items: Sequence[Item], records: Mapping[str, Any]) -> set[str]:
        """Items lacking the verdict of any ask (every item has a record here, its asks filled as answered)."""
        names = {ask.name for ask in self.asks}
        return {item.id for item in items if names - set((records.get(item.id) or {}).get("asks") or {})}

    def _recall(self, ask: Ask, items: Sequence[Item]) -> bool:
        """Restore a learned ask's choices from the stored verdicts and outcomes (no model call); False when they
        cannot be known without asking (no split or labels yet, or the prompt not optimised yet)."""
        if self.ctx.split is None or self.ctx.labels is None:
            return False
        if ask.shots and ask not in self._examples:
            self._examples[ask] = self._choose_examples(ask, items)
        if ask.optimize is not None and ask not in self._optimized:
            stored = (self.ctx.store.read_json(OPTIMIZED_FILE) or {}).get(self._optimization_key(ask, items))
            if stored is None:
                return False
            self._optimized[ask], self._instructions[ask] = stored, stored["instructions"]
        return True

    def ensure(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Each ask in turn (zero-shot before few-shot before optimised), computing only the items lacking its
        record; an optimised ask first runs (or reads back) its optimisation on the training and validation items."""
        computed = 0
        for ask in self.asks:
            if ask.shots:
                self._examples[ask] = self._choose_examples(ask, items)
            if ask.optimize is not None:
                computed += self._optimize(ask, items)
            computed += self._ask_missing(ask, items)
        counts = self.ctx.counts.stage(self.name)
        counts.computed = computed
        n_failed = sum(len(v) for v in self.failures.values())
        if n_failed:
            counts.failed = n_failed
        return self.records(items)

    def _ask_missing(self, ask: Ask, items: Sequence[Item]) -> int:
        """Ask `ask` of the items lacking its current record (under the stage lock); returns how many were asked."""
        keys = {item.id: self.ask_key(ask, item) for item in items}
        log = self.ctx.store.log(self.name)
        if set(log.read(keys)) >= set(keys):  # every item has its record: no lock taken
            return 0
        with self.ctx.store.lock(self.name):
            done = log.read(keys)
            todo = [item for item in items if item.id not in done]
            self._current = ask
            self._compute_missing(todo, {})
        return len(todo)

    def _choose_examples(self, ask: Ask, items: Sequence[Item]) -> list[Item]:
        """`ask.shots` validation items whose zero-shot verdict disagrees with their label (seeded)."""
        split, labels = self._split_and_labels(ask)
        zero = Ask(ask.prompt)
        log = self.ctx.store.log(self.name)
        val = [item for item in items if item.id in set(split["val"])]
        verdicts = log.read({item.id: self.ask_key(zero, item) for item in val})
        prompt = get_prompt(ask.prompt)
        wrong = [item for item in sorted(val, key=lambda it: it.id) if item.id in verdicts and item.id in labels
                 and _predicted(prompt, verdicts[item.id]) not in (None, labels[item.id])]
        random.Random(ask.seed).shuffle(wrong)
        return wrong[: ask.shots]

    def _split_and_labels(self, ask: Ask) -> tuple[dict[str, list[str]], dict[str, int]]:
        split, labels = self.ctx.split, self.ctx.labels
        if split is None or labels is None:
            raise HaldetError(f"verdicts of {ask.name} need the split and training labels",
                              hint="run them through `haldet run`, which splits before the evidence stages")
        return split, labels

    # --- prompt optimisation ---------------------------------------------------------------------------------
    def _optimization_key(self, ask: Ask, items: Sequence[Item]) -> str:
        """Everything the optimised instructions depend on: the ask and its settings, the optimiser, the
        demonstrations, and each training / validation item's zero-shot key (judge, prompt, answer, wording) with
        its label. Test items and their labels are not in it: they never reach the loop."""
        split, labels = self._split_and_labels(ask)
        zero = Ask(ask.prompt)
        parts = {part: sorted((it.id, labels.get(it.id), self.ask_key(zero, it)) for it in items
                              if it.id in set(split[part]) and it.id in labels) for part in ("train", "val")}
        if ask.shots and ask not in self._examples:
            self._examples[ask] = self._choose_examples(ask, items)
        examples = [(e.id, labels.get(e.id)) for e in self._examples.get(ask, [])]
        return digest([ask.name, asdict(ask.optimize or Optimize()), self.optimizer_id(ask), examples, parts,
                       *override_digest(OPTIMIZER_TEMPLATES, self.ctx.config.templates)])

    def optimizer_id(self, ask: Ask) -> dict[str, Any]:
        opt = ask.optimize or Optimize()
        if opt.model is None:
            return {"same_as_judge": self.judge_id()}
        params = self.ctx.config.verdict.params.identity()  # the optimiser's requests carry the verdict section's
        return {"backend": "openai", "model": opt.model, "base_url": opt.base_url,
                **({"params": params} if params else {})}

    def _optimize(self, ask: Ask, items: Sequence[Item]) -> int:
        """The ask's optimised instructions: read back when stored under the same key, else the loop on the
        training and validation items (their verdicts cached like any other), its outcome stored
        (`verdict_po.json`, one entry per key) before any test item is asked. Returns the verdicts it asked."""
        if self._recall(ask, items):
            return 0
        split, labels = self._split_and_labels(ask)
        opt = ask.optimize or Optimize()
        prompt = ask.check()
        by_id = {item.id: item for item in items}
        train = {i: labels[i] for i in split["train"] if i in by_id and i in labels}
        val = {i: labels[i] for i in split["val"] if i in by_id and i in labels}
        if not train or not val:
            raise HaldetError(f"{ask.name} needs labelled training and validation items to optimise its prompt "
                              f"(found {len(train)} and {len(val)})", where="detector llm_judge_po",
                              hint="run more items (--limit), or leave the optimised judge out")
        key = self._optimization_key(ask, items)
        texts = {name: template_text(name, self.ctx.config.templates) for name in OPTIMIZER_TEMPLATES}
        initial = template_text(prompt.instructions, self.ctx.config.templates).strip()

        asked = 0

        def judge(instructions: str, ids: Sequence[str]) -> dict[str, tuple[int | None, str]]:
            nonlocal asked
            self._instructions[ask] = instructions
            subset = [by_id[i] for i in ids]
            asked += self._ask_missing(ask, subset)
            recs = self.ctx.store.log(self.name).read({it.id: self.ask_key(ask, it) for it in subset})
            return {i: (_predicted(prompt, rec), str(rec.get("reply") or "")) for i, rec in recs.items()}

        def mistake(item_id: str, reply: str) -> Mistake:
            item = by_id[item_id]
            return Mistake(judge_view(item.instance), item.generation.response if item.generation else "", reply,
                           _label_word(prompt, train[item_id]))

        def rewrite(chat: list[dict[str, str]]) -> str | None:
            cfg = self.ctx.config.verdict  # the optimiser: an endpoint under verdict.params, or the judge itself
            reasons = cfg.params.reasons() if opt.model or cfg.model else self.ctx.backend.thinks()
            budget = reply_budget(None, opt.max_new_tokens, reasons=reasons)
            reply = self._ask([chat], budget, model=opt.model, base_url=opt.base_url)[0]
            return None if isinstance(reply, CallFailure) else reply.text

        advance = self.ctx.progress(f"verdict: optimising the {ask.prompt} prompt [{self.ctx.dataset} | "
                                    f"{self.ctx.model}]", opt.rounds)
        outcome = optimize_instructions(initial, judge=judge, rewrite=rewrite, mistake=mistake, train=train,
                                        val=val, settings=opt, seed=ask.seed, texts=texts, progress=advance)
        optimizer = opt.model or self.judge_name()
        if outcome.unreached:  # nothing stored: the next run asks again
            raise HaldetError(f"the prompt optimiser {optimizer} gave no answer in any round of {ask.name}",
                              where=(f"detector_params.llm_judge_po.optimizer_model ({opt.base_url})" if opt.model
                                     else f"the judge ({self.judge_name()})"),
                              hint="start the endpoint or correct optimizer_base_url (it usually ends in /v1); the "
                                   "verdicts asked so far are kept")
        record = {**outcome.record(), "optimizer": optimizer, "judge": self.judge_name(),
                  "n_train": len(train), "n_val": len(val), "key": key}
        with self.ctx.store.lock(self.name):
            self.ctx.store.write_json(OPTIMIZED_FILE, {**(self.ctx.store.read_json(OPTIMIZED_FILE) or {}),
                                                       key: record})
        self._optimized[ask], self._instructions[ask] = record, record["instructions"]
        return asked

    # --- asking ----------------------------------------------------------------------------------------------
    def items_per_batch(self) -> int:
        return max(1, self.ctx.config.verdict.batch_size)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        ask: Ask = self._current
        prompt = ask.check()
        labels = self.ctx.labels or {}
        examples = [Example(judge_view(it.instance), it.generation.response if it.generation else "",
                            _label_word(prompt, labels.get(it.id))) for it in self._examples.get(ask, [])]
        texts = {name: template_text(name, self.ctx.config.templates) for name in prompt.templates}
        if ask.optimize is not None:
            texts[prompt.instructions] = self._instructions[ask]
        chats: list[list[dict[str, str]]] = []
        owners: list[tuple[int, SpanLabel | None]] = []  # batch index and unit of each chat
        asked: list[tuple[Instance, str, SpanLabel | None]] = []  # what each chat is about, as the judge reads it
        for b, item in enumerate(batch):
            if item.generation is None:
                raise ValueError(f"verdict stage needs the answer of {item.id}")
            units: list[SpanLabel | None] = (
                [None] if prompt.level == "response" else list(item.instance.units_of(prompt.level)))
            for unit in units:
                asked.append((judge_view(item.instance), item.generation.response, unit))
                chats.append(prompt.messages(*asked[-1][:2], examples, unit, texts))
                owners.append((b, unit))
        start = time.perf_counter()
        dialogues = self._converse(prompt, chats, asked, texts)
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        verdicts: list[list[dict[str, Any]]] = [[] for _ in batch]
        billed: list[list[Reply[str]]] = [[] for _ in batch]
        failed: dict[int, str] = {}
        for (b, _), replies in zip(owners, dialogues, strict=True):
            reply = replies[-1]
            if isinstance(reply, CallFailure):
                failed[b] = f"{reply.error} (after {reply.attempts} attempts)"
                continue
            said = [r for r in replies if not isinstance(r, CallFailure)]
            billed[b] += said
            label, why = prompt.parse(reply.text)
            verdicts[b].append({"reply": reply.text, "label": label,
                                "reason": "" if label is not None else why or "the reply states no verdict",
                                **({"turns": [r.text for r in said]} if len(said) > 1 else {})})
        out = []
        for b, item in enumerate(batch):
            if b in failed:  # no record: never a label, asked again on the next run
                self.failures.setdefault(ask.name, {})[item.id] = failed[b]
                continue
            rec: dict[str, Any] = {"id": item.id, "key": self.ask_key(ask, item), "ask": ask.name,
                                   "judge": self.judge_name(), "seconds": per_item}
            rec.update(verdicts[b][0] if prompt.level == "response" else {"units": verdicts[b]})
            if self.ctx.config.verdict.model is not None:  # an endpoint: the tokens this role billed, and USD
                rec.update(billing(billed[b]))
            out.append(rec)
        return out

    def _converse(self, prompt: VerdictPrompt, chats: list[list[dict[str, str]]],
                  asked: list[tuple[Instance, str, SpanLabel | None]], texts: Mapping[str, str],
                  ) -> list[list[Reply[str] | CallFailure]]:
        """Each chat's replies: one, or, for a prompt with `follow`, one per turn until `follow` ends the dialogue
        (the chats still open asked together each round); a failed call ends its dialogue (the last entry)."""
        replies: list[list[Reply[str] | CallFailure]] = [[] for _ in chats]
        open_ = list(range(len(chats)))
        while open_:
            got = self._ask([chats[i] for i in open_], self.max_new_tokens(prompt))
            still = []
            for i, reply in zip(open_, got, strict=True):
                replies[i].append(reply)
                if isinstance(reply, CallFailure) or prompt.follow is None or len(replies[i]) >= prompt.max_turns:
                    continue
                turn = prompt.follow(*asked[i], texts, [r.text for r in replies[i] if not isinstance(r, CallFailure)])
                if turn is not None:
                    chats[i] = [*chats[i], {"role": "assistant", "content": reply.text},
                                {"role": "user", "content": turn}]
                    still.append(i)
            open_ = still
        return replies

    def _ask(self, chats: list[list[dict[str, str]]], max_new_tokens: int, *, model: str | None = None,
             base_url: str | None = None) -> list[Reply[str] | CallFailure]:
        """Each chat's raw reply (parsed later: an unparsable one is stored as such; an endpoint's with what it
        billed), or its failure after the retries, through the structured-LLM client: the run's own backend, or the
        configured endpoint (`model` at `base_url` instead of the judge's: a prompt optimiser of its own)."""
        cfg = self.ctx.config.verdict
        option, role = "verdict.model", "verdict model"
        if model is not None:
            cfg = cfg.model_copy(update={"model": model, "base_url": base_url})
            option, role = "detector_params.llm_judge_po.optimizer_model", "prompt optimiser"
        if cfg.model is None:
            settings = ClientSettings(model=self.ctx.model, backend="hf", retries=0, max_tokens=max_new_tokens,
                                      temperature=cfg.temperature, batch_size=cfg.batch_size,
                                      count_prompt_tokens=False, budget="verdict.max_new_tokens")
            client = StructuredClient(settings, correction=str, local=self.ctx.backend)
        else:
            price = price_of(self.ctx.config.prices, cfg.model)  # USD per 1M tokens; (None, None): unknown
            settings = ClientSettings(model=cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
                                      timeout=cfg.timeout, concurrency=cfg.concurrency, retries=cfg.retries,
                                      backoff=cfg.backoff, max_tokens=max_new_tokens, temperature=cfg.temperature,
                                      option=option, where=f"{role} {cfg.model}", params=cfg.params,
                                      section="verdict", price_in=price[0], price_out=price[1],
                                      budget="verdict.max_new_tokens")
            client = StructuredClient(settings, correction=str)
        return client.ask([Request(chat, str) for chat in chats])  # `str` never refuses: no correction turn


def _predicted(prompt: VerdictPrompt, rec: Mapping[str, Any]) -> int | None:
    """The binary verdict of a record (1 = the label scored as hallucinated), None without a verdict."""
    label = rec.get("label")
    return None if label not in prompt.scores else int(prompt.scores[label] >= 0.5)


def _label_word(prompt: VerdictPrompt, label: int | None) -> str:
    """The prompt's label word for a binary training label (the highest- / lowest-scored label)."""
    ranked = sorted(prompt.labels, key=lambda lab: prompt.scores[lab])
    return ranked[-1] if label == 1 else ranked[0]
