"""Rule judge for math word problems and numeric science answers: final-number extraction and equality with a
tolerance. References are number strings (GSM8K `####` answers, SVAMP, TheoremQA numeric answers).

The final answer comes from the response's own conclusion, in order of preference: the last `\\boxed{...}`, a
GSM8K-style `#### x`, the number after the last "answer is" / "Answer:" / "final answer" marker, else the result
stated by the concluding sentence (the last sentence holding a number): the number after its last "=", else its
last number that is not one of the question's own quantities ("approximately 10.12 hours to cover the same
distance of 480 miles" states 10.12; 480 restates the question). A concluding sentence that only restates the
question's quantities is passed over for the sentence before it; a response that only restates them states no
result: undecided. When the response was cut off by the token limit and has no
explicit marker, its last number is a step of unfinished reasoning, not an answer, so the judge does not decide.
"""

from __future__ import annotations

import math
import re

from haldet.judges.base import Judge, Undecided, register
from haldet.judges.text import as_number, clean_numbers, fold, is_abstention, normalize, numbers_in, parse_number
from haldet.schema import Category, Generation, Instance, Label

MATH_TASKS = {"reasoning", "math", "science"}
_MARKER = re.compile(r"\b(?:final answer|the answer|answer)\b\s*(?:is|would be|will be|should be)?\s*[:=]?",
                     re.IGNORECASE)
_TRUE = {"true", "yes", "correct"}
_FALSE = {"false", "no", "incorrect"}


def _boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (balanced braces), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i]
    return None


def final_number(text: str, *, truncated: bool = False, question: str = "") -> tuple[float | None, str]:
    """(value, how it was found) of a response's final answer; (None, why) when there is none. `question`: the
    problem text, whose quantities a concluding sentence may restate without stating them as its result."""
    boxed = _boxed(text)
    if boxed is not None:
        value = parse_number(boxed)
        return (value, "\\boxed{}") if value is not None else (None, f"\\boxed{{{boxed}}} holds no number")
    hashes = text.rfind("####")
    if hashes >= 0:
        nums = numbers_in(text[hashes + 4 :])
        if nums:
            return nums[0], "#### marker"
    cleaned = clean_numbers(text)
    markers = list(_MARKER.finditer(cleaned))
    for marker in reversed(markers):
        segment = re.split(r"\n|\.\s", cleaned[marker.end() : marker.end() + 120], maxsplit=1)[0]
        nums = numbers_in(segment)
        if nums:  # "The answer is 3 + 5 = 8": the result of an equation is its last number
            return (nums[-1] if "=" in segment else nums[0]), f"after {marker.group(0).strip()!r}"
    if truncated:
        return None, "the response was cut off by the token limit before stating a final answer"
    return concluding_result(cleaned, question)


_SENTENCE_END = re.compile(r"[.!?](?!\d)\s*|\n+")


def concluding_result(cleaned: str, question: str) -> tuple[float | None, str]:
    """The last result the response states: the last number of its concluding sentence that does not restate a
    quantity of the question ("so 72 altogether", "5 + 3 = 8 apples"); a closing sentence that only restates the
    question's quantities ("This is because she needed $100.") is passed over for the one before it."""
    sentences = [s for s in _SENTENCE_END.split(cleaned) if numbers_in(s)]
    if not sentences:
        return None, "no number in the response"
    given = numbers_in(clean_numbers(question))
    for back, sentence in enumerate(reversed(sentences)):
        own = [v for v in numbers_in(sentence)
               if not any(math.isclose(v, q, rel_tol=1e-9, abs_tol=1e-9) for q in given)]
        if own:
            where = "the concluding sentence" if back == 0 else "the last sentence stating a result"
            return own[-1], f"result stated by {where}"
    return None, (f"the response only restates the question's quantities ({sentences[-1].strip()[:80]!r}) and "
                  "states no result")


def _truth_ref(text: str) -> bool | None:
    """A reference that is exactly a truth value ("True", "no"), else None."""
    word = normalize(text)
    return True if word in _TRUE else False if word in _FALSE else None


def _truth_value(text: str) -> bool | None:
    words = normalize(text).split()
    if not words:
        return None
    last = [w for w in words if w in _TRUE | _FALSE]
    return None if not last else last[-1] in _TRUE


@register("rule:math")
class MathJudge(Judge):
    """Numeric equality of the final answer with any reference (relative tolerance `rel_tol`, absolute 1e-6;
    a percentage also matches its fraction: 50% == 0.5). True/False references compare the last truth word."""

    version = 2  # 2: the final answer from the concluding sentence, not the last number

    def __init__(self, rel_tol: float = 1e-4) -> None:
        self.rel_tol = rel_tol

    def fingerprint(self) -> object:
        return [self.id, self.rel_tol]

    def applies(self, instance: Instance) -> bool:
        if instance.task_type not in MATH_TASKS or instance.options or not instance.references:
            return False
        refs = instance.references
        return all(as_number(r) is not None for r in refs) or all(_truth_ref(r) is not None for r in refs)

    def judge(self, instance: Instance, generation: Generation) -> Label | Undecided:
        answer = generation.response.strip()
        if not answer:
            return self.label(instance, Category.INVALID, "empty response")
        refs = instance.references
        if all(as_number(r) is None for r in refs):
            return self._judge_truth(instance, answer)
        truncated = generation.finish_reason == "length"
        value, how = final_number(answer, truncated=truncated, question=instance.question)
        if value is None:
            if is_abstention(answer):
                return self.label(instance, Category.ABSTENTION, "the answer declines to give a result")
            return Undecided(f"rule:math: {how}")
        targets = [v for v in (as_number(r) for r in refs) if v is not None]
        for target in targets:
            if self._close(value, target) or ("%" in fold(answer) and self._close(value / 100, target)):
                return self.label(instance, Category.CORRECT,
                                  f"final answer {_fmt(value)} ({how}) equals the reference {_fmt(target)}")
        return self.label(instance, Category.HALLUCINATION,
                          f"final answer {_fmt(value)} ({how}) differs from the reference "
                          f"{', '.join(_fmt(t) for t in targets)}")

    def _close(self, a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=self.rel_tol, abs_tol=1e-6)

    def _judge_truth(self, instance: Instance, answer: str) -> Label | Undecided:
        said = _truth_value(answer)
        wanted = _truth_ref(instance.references[0])
        if said is None:
            if is_abstention(answer):
                return self.label(instance, Category.ABSTENTION, "the answer declines to give a result")
            return Undecided("rule:math: no true/false verdict in the response")
        category = Category.CORRECT if said == wanted else Category.HALLUCINATION
        return self.label(instance, category, f"the answer says {said}, the reference says {wanted}")


def _fmt(value: float) -> str:
    return str(int(value)) if math.isfinite(value) and value == int(value) and abs(value) < 1e15 else f"{value:g}"


__all__ = ["MathJudge", "clean_numbers", "final_number"]
