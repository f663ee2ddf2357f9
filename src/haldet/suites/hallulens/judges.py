"""HalluLens judges: rule judges first where they decide, the LLM (structured replies, own prompts) for the rest
(`mode: cascade`, the default), or the LLM alone for every decision (`mode: llm`, the paper's protocol: no rule
decides anything, `--judges llm`).

Per task, a judgement record per answered item:
- PreciseWikiQA / proxy: `abstained` (rule: a refusal phrase or an empty reply; the gold answer stated -> not
  abstained; LLM otherwise), then for non-abstained items `verdict` CORRECT / INCORRECT / UNVERIFIABLE (rule:
  the gold answer found as a normalised phrase -> CORRECT; LLM otherwise).
- NonExistentRefusal: `believes` (rule: a refusal phrase -> does not believe; LLM otherwise). Acceptance of a
  non-existent entity is the hallucination; a refusal is the right behaviour.
- LongWiki: `abstained` as above; for answers, sentences (spaCy, with character offsets), claims per sentence
  (LLM), top-5 passages per claim (`PassageIndex`), `supported` per claim (rule: the claim's normalised text
  inside a passage -> supported; LLM otherwise).
A step that neither a rule nor the LLM decides (no LLM configured, or every attempt failed) leaves the item
without that judgement: the failure is listed with its step and error, and the item is left out of the rates.
Each decision records who made it (`rule:...` or the LLM's id).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from haldet.backends.structured import CallFailure, Request
from haldet.judges.claim_verify import PREFILL as VERIFY_PREFILL
from haldet.judges.claim_verify import RULE_QUOTED, VerifyReply, quoted
from haldet.judges.json_reply import json_parser
from haldet.judges.text import contains_phrase, is_refusal, normalize
from haldet.models.passages import PassageIndex
from haldet.suites.hallulens.build import Item
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import (
    AbstentionReply,
    BeliefReply,
    ClaimsReply,
    Prompts,
    parse_correctness,
)
from haldet.text.sentences import split_sentences

RULE_REFUSAL = "rule:refusal"
RULE_EMPTY = "rule:empty"
RULE_GOLD = "rule:gold_match"
MIN_SENTENCE_CHARS = 5
JUDGE_VERSION = 2
JUDGE_MODES = ("cascade", "llm")
# reply openings forced on local models: the decision first, so a reply cut by the token budget has stated it
PREFILL = {"abstention": '{"abstains": ', "correctness": '{"verdict": "', "belief": '{"believes": ',
           "verify": VERIFY_PREFILL}


@dataclass
class Judgement:
    """Judged items (id -> record) and the steps that failed (listed, never labels)."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, item_id: str, step: str, error: str, attempts: int = 0) -> None:
        self.failures.append({"id": item_id, "step": step, "error": error, "attempts": attempts})
        self.records.pop(item_id, None)


