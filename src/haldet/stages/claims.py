"""The `claims` stage: each answer split into atomic claims, each a span of the answer, computed once per item.

A long answer (a biography, a report) holds many facts, some right and some invented; scoring it as one unit hides
which. This stage gives every answer its claims as character offsets into the answer, so the unit-level detectors
(token scores aggregated over a unit's tokens) score each claim.

Two ways, chosen by `claims.extractor`:

- `llm`: a model is asked for atomic claims (packaged wording `claims_extract`, replaceable under `templates:`)
  through the one structured client: the run's own model when `claims.model` is None, else an OpenAI-compatible
  endpoint. A reply that is not a JSON list of strings is corrected once and, still malformed, is a failure (no
  record; asked again next run). Each returned claim is mapped back to a span of the answer
  (`haldet.text.claim_spans.map_claim`); a claim that maps to no span is listed in the record's `unmapped` and
  never kept as a unit.
- `sentence` / `clause`: the offline rule-based units (no model, no cost); their units have kind `sentence` /
  `clause`, so a table never calls them claims.

Record: {id, key, extractor, unit, judge, claims: [{text, start, end}], unmapped: [text], reply, seconds}. The key
covers the extractor (model and endpoint, or the rule), the wording, the answer and the mapping threshold, so a
changed answer or prompt re-extracts and nothing else does.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from haldet.backends.structured import CallFailure, ClientSettings, Request, StructuredClient, billing
from haldet.config import stage_key
from haldet.endpoint_params import price_of
from haldet.schema import Category, Instance, SpanLabel
from haldet.stages.base import STAGES, Item, Stage
from haldet.text.claim_spans import map_all, split_units
from haldet.text.templates import override_digest, template_text

TEMPLATE = "claims_extract"
VERSION = "1"  # bump when the packaged wording or the parsing changes
RULE_VERSION = "1"  # bump when the offline splitter changes


def parse_claims(reply: str) -> list[str]:
    """The claims of a reply: a JSON list of strings (the first [...] in the reply, so a fenced block or a short
    preamble is accepted); `ValueError` otherwise."""
    match = re.search(r"\[.*\]", reply, re.S)
    if match is None:
        raise ValueError("no JSON list in the reply")
    try:
        value = json.loads(match.group())
    except json.JSONDecodeError as exc:
        raise ValueError(f"the list is not valid JSON ({exc.msg})") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("the reply must be a JSON list of strings")
    return [v.strip() for v in value if v.strip()]


def _correction(error: str) -> str:
    return f"That reply could not be read ({error}). Reply with a JSON list of strings only."


def extraction_chat(instance: Instance, answer: str, instructions: str) -> list[dict[str, str]]:
    """The chat asking for the claims of `answer` (the question shown for context only)."""
    question = instance.question or instance.instruction
    user = (f"{instructions.strip()}\n\n" + (f"Question:\n{question}\n\n" if question else "")
            + f"Answer:\n{answer}")
    return [{"role": "user", "content": user}]


@STAGES.register("claims")
class ClaimsStage(Stage):
    after = ("generate",)

    # --- who extracts ----------------------------------------------------------------------------------------
    def extractor_id(self) -> dict[str, Any]:
        cfg = self.ctx.config.claims
        if cfg.extractor != "llm":
            return {"rule": cfg.extractor, "version": RULE_VERSION}
        if cfg.model is None:
            return {"backend": "run", "model": self.ctx.backend.fingerprint()}
        params = {"params": cfg.params.identity()} if cfg.params.identity() else {}  # declared request parameters
        return {"backend": "openai", "model": cfg.model, "base_url": cfg.base_url, **params}

    def extractor_name(self) -> str:
        cfg = self.ctx.config.claims
        if cfg.extractor != "llm":
            return f"rule:{cfg.extractor}"
        return cfg.model or self.ctx.model

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.claims
        response = item.generation.response if item.generation is not None else item.instance.response
        wording = ([VERSION, *override_digest([TEMPLATE], self.ctx.config.templates), self.reply_budget()]
                   if cfg.extractor == "llm" else [])
        return stage_key(self.name, self.extractor_id(), *wording, cfg.min_coverage, item.instance.question,
                         response)

    def items_per_batch(self) -> int:
        return max(1, self.ctx.config.claims.batch_size) * (8 if self.ctx.config.claims.model else 1)

    # --- computing -------------------------------------------------------------------------------------------
    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.claims
        answers = [_answer(item) for item in batch]
        start = time.perf_counter()
        out: list[dict[str, Any]]
        if cfg.extractor != "llm":
            out = [{"id": item.id, "extractor": cfg.extractor, "unit": cfg.extractor, "judge": self.extractor_name(),
                    "claims": [{"text": text[a:b], "start": a, "end": b} for a, b in split_units(text, cfg.extractor)],
                    "unmapped": [], "reply": ""} for item, text in zip(batch, answers, strict=True)]
        else:
            out = self._extract(batch, answers)
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        for rec in out:
            rec["seconds"] = per_item
        return out

    def _extract(self, batch: list[Item], answers: list[str]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.claims
        instructions = template_text(TEMPLATE, self.ctx.config.templates)
        todo = [b for b, text in enumerate(answers) if text.strip()]  # an empty answer states no claim
        requests = [Request(extraction_chat(batch[b].instance, answers[b], instructions), parse_claims,
                            prefill="[") for b in todo]
        outcomes = self._client().ask(requests) if requests else []
        replies: dict[int, Any] = dict(zip(todo, outcomes, strict=True))
        out: list[dict[str, Any]] = []
        for b, item in enumerate(batch):
            reply = replies.get(b)
            if isinstance(reply, CallFailure):  # no record: asked again on the next run
                out.append({"id": item.id, "failed": f"{reply.error} (after {reply.attempts} attempts)"})
                continue
            claims = reply.value if reply is not None else []
            kept, unmapped = map_all(answers[b], claims, min_coverage=cfg.min_coverage)
            out.append({"id": item.id, "extractor": "llm", "unit": "claim", "judge": self.extractor_name(),
                        "claims": [{"text": t, "start": a, "end": e} for t, a, e in kept], "unmapped": unmapped,
                        "reply": reply.text if reply is not None else "",
                        **(billing([reply]) if cfg.model is not None and reply is not None else {})})
        return out

    def reply_budget(self) -> int:
        """The extractor's reply budget (`ClaimsConfig.reply_budget`): raised for a model that reasons."""
        cfg = self.ctx.config.claims
        return cfg.reply_budget(cfg.model is None and self.ctx.backend.thinks())

    def _client(self) -> StructuredClient:
        cfg = self.ctx.config.claims
        if cfg.model is None:
            settings = ClientSettings(model=self.ctx.model, backend="hf", retries=0, max_tokens=self.reply_budget(),
                                      batch_size=cfg.batch_size, count_prompt_tokens=False,
                                      budget="claims.max_new_tokens")
            return StructuredClient(settings, correction=_correction, local=self.ctx.backend)
        price = price_of(self.ctx.config.prices, cfg.model)  # USD per 1M tokens; (None, None): unknown
        settings = ClientSettings(model=cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
                                  timeout=cfg.timeout, concurrency=cfg.concurrency, retries=cfg.retries,
                                  backoff=cfg.backoff, max_tokens=self.reply_budget(), option="claims.model",
                                  where=f"claim extractor {cfg.model}", params=cfg.params, section="claims",
                                  price_in=price[0], price_out=price[1], budget="claims.max_new_tokens")
        return StructuredClient(settings, correction=_correction)


