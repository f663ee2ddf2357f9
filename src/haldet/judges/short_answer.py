"""Rule judge for short and grounded answers: normalised alias match and token F1 against r+ and r-,
SQuAD v2 unanswerable questions, abstention detection.

Checks, in order:
1. empty response -> invalid;
2. SQuAD v2 unanswerable question (`meta["unanswerable"]`, no references): declining is the right answer
   (correct), anything else is made up (hallucination);
3. a refusal ("I don't know", "the passage doesn't say") -> abstention, unless it also states a reference;
4. an acceptable answer (alias) found as a phrase -> correct; a known wrong answer (r-) found -> hallucination;
   both found -> undecided (the answer lists several candidates); a match lying inside a longer match of the
   other side is not counted (r- "York" inside r+ "New York City"; r+ "Paris" inside the repeated r- sentence);
5. a hedge with nothing else ("I'm not sure.") -> abstention;
6. token F1 against r+ and r- (the question's own words left out: answers and sentence-long references both
   repeat them): the better side wins when it reaches `f1_threshold`; below it, a short-reference
   item is a hallucination (the answer matches no acceptable answer), a long-reference item (dialogue replies,
   free-text references) is undecided, since a paraphrase can be right with little word overlap.
Yes/no references compare the answer's leading yes/no, not any "no" anywhere in the text.
"""

from __future__ import annotations

from haldet.judges.base import Judge, Undecided, register
from haldet.judges.text import contains_phrase, find_phrase, is_abstention, is_refusal, normalize, token_f1, tokens
from haldet.schema import Category, Generation, Instance, Label

# rag/long_form/summarization references are whole responses: word overlap says little there (LLM judge)
SHORT_TASKS = {"short_answer", "grounded_qa", "span", "multi_hop", "dialogue", "qa"}
SHORT_REFERENCE_TOKENS = 8
_YES_NO = {"yes", "no"}


def is_unanswerable(instance: Instance) -> bool:
    return bool(instance.meta.get("unanswerable")) and not instance.references


@register("rule:short_answer")
class ShortAnswerJudge(Judge):
    version = 2

    def __init__(self, f1_threshold: float = 0.5) -> None:
        self.f1_threshold = f1_threshold

    def fingerprint(self) -> object:
        return [self.id, self.f1_threshold, SHORT_REFERENCE_TOKENS]

    def applies(self, instance: Instance) -> bool:
        if instance.task_type not in SHORT_TASKS or instance.options:
            return False
        return bool(instance.references) or is_unanswerable(instance)

    def judge(self, instance: Instance, generation: Generation) -> Label | Undecided:
        answer = generation.response.strip()

        def label(category: Category, reasoning: str) -> Label:
            return self.label(instance, category, reasoning)

        if not normalize(answer):
            return label(Category.INVALID, "empty response")
        if is_unanswerable(instance):
            if is_abstention(answer):
                return label(Category.CORRECT, "unanswerable question and the answer declines, as it should")
            return label(Category.HALLUCINATION, "unanswerable question, yet the answer states something")

        refs = [r for r in instance.references if normalize(r)]
        wrongs = [w for w in instance.incorrect if normalize(w)]
        if refs and all(normalize(r) in _YES_NO for r in refs):
            return self._yes_no(instance, answer, refs)
        found_pos = [r for r in refs if contains_phrase(answer, r)]
        found_neg = [w for w in wrongs if contains_phrase(answer, w)]
        # a match that only sits inside a longer match of the other side is part of that phrase, not a claim:
        # r+ "New York City" found, r- "York" inside it; or the answer repeats the sentence-long r- "X was born in
        # Paris", which merely contains r+ "Paris" (HaluEval's hallucinated answers do this)
        pos = [r for r in found_pos if not any(_inside(r, w) and not _inside(w, r) for w in found_neg)]
        neg = [w for w in found_neg if not any(_inside(w, r) and not _inside(r, w) for r in found_pos)]
        if is_refusal(answer):
            if pos:
                return Undecided(f"rule:short_answer: the answer declines yet mentions the reference {pos[0]!r}")
            return label(Category.ABSTENTION, "the answer declines to answer")
        if pos and neg:
            return Undecided(f"rule:short_answer: the answer mentions both the reference {pos[0]!r} and the "
                             f"known wrong answer {neg[0]!r}")
        if pos:
            return label(Category.CORRECT, f"answer contains the reference {pos[0]!r}")
        if neg:
            return label(Category.HALLUCINATION, f"answer contains the known wrong answer {neg[0]!r}")
        if is_abstention(answer):
            return label(Category.ABSTENTION, "the answer only expresses doubt")

        asked = set(tokens(instance.question))  # "The X is located in..." repeats the question: no evidence
        best_pos, ref = max((token_f1(answer, r, asked), r) for r in refs)
        best_neg, wrong = max(((token_f1(answer, w, asked), w) for w in wrongs), default=(0.0, ""))
        if max(best_pos, best_neg) >= self.f1_threshold:
            if best_pos > best_neg:
                return label(Category.CORRECT, f"token F1 {best_pos:.2f} with the reference {ref!r} "
                                               f"(vs {best_neg:.2f} with known wrong answers)")
            if best_neg > best_pos:
                return label(Category.HALLUCINATION, f"token F1 {best_neg:.2f} with the known wrong answer "
                                                     f"{wrong!r} (vs {best_pos:.2f} with the references)")
            return Undecided(f"rule:short_answer: token F1 ties ({best_pos:.2f}) between a reference and a "
                             "known wrong answer")
        if max(len(tokens(r)) for r in refs) <= SHORT_REFERENCE_TOKENS:
            return label(Category.HALLUCINATION,
                         f"no acceptable answer matched (best token F1 {best_pos:.2f} with {ref!r})")
        return Undecided(f"rule:short_answer: free-text reference and low word overlap (token F1 {best_pos:.2f}); "
                         "a paraphrase needs a semantic judge")

    def _yes_no(self, instance: Instance, answer: str, refs: list[str]) -> Label | Undecided:
        words = tokens(answer)
        said = next((w for w in words[:3] if w in _YES_NO), None)
        if said is None:
            if is_abstention(answer):
                return self.label(instance, Category.ABSTENTION, "the answer declines to answer")
            return Undecided("rule:short_answer: yes/no question and the answer does not start with yes or no")
        wanted = {normalize(r) for r in refs}
        category = Category.CORRECT if said in wanted else Category.HALLUCINATION
        return self.label(instance, category, f"the answer says {said!r}, the reference says "
                                              f"{'/'.join(sorted(wanted))!r}")


def _inside(wrong: str, ref: str) -> bool:
    """Whether the wrong answer's phrase lies within the reference (r+ 'New York City', r- 'York')."""
    return find_phrase(ref, wrong) >= 0
