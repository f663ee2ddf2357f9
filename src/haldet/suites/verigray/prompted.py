"""VeriGray's prompted fine-tuned verifiers (paper section 5.1, "Fine-tuned LLMs"), asked once per summary sentence
by the `verdict` stage: through the run's model (`--model PatronusAI/Llama-3-Patronus-Lynx-8B-Instruct-v1.1`, a
local path, ...) or an OpenAI-compatible endpoint serving it (`verdict.model` / `verdict.base_url`). The verdict
records name the model that answered (`judge`), and the detectors' scores are keyed by it.

- `lynx` (Lynx, Ravi et al. 2024), in the layout Lynx was trained on: one user turn, the instructions first, then
  QUESTION, DOCUMENT and ANSWER (the sentence) as sections between "--" lines, and last the JSON reply format
  {"REASONING": bullet points, "SCORE": "PASS" | "FAIL"} (`verigray_lynx`). Read robustly: the JSON object (also
  inside a code fence or with single quotes), else a `SCORE: X` line, else the last standalone PASS / FAIL word.
  FAIL = Unfaithful (score 1), PASS = 0.
- `anah_v2` (ANAH-v2, Gu et al. 2024), as its annotator was trained to work: a dialogue of up to three user turns
  about the sentence (the "partial answer") and the item's question: (1) does it state checkable facts ("<No
  Facts>" ends it: No Fact; `verigray_anah_facts`); (2) the related information from the reference document,
  pieces separated by <SEP> ("<No Reference Information>" ends it: Unverifiable; `verigray_anah_reference`);
  (3) the hallucination type given those reference points: <No Hallucination>, <Contradictory> or <Unverifiable>
  (`verigray_anah_verdict`). Three-way (+ No Fact), as the paper uses it; protocol 1's merge: Contradictory and
  Unverifiable = Unfaithful. Scores order the labels for the ranking metrics: No Hallucination 0, No Fact 1,
  Unverifiable 2, Contradictory 3; `decision_threshold` 1.5. Every turn's reply is in the verdict record.

A reply that states none of the labels is unparsable: label None with the reason, and the sentence scores NaN with
it, never a guessed verdict. Reasoning models' <think> blocks are ignored.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jinja2

from haldet.detectors.base import register
from haldet.schema import Instance, SpanLabel
from haldet.stages.verdict_prompts import Ask, Example, VerdictPrompt, register_prompt
from haldet.suites.verigray.verigray_llm import SentenceVerdicts

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_OBJECT = re.compile(r"\{[^{}]*\}", re.S)
_SCORE_LINE = re.compile(r"[\"']?score[\"']?\s*[:=]\s*[\"']?\s*(pass|fail)\b", re.I)
_WORD = re.compile(r"(?<![A-Za-z])(PASS|FAIL)(?![A-Za-z])")
PASS, FAIL = "PASS", "FAIL"
NO_HALLU, NO_FACT, UNVERIFIABLE, CONTRADICTORY = "No Hallucination", "No Fact", "Unverifiable", "Contradictory"
_TAG = re.compile(r"<\s*hallucination\s*>\W*(none|no|contradictory|contradiction|unverifiable)\b", re.I)
_NO_FACT_TAG = re.compile(r"<\s*no[\s_-]*facts?\s*>", re.I)
_NO_REFERENCE = re.compile(r"no[\s_-]*reference[\s_-]*information", re.I)
_ANAH = [(re.compile(r"<\s*no[\s_-]*facts?\s*>|\bno[\s_-]*facts?\b", re.I), NO_FACT),
         (_NO_REFERENCE, UNVERIFIABLE),
         (re.compile(r"<\s*hallucination\s*>\s*[:\-]?\s*(none|no\b)|\bno[\s_-]*hallucination\b", re.I), NO_HALLU),
         (re.compile(r"\bcontradict(ory|ion|ed|s)?\b", re.I), CONTRADICTORY),
         (re.compile(r"\bunverifiable\b|\bcannot be verified\b", re.I), UNVERIFIABLE)]


def _body(reply: str) -> str:
    return _THINK.sub(" ", reply or "").strip()


def _render(text: str, **fields: str) -> list[dict[str, str]]:
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    return [{"role": "user", "content": env.from_string(text).render(**{k: v.strip() for k, v in fields.items()})
             .strip()}]


def _sentence(response: str, unit: SpanLabel | None) -> str:
    return response if unit is None else (unit.text or response[unit.start:unit.end])


def parse_lynx(reply: str) -> tuple[str | None, str]:
    """("PASS" | "FAIL", "") or (None, why)."""
    body = _body(reply)
    if not body:
        return None, "unparsable reply: empty"
    for blob in reversed(_OBJECT.findall(body)):
        for loads in (json.loads, ast.literal_eval):
            try:
                obj: Any = loads(blob)
            except (ValueError, SyntaxError):
                continue
            if isinstance(obj, dict):
                value = next((str(v).strip().upper() for k, v in obj.items() if str(k).lower() == "score"), "")
                if value in (PASS, FAIL):
                    return value, ""
    lines = _SCORE_LINE.findall(body)
    if lines:
        return lines[-1].upper(), ""
    words = _WORD.findall(body)
    if words:
        return words[-1], ""
    return None, f"unparsable reply (no PASS or FAIL): {body[:160]!r}"


def parse_anah(reply: str) -> tuple[str | None, str]:
    """(one of the four labels, "") or (None, why) from the dialogue's last reply: the last "<Hallucination> X"
    tag, else a "<No Facts>" tag, else the label named last ("<No Reference Information>" = Unverifiable)."""
    body = _body(reply)
    tags = _TAG.findall(body)
    if tags:
        word = tags[-1].lower()
        return (NO_HALLU if word in ("none", "no") else CONTRADICTORY if word.startswith("contradict")
                else UNVERIFIABLE), ""
    if _NO_FACT_TAG.search(body):
        return NO_FACT, ""
    found = [(m.start(), label) for pattern, label in _ANAH for m in pattern.finditer(body)]
    if not found:
        return None, f"unparsable reply (no annotation label): {body[:160]!r}"
    return max(found)[1], ""


def _lynx_messages(instance: Instance, response: str, examples: Sequence[Example], unit: SpanLabel | None,
                   texts: Mapping[str, str]) -> list[dict[str, str]]:
    return _render(texts["verigray_lynx"], question=instance.question or "", document=instance.context or "",
                   sentence=_sentence(response, unit))


def _anah_fields(instance: Instance, response: str, unit: SpanLabel | None) -> dict[str, str]:
    return {"question": instance.question or instance.instruction or "", "sentence": _sentence(response, unit),
            "document": instance.context or instance.question or ""}


def _anah_messages(instance: Instance, response: str, examples: Sequence[Example], unit: SpanLabel | None,
                   texts: Mapping[str, str]) -> list[dict[str, str]]:
    """ANAH-v2's first turn: does the sentence state checkable facts?"""
    return _render(texts["verigray_anah_facts"], **_anah_fields(instance, response, unit))