def _answer(item: Item) -> str:
    if item.generation is not None:
        return item.generation.response
    if item.instance.response is not None:
        return item.instance.response
    raise ValueError(f"the claims stage needs the answer of {item.id}")


def with_claim_units(instance: Instance, record: dict[str, Any], *, replace: bool = True) -> Instance:
    """`instance` with the record's claims as unlabelled units of the record's unit kind (`claim`, or `sentence` /
    `clause` from the offline splitter) pointing into `record`'s answer; existing units of that kind are replaced
    (`replace`) or kept. The extractor is recorded in each unit's meta."""
    kind = record.get("unit") or "claim"
    units = [u for u in instance.units if not replace or u.kind != kind]
    units += [SpanLabel(start=c["start"], end=c["end"], category=Category.INVALID, text=c["text"], kind=kind,
                        meta={"extractor": record.get("judge", "")})
              for c in record.get("claims", [])]
    return instance.model_copy(update={"units": units})


def claim_units_of(items: Sequence[Item], records: dict[str, dict[str, Any]]) -> list[Instance]:
    """Each item's instance with its generated answer as the response and its claims as units (items without a
    record keep theirs)."""
    out = []
    for item in items:
        inst = item.instance
        rec = records.get(item.id)
        if rec is not None:
            inst = with_claim_units(inst.model_copy(update={"response": _answer(item)}), rec)
        out.append(inst)
    return out
