"""Claim labels by verification against retrieved evidence: HalluLens's LongWiki procedure on any long answer.

For each claim, passages are retrieved from a knowledge source (`haldet.models.passages`: the pages are the items'
reference texts, each titled by the item's `meta.topic` (else its question); a claim searches its own item's page
and any page whose title its question names) by embedding similarity (MiniLM, HalluLens's choice) or BM25; then the
claim is **supported** by rule when its normalised text stands inside a retrieved passage, else by the LLM verifier's
reply to the `claim_verify` prompt (`haldet.judges.claim_verify`: the same reply model, prefill and rule as
HalluLens's LongWiki judge). Supported = correct, not supported = hallucination (FActScore's and HalluLens's reading:
what the knowledge source does not back is not supported). Each claim records in `meta.labels`: `source`
(`verify:<verifier id>` or `rule:in_passage`), `supported`, `reasoning`, the `evidence` passages (title and text),
`retrieval` and, where the data labelled it, `data_label`. A claim whose verification failed after retries keeps no
label (category invalid, `meta.labels.failed` naming the error) and is counted; it is never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from haldet.backends.structured import CallFailure, ClientSettings, Request, StructuredClient
from haldet.config import JudgeConfig
from haldet.errors import HaldetError
from haldet.judges.claim_verify import PREFILL, RULE_QUOTED, VerifyReply, quoted
from haldet.judges.json_reply import json_parser
from haldet.models.passages import PassageIndex, passage_index
from haldet.schema import LABEL_META, Category, Instance, SpanLabel
from haldet.suites.longform.nli_labels import reference_text
from haldet.text.templates import template_text

TEMPLATE = "claim_verify"
REPLY_TOKENS = 160


@dataclass(frozen=True)
class Page:
    title: str
    document: str


def page_title(instance: Instance) -> str:
    return str(instance.meta.get("topic") or instance.question or instance.id)


def pages_of(instances: Sequence[Instance]) -> list[Page]:
    """One page per distinct title: the items' reference texts (an item without one adds no page)."""
    pages: dict[str, str] = {}
    for inst in instances:
        text = reference_text(inst)
        if text.strip():
            pages.setdefault(page_title(inst), text)
    return [Page(t, d) for t, d in pages.items()]


def verifier_client(judge: JudgeConfig, *, cache: Path | None, local: Any = None) -> StructuredClient:
    """The structured client asking the verifier (the run's `judge` model: an endpoint, or a local hf model)."""
    if not judge.model:
        raise HaldetError("verifier labels need a verifier model", where="judge.model",
                          hint="set judge.model (an OpenAI-compatible model with judge.base_url, or judge.backend: "
                               "hf and a local model such as smollm2-135m); docs/longform.md")
    settings = ClientSettings.of_judge(judge, option="judge.model", where=f"claim verifier {judge.model}")
    return StructuredClient(settings, correction=lambda error: (
        f"That reply could not be read ({error}). Reply with the JSON object only."), cache=cache, local=local)


def claim_text(unit: SpanLabel) -> str:
    return str(unit.meta.get("claim") or unit.text).strip()


def verify_claims(instances: Sequence[Instance], *, client: StructuredClient, verifier_id: str,
                  index: PassageIndex | None = None, templates: dict[str, Any] | None = None,
                  level: str = "claim") -> tuple[list[Instance], dict[str, Any]]:
    """The instances with every unit of kind `level` labelled by retrieval + verification, and what ran (claims,
    by rule, asked, failed, retrieval). `index`: a passage index over the knowledge source (default: embedding
    retrieval over the items' reference texts)."""
    index = index if index is not None else passage_index("embedding", pages_of(instances))
    prompt = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined).from_string(
        template_text(TEMPLATE, templates))
    out = [inst.model_copy(update={"units": list(inst.units)}) for inst in instances]
    asked: list[tuple[int, int, list[Any]]] = []
    requests: list[Request[Any]] = []
    n_claims = n_rule = 0
    for i, inst in enumerate(out):
        for u, unit in enumerate(inst.units):
            if unit.kind != level:
                continue
            claim = claim_text(unit)
            passages = index.top(page_title(inst), inst.question, claim) if claim else []
            if not passages:
                continue  # no evidence to verify against: the claim keeps its label
            n_claims += 1
            if quoted(claim, passages):
                n_rule += 1
                _label(out[i], u, True, RULE_QUOTED, "", passages, index)
                continue
            asked.append((i, u, passages))
            requests.append(Request([{"role": "user", "content": prompt.render(claim=claim, passages=passages)
                                      .strip()}], json_parser(VerifyReply), prefill=PREFILL, max_tokens=REPLY_TOKENS))
    outcomes = client.ask(requests) if requests else []
    failed = 0
    for (i, u, passages), outcome in zip(asked, outcomes, strict=True):
        if isinstance(outcome, CallFailure):
            failed += 1
            _label(out[i], u, None, f"verify:{verifier_id}", f"{outcome.error} (after {outcome.attempts} attempts)",
                   passages, index)
        else:
            _label(out[i], u, outcome.value.supported, f"verify:{verifier_id}", outcome.value.reasoning, passages,
                   index)
    return out, {"verifier": verifier_id, "retrieval": index.method, "index": index.fingerprint(),
                 "claims": n_claims, "by_rule": n_rule, "asked": len(requests), "failed": failed}


def _label(inst: Instance, u: int, supported: bool | None, source: str, reasoning: str, passages: list[Any],
           index: PassageIndex) -> None:
    unit = inst.units[u]
    labels = dict(unit.meta.get(LABEL_META) or {})
    if unit.binary is not None and labels.get("source") == "data":
        labels["data_label"] = unit.binary
    labels.update({"source": source, "supported": supported, "retrieval": index.method,
                   "evidence": [{"title": p.title, "text": p.text} for p in passages]})
    labels["failed" if supported is None else "reasoning"] = reasoning
    category = (Category.INVALID if supported is None else
                Category.CORRECT if supported else Category.HALLUCINATION)
    inst.units[u] = unit.model_copy(update={"category": category, "meta": {**unit.meta, LABEL_META: labels}})