def sentence_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, sentence) with character offsets into `text` (sentences found in order)."""
    out, pos = [], 0
    for sent in split_sentences(text):
        start = text.find(sent, pos)
        if start < 0:
            continue
        out.append((start, start + len(sent), sent))
        pos = start + len(sent)
    return out


def refuses(text: str, task: str) -> bool:
    """The refusal rule. Short answers (PreciseWikiQA, proxy): a refusal phrase anywhere. Long answers (LongWiki,
    NonExistentRefusal descriptions): only an opening refusal ("I couldn't find any information on X. ..."); a
    refusal phrase later on ("X is a beetle. I cannot confirm its range.") is a hedge inside an answer, left to
    the LLM judge."""
    if task in ("precisewikiqa", "proxy_qa"):
        return is_refusal(text)
    spans = sentence_spans(text)
    return bool(spans) and is_refusal(spans[0][2])


class HalluLensJudges:
    """All HalluLens judgements. `llm` may be None: then only the rule judges decide and the rest is listed."""

    def __init__(self, llm: StructuredLLM | None, prompts: Prompts, index: PassageIndex | None = None,
                 progress: Callable[[str, int], Callable[[int], None]] | None = None, mode: str = "cascade") -> None:
        if mode not in JUDGE_MODES:
            raise ValueError(f"HalluLens judges mode {mode!r}: one of {', '.join(JUDGE_MODES)}")
        self.mode = mode
        self.rules = mode == "cascade"  # rule judges decide first; `llm`: every decision is the LLM's
        self.llm = llm
        self.prompts = prompts
        self.index = index
        self.progress = progress  # (description, total) -> advance(n), one bar per judge step

    def fingerprint(self) -> list[Any]:
        return ["hallulens-judges", JUDGE_VERSION, self.llm.fingerprint() if self.llm else None, self.prompts.digest,
                self.index.fingerprint() if self.index else None, *([self.mode] if self.mode != "cascade" else [])]

    def _ask(self, out: Judgement, step: str, jobs: Sequence[tuple[str, Any, Request[Any]]],
             apply: Callable[[str, Any, Any], None]) -> None:
        """Ask the LLM for each (item id, position, request); a failure fails its whole item (listed), the
        parsed values of the items still standing are applied with their position."""
        if not jobs:
            return
        if self.llm is None:
            for item_id, _, _ in jobs:
                out.fail(item_id, step, "no LLM judge configured and no rule decides this item")
            return
        bar = self.progress(f"judge {step} [{self.llm.id}]", len(jobs)) if self.progress else None
        results = self.llm.ask([r for _, _, r in jobs], bar)
        for (item_id, _, _), res in zip(jobs, results, strict=True):
            if isinstance(res, CallFailure):
                out.fail(item_id, step, res.error, res.attempts)
        for (item_id, pos, _), res in zip(jobs, results, strict=True):
            if not isinstance(res, CallFailure) and item_id in out.records:
                apply(item_id, pos, res.value)

    def judge(self, items: Sequence[Item], responses: dict[str, str]) -> Judgement:
        """Judge every item that has a response (items of one task)."""
        out = Judgement()
        todo = [it for it in items if it.id in responses]
        if not todo:
            return out
        task = todo[0].task
        for it in todo:
            out.records[it.id] = {"id": it.id, "task": it.task}
        if task == "nonexistent":
            self._belief(out, todo, responses)
            return out
        self._abstention(out, todo, responses)
        if task == "longwiki":
            self._claims(out, todo, responses)
        else:
            self._correctness(out, todo, responses)
        return out

    # --- steps ------------------------------------------------------------------------------------------------
    def _abstention(self, out: Judgement, items: Sequence[Item], responses: dict[str, str]) -> None:
        jobs = []
        for it in items:
            rec, text = out.records[it.id], responses[it.id]
            if self.rules:  # the cascade: an empty reply, a refusal phrase, the gold answer stated decide first
                states_gold = it.task != "longwiki" and bool(it.answer) and contains_phrase(text, it.answer)
                if not normalize(text):
                    rec.update(abstained=True, abstained_by=RULE_EMPTY)
                elif refuses(text, it.task) and not states_gold:
                    rec.update(abstained=True, abstained_by=RULE_REFUSAL)
                elif states_gold:
                    rec.update(abstained=False, abstained_by=RULE_GOLD)
            if "abstained" not in rec:
                jobs.append((it.id, None, self.prompts.request(
                    "abstention", json_parser(AbstentionReply), PREFILL["abstention"],
                    question=it.prompt, response=text)))

        def apply(item_id: str, _: Any, value: AbstentionReply) -> None:
            assert self.llm is not None
            out.records[item_id].update(abstained=value.abstains, abstained_by=self.llm.id,
                                        abstention_reasoning=value.reasoning)

        self._ask(out, "abstention", jobs, apply)

    def _correctness(self, out: Judgement, items: Sequence[Item], responses: dict[str, str]) -> None:
        jobs = []
        for it in items:
            rec = out.records.get(it.id)
            if rec is None or rec.get("abstained") is not False:
                continue
            text = responses[it.id]
            if self.rules and contains_phrase(text, it.answer):
                rec.update(verdict="CORRECT", verdict_by=RULE_GOLD)
            else:
                jobs.append((it.id, None, self.prompts.request(
                    "correctness", parse_correctness, PREFILL["correctness"], question=it.prompt, gold=it.answer,
                    response=text)))

        def apply(item_id: str, _: Any, value: Any) -> None:
            assert self.llm is not None
            out.records[item_id].update(verdict=value.verdict, verdict_by=self.llm.id,
                                        verdict_reasoning=value.reasoning)

        self._ask(out, "correctness", jobs, apply)

    def _belief(self, out: Judgement, items: Sequence[Item], responses: dict[str, str]) -> None:
        jobs = []
        for it in items:
            text = responses[it.id]
            rec = out.records[it.id]
            if self.rules and not normalize(text):
                rec.update(believes=False, believes_by=RULE_EMPTY)
            elif self.rules and refuses(text, it.task):
                rec.update(believes=False, believes_by=RULE_REFUSAL)
            else:
                jobs.append((it.id, None, self.prompts.request(
                    "belief", json_parser(BeliefReply), PREFILL["belief"], name=it.name,
                    type=it.type, question=it.prompt, response=text)))

        def apply(item_id: str, _: Any, value: BeliefReply) -> None:
            assert self.llm is not None
            out.records[item_id].update(believes=value.believes, believes_by=self.llm.id,
                                        belief_reasoning=value.reasoning)

        self._ask(out, "belief", jobs, apply)

    def _claims(self, out: Judgement, items: Sequence[Item], responses: dict[str, str]) -> None:
        by_id = {it.id: it for it in items}
        jobs = []
        for it in items:
            rec = out.records.get(it.id)
            if rec is None or rec.get("abstained") is not False:
                continue
            spans = sentence_spans(responses[it.id])
            rec["sentences"] = [{"start": s, "end": e, "text": t, "claims": []} for s, e, t in spans]
            for k, (_, _, sent) in enumerate(spans):
                if len(sent) < MIN_SENTENCE_CHARS:
                    continue
                context = " ".join(t for _, _, t in spans[max(0, k - 3):k + 2])
                jobs.append((it.id, k, self.prompts.request(
                    "claims", json_parser(ClaimsReply), '{"claims": [', question=it.prompt, context=context,
                    sentence=sent)))

        def apply_claims(item_id: str, k: int, reply: ClaimsReply) -> None:
            seen: set[str] = set()
            for claim in reply.claims:
                text = " ".join(str(claim).split())
                if text and text.lower() not in seen:
                    seen.add(text.lower())
                    out.records[item_id]["sentences"][k]["claims"].append({"text": text})

        self._ask(out, "claims", jobs, apply_claims)
        verify = []
        for item_id, rec in list(out.records.items()):
            for k, sent in enumerate(rec.get("sentences", [])):
                for j, claim in enumerate(sent["claims"]):
                    it = by_id[item_id]
                    passages = self.index.top(it.title, it.prompt, claim["text"]) if self.index else []
                    claim["passages"] = [p.title for p in passages]
                    if self.rules and quoted(claim["text"], passages):
                        claim.update(supported=True, supported_by=RULE_QUOTED)
                        continue
                    verify.append((item_id, (k, j), self.prompts.request(
                        "verify", json_parser(VerifyReply), PREFILL["verify"], passages=passages,
                        claim=claim["text"])))

        def apply_verify(item_id: str, pos: tuple[int, int], reply: VerifyReply) -> None:
            k, j = pos
            assert self.llm is not None
            out.records[item_id]["sentences"][k]["claims"][j].update(
                supported=reply.supported, supported_by=self.llm.id, reasoning=reply.reasoning)

        self._ask(out, "verify", verify, apply_verify)
