"""Pair models that are an LLM asked one question about each (premise, hypothesis) pair in words, through the one
structured client (`haldet.backends.structured`): a local model (`HFBackend` of its name or path) or an
OpenAI-compatible endpoint (`base_url`). The reply text is read by the question's own rule into one value.

Questions (`QUESTIONS`, the pair-model kind is the question's name):
- "sentence_support" (SelfCheckGPT-Prompt, Manakul et al. 2023): premise = a sampled passage, hypothesis = one
  sentence of the answer; "is the sentence supported by the passage? Yes or No". Value: P(supported) read as the
  paper maps the reply: 1 for a reply starting "yes", 0 for one starting "no", 0.5 for anything else.
- "answer_correct" (an LLM judge of a panel): premise = the question (with its context), hypothesis = the
  answer; "is the answer correct? CORRECT, INCORRECT or UNSURE". Value: the hallucination score 0 / 1 / 0.5; a
  reply naming none of them is NaN (the judge abstains: `why(pair)` says so; it is asked again next time).

The model's `id` names the question and its wording version, the model and where it runs, so the pair cache
(`PairCache`) never answers one question or judge from another's replies. Wording is written for haldet.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.backends.openai_client import OPENAI_BASE_URL
from haldet.backends.structured import CallFailure, ClientSettings, Request, StructuredClient
from haldet.models.pairs.base import Pair, PairModel, keep_value, pair_id, unanswered


@dataclass(frozen=True)
class Question:
    """One question about a pair: `messages(premise, hypothesis)` builds the chat, `read(reply)` returns
    (value, "") or (None, why) when the reply answers nothing; bump `version` when the wording or reading changes."""

    name: str
    version: str
    column: str
    messages: Callable[[str, str], list[dict[str, str]]]
    read: Callable[[str], tuple[float | None, str]]
    max_tokens: int = 8


def _support_messages(passage: str, sentence: str) -> list[dict[str, str]]:
    text = (f"Passage: {passage}\n\nSentence: {sentence}\n\n"
            "Does the passage back up what the sentence says? Answer with one word, Yes or No.")
    return [{"role": "user", "content": text}]


def read_yes_no(reply: str) -> tuple[float | None, str]:
    """1.0 for a reply starting "yes", 0.0 for one starting "no" (case and surrounding blanks ignored), else 0.5:
    SelfCheckGPT-Prompt's mapping (its N/A)."""
    text = reply.strip().lower()
    if text.startswith("yes"):
        return 1.0, ""
    if text.startswith("no"):
        return 0.0, ""
    return 0.5, ""


def _judge_messages(question: str, answer: str) -> list[dict[str, str]]:
    text = (f"{question}\n\nProposed answer: {answer}\n\n"
            "Grade the proposed answer. Reply with exactly one word: CORRECT if it is right, INCORRECT if it is "
            "wrong, UNSURE if you cannot tell.")
    return [{"role": "user", "content": text}]


_INCORRECT = re.compile(r"\b(incorrect|not\s+correct|wrong)\b", re.IGNORECASE)
_UNSURE = re.compile(r"\b(unsure|not\s+sure|uncertain|cannot\s+tell)\b", re.IGNORECASE)
_CORRECT = re.compile(r"\bcorrect\b", re.IGNORECASE)


def read_grade(reply: str) -> tuple[float | None, str]:
    """Hallucination score of a judge's grade: INCORRECT 1.0, UNSURE 0.5, CORRECT 0.0 (checked in that order, so
    "incorrect" and "not correct" never read as CORRECT), or None when the reply names no grade."""
    if _INCORRECT.search(reply):
        return 1.0, ""
    if _UNSURE.search(reply):
        return 0.5, ""
    if _CORRECT.search(reply):
        return 0.0, ""
    return None, f"no CORRECT / INCORRECT / UNSURE grade in the reply ({reply[-80:]!r})"


QUESTIONS: dict[str, Question] = {q.name: q for q in (
    Question("sentence_support", "ss-v1", "supported", _support_messages, read_yes_no),
    Question("answer_correct", "ac-v1", "hallucinated", _judge_messages, read_grade),
)}


class PromptedPairs(PairModel):
    """An LLM asked `question` about each pair (see the module docstring); one column, NaN where the reply gives
    no value (`abstains`). A call that fails after its retries is an error naming the model: the pairs answered in
    earlier batches are already kept by the pair cache."""

    abstains = True

    def __init__(self, name: str, question: Question, *, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0, concurrency: int = 8,
                 retries: int = 4, batch_size: int = 8, **_: Any) -> None:
        self.kind = question.name
        super().__init__(name, batch_size=batch_size)
        self.question = question
        self.columns = (question.column,)
        self.remote = base_url is not None
        where = f"{question.name} model {name}" + (f" at {base_url or OPENAI_BASE_URL}" if self.remote else "")
        self.settings = ClientSettings(model=name, backend="openai" if self.remote else "hf", base_url=base_url,
                                       api_key_env=api_key_env, timeout=timeout, concurrency=max(1, int(concurrency)),
                                       retries=max(0, int(retries)), max_tokens=question.max_tokens, temperature=0.0,
                                       batch_size=max(1, int(batch_size)), count_prompt_tokens=False,
                                       option="detector_params (model, base_url)", where=where)
        self.client = StructuredClient(self.settings, correction=str)
        self.id = f"prompted-{question.name}-{question.version}:{name}" + (
            f"@{base_url or OPENAI_BASE_URL}" if self.remote else "")
        if self.remote:
            self.pairs_per_call = max(self.batch_size, 8 * self.settings.concurrency)
        self._why: dict[str, str] = {}

    def why(self, pair: Pair) -> str:
        return self._why.get(pair_id(*pair), "")

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        outcomes = self.client.ask([Request(self.question.messages(p, h), str) for p, h in pairs])
        failed = [o for o in outcomes if isinstance(o, CallFailure)]
        if failed:
            raise unanswered(self.settings.where, self.settings.option, len(failed), len(pairs), failed[-1].error)
        out = np.full((len(pairs), 1), np.nan)
        for row, (pair, outcome) in enumerate(zip(pairs, outcomes, strict=True)):
            assert not isinstance(outcome, CallFailure)
            value, why = self.question.read(outcome.text)
            keep_value(self._why, out, row, pair, value, why)
        return out
