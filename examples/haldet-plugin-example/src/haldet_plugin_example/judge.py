"""rule:example_exact: correct when the answer, trimmed and lower-cased, equals a reference."""

from __future__ import annotations

from haldet.judges.base import Judge, Undecided, Verdict
from haldet.schema import Category, Generation, Instance


class ExactMatch(Judge):
    version = 1

    def applies(self, instance: Instance) -> bool:
        return bool(instance.references)

    def judge(self, instance: Instance, generation: Generation) -> Verdict:
        answer = generation.response.strip().strip(".").lower()
        if not answer:
            return Undecided("empty answer")
        if any(answer == r.strip().lower() for r in instance.references):
            return self.label(instance, Category.CORRECT, "exact match with a reference")
        return self.label(instance, Category.HALLUCINATION, "no reference matches exactly")
