"""Rule judge for short and grounded answers: normalised match against r+ and r-, abstention detection."""

from __future__ import annotations

from haldet.judges.base import Judge, register
from haldet.judges.text import contains_phrase, is_abstention, token_f1
from haldet.schema import Category, Generation, Instance, Label

SHORT_TASKS = {"short_answer", "grounded_qa", "span", "multi_hop", "dialogue", "rag", "long_form"}


@register("rule:short_answer")
class ShortAnswerJudge(Judge):
    """Order of checks: empty -> invalid; a reference phrase in the answer -> correct; declines -> abstention;
    a known wrong answer matched (phrase or token F1 >= f1_threshold) -> hallucination; otherwise the best
    token F1 against r+ decides (>= f1_threshold correct, else hallucination)."""

    f1_threshold = 0.5

    def applies(self, instance: Instance) -> bool:
        return instance.task_type in SHORT_TASKS and bool(instance.references)

    def judge(self, instance: Instance, generation: Generation) -> Label | None:
        answer = generation.response.strip()

        def label(category: Category, reasoning: str) -> Label:
            return Label(id=instance.id, category=category, reasoning=reasoning, judge=self.id)

        if not answer:
            return label(Category.INVALID, "empty response")
        for ref in instance.references:
            if contains_phrase(answer, ref):
                return label(Category.CORRECT, f"answer contains the reference {ref!r}")
        if is_abstention(answer):
            return label(Category.ABSTENTION, "the answer declines to answer")
        for wrong in instance.incorrect:
            if contains_phrase(answer, wrong) or token_f1(answer, wrong) >= self.f1_threshold:
                return label(Category.HALLUCINATION, f"answer matches the known wrong answer {wrong!r}")
        best = max(token_f1(answer, ref) for ref in instance.references)
        if best >= self.f1_threshold:
            return label(Category.CORRECT, f"token F1 {best:.2f} against the references")
        return label(Category.HALLUCINATION, f"no reference matched (best token F1 {best:.2f})")