def _anah_follow(instance: Instance, response: str, unit: SpanLabel | None, texts: Mapping[str, str],
                 replies: Sequence[str]) -> str | None:
    """ANAH-v2's next turn after `replies`: the reference extraction after facts were found, the hallucination
    type given the extracted reference points; None once the dialogue has its answer ("<No Facts>", "<No
    Reference Information>", or the type)."""
    fields = _anah_fields(instance, response, unit)
    last = _body(replies[-1])
    if len(replies) == 1:
        return None if _NO_FACT_TAG.search(last) else _render(texts["verigray_anah_reference"], **fields)[0]["content"]
    if len(replies) == 2 and not _NO_REFERENCE.search(last):
        return _render(texts["verigray_anah_verdict"], **fields, reference=last)[0]["content"]
    return None


LYNX = register_prompt(VerdictPrompt(
    name="verigray_lynx", version="lynx-v2", labels=(PASS, FAIL), scores={PASS: 0.0, FAIL: 1.0},
    messages=_lynx_messages, parse=parse_lynx, max_new_tokens=384, level="sentence", templates=("verigray_lynx",)))
ANAH = register_prompt(VerdictPrompt(
    name="verigray_anah", version="anah-v2", labels=(NO_HALLU, NO_FACT, UNVERIFIABLE, CONTRADICTORY),
    scores={NO_HALLU: 0.0, NO_FACT: 1.0, UNVERIFIABLE: 2.0, CONTRADICTORY: 3.0}, messages=_anah_messages,
    parse=parse_anah, max_new_tokens=512, level="sentence", follow=_anah_follow, max_turns=3,
    templates=("verigray_anah_facts", "verigray_anah_reference", "verigray_anah_verdict")))


@register("lynx")
class Lynx(SentenceVerdicts):
    """Lynx-style PASS/FAIL faithfulness verifier per sentence; see the module docstring."""
    method_family = "judges and verifiers"
    paper = "Ravi et al. 2024, Lynx: an open source hallucination evaluation model"
    peers = ()

    version = "1"
    decision_threshold: ClassVar[float] = 0.5  # FAIL = Unfaithful
    prompt = LYNX
    ask = Ask(LYNX.name)


@register("anah_v2")
class AnahV2(SentenceVerdicts):
    """ANAH-v2-style sentence annotator (None / Contradictory / Unverifiable, or No Fact); see the module docstring."""
    method_family = "judges and verifiers"
    paper = "Gu et al. 2024, ANAH-v2: scaling analytical hallucination annotation of LLMs"
    peers = ()

    version = "1"
    decision_threshold: ClassVar[float] = 1.5  # Unverifiable or Contradictory = Unfaithful
    prompt = ANAH
    ask = Ask(ANAH.name)
