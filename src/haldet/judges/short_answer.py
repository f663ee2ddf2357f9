"""Rule judge for short and grounded answers: normalised alias match and token F1 against r+ and r-,
SQuAD v2 unanswerable questions, abstention detection.

Checks, in order:
1. empty response -> invalid;
2. SQuAD v2 unanswerable question (`meta["unanswerable"]`, no references): declining is the right answer
   (correct), anything else is made up (hallucination);
3. a refusal ("I don't know", "the passage doesn't say") -> abstention, unless it also states a reference;
4. an acceptable answer (alias) found as a phrase -> correct, unless the answer also states names or numbers that
   neither the question, the context nor any reference holds (the gold plus invented facts: undecided, with
   them named); a known wrong answer (r-) found -> hallucination; both found -> undecided (the answer lists
   several candidates); a match lying inside a longer match of the other side is not counted (r- "York" inside
   r+ "New York City"; r+ "Paris" inside the repeated r- sentence);
5. a hedge with nothing else ("I'm not sure.") -> abstention;
6. token F1 against r+ and r- (the question's own words left out: answers and sentence-long references both
   repeat them, but negation words are always kept): the better side wins when it reaches `f1_threshold`
   (a win for r+ is checked for invented names and numbers as in 4); below it the item is undecided, whatever
   the references' length: low word overlap says nothing by itself (a paraphrase, "died in Hastings" for
   "Battle of Hastings"), so the next judge (`rule:reference_similarity`, then the LLM judge) gets it.
Polarity is respected throughout: a phrase match preceded by a negation ("not Paris", "it's a myth that X") is
no match, and a reference whose polarity differs from the answer's (one says "not", the other does not) is
evidence for the other side when the words otherwise overlap: "Turkey is a member of the European Union"
contradicts r+ "It's not true that Turkey is part of the European Union" and is a hallucination.
Yes/no references compare the answer's leading yes/no, not any "no" anywhere in the text.
"""

from __future__ import annotations

import math
import re

from haldet.judges.base import Judge, Undecided, register
from haldet.judges.text import (
    NEGATORS,
    find_phrase,
    fold,
    is_abstention,
    is_refusal,
    negated,
    normalize,
    numbers_in,
    token_f1,
    tokens,
)
from haldet.schema import Category, Generation, Instance, Label

# rag/long_form/summarization references are whole responses: word overlap says little there (LLM judge)
SHORT_TASKS = {"short_answer", "grounded_qa", "span", "multi_hop", "dialogue", "qa"}
FUNCTION_WORDS = frozenset({"in", "on", "at", "of", "to", "for", "by", "with", "from", "into", "and", "or", "it",
                            "its", "is", "are", "was", "were", "be", "been", "that", "this", "there", "they", "he",
                            "she", "his", "her", "their"})
INVENTED_SPECIFICS = 2  # unsupported names/numbers beside a matched gold answer that make it undecided
YES_NO = {"yes", "no"}
_FRAMING = {"it", "its", "that", "this", "true", "actually", "fact", "in", "indeed", "common", "popular", "is", "are"}


def is_unanswerable(instance: Instance) -> bool:
    return bool(instance.meta.get("unanswerable")) and not instance.references


@register("rule:short_answer")
class ShortAnswerJudge(Judge):
    version = 4

    def __init__(self, f1_threshold: float = 0.5) -> None:
        self.f1_threshold = f1_threshold

    def fingerprint(self) -> object:
        return [self.id, self.f1_threshold, INVENTED_SPECIFICS]

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
        if refs and all(normalize(r) in YES_NO for r in refs):
            return self._yes_no(instance, answer, refs)
        found_pos = [r for r in refs if affirms(answer, r)]
        found_neg = [w for w in wrongs if affirms(answer, w)]
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
            return self._gold_only(instance, answer, pos[0], f"answer contains the reference {pos[0]!r}")
        if neg:
            return label(Category.HALLUCINATION, f"answer contains the known wrong answer {neg[0]!r}")
        if is_abstention(answer):
            return label(Category.ABSTENTION, "the answer only expresses doubt")

        # "The X is located in..." repeats the question: no evidence; negations always are
        # function words ("in", "it") carry no evidence either: "In the mitochondria." shares only "in" with "in
        # the chloroplasts"
        question = set(tokens(instance.question)) - NEGATORS
        asked = question | FUNCTION_WORDS
        polarity = negated(answer)
        stated = numbers_in(answer)
        support: dict[bool, tuple[float, str, str]] = {True: (0.0, "", ""), False: (0.0, "", "")}
        for text, is_ref in [(r, True) for r in refs] + [(w, False) for w in wrongs]:
            if not _content(text, asked):
                continue  # "Turkey is in the EU" for "Why is Turkey in the EU?": only its polarity says anything
            if _other_numbers(stated, numbers_in(text)):
                continue  # "300 metres" shares a word with "330 metres", not the fact
            same = negated(text) == polarity
            kind = "reference" if is_ref else "known wrong answer"
            if same:  # overlap supports that side
                f1 = token_f1(answer, text, asked)
                side, how = is_ref, f"token F1 {f1:.2f} with the {kind} {text!r}"
            else:  # the same words with the opposite polarity: the answer contradicts it (function words count
                # here: sharing only a name with "X did not compose any opera" contradicts nothing)
                f1 = token_f1(answer, text, question | NEGATORS | YES_NO)
                side, how = not is_ref, f"the answer negates the {kind} {text!r} (token F1 {f1:.2f} besides that)"
            if f1 > support[side][0]:
                support[side] = (f1, text, how)
        restated = _polarity_only(answer, asked, polarity, refs, wrongs)
        if restated is not None and max(support[True][0], support[False][0]) < self.f1_threshold:
            return label(restated[0], restated[1])
        best_pos, ref, why_pos = support[True]
        best_neg, _, why_neg = support[False]
        if max(best_pos, best_neg) >= self.f1_threshold:
            if best_pos > best_neg:
                return self._gold_only(instance, answer, ref, f"{why_pos} (vs {best_neg:.2f} for the other side)")
            if best_neg > best_pos:
                return label(Category.HALLUCINATION, f"{why_neg} (vs {best_pos:.2f} for the other side)")
            return Undecided(f"rule:short_answer: the evidence ties ({best_pos:.2f}) between a reference and a "
                             "known wrong answer")
        if not refs:  # a row whose reference normalises to nothing (a HaluEval-QA row past the first 200 has one)
            return Undecided("rule:short_answer: the item has no usable reference answer and nothing matched the "
                             "known wrong answers")
        ref = ref or refs[0]
        return Undecided(f"rule:short_answer: low word overlap with every reference (best token F1 {best_pos:.2f} "
                         f"with {ref!r}); a paraphrase needs a semantic judge")

    def _gold_only(self, instance: Instance, answer: str, ref: str, why: str) -> Label | Undecided:
        """Correct, unless the answer beside the gold states names or numbers nothing given supports."""
        extra = invented_specifics(answer, instance)
        if len(extra) >= INVENTED_SPECIFICS:
            return Undecided(f"rule:short_answer: the answer states the reference {ref!r} but also "
                             f"{', '.join(repr(e) for e in extra[:5])}, which neither the question, the context nor "
                             "any reference holds (possibly invented facts)")
        return self.label(instance, Category.CORRECT, why)

    def _yes_no(self, instance: Instance, answer: str, refs: list[str]) -> Label | Undecided:
        words = tokens(answer)
        said = next((w for w in words[:3] if w in YES_NO), None)
        if said is None:
            if is_abstention(answer):
                return self.label(instance, Category.ABSTENTION, "the answer declines to answer")
            return Undecided("rule:short_answer: yes/no question and the answer does not start with yes or no")
        wanted = {normalize(r) for r in refs}
        category = Category.CORRECT if said in wanted else Category.HALLUCINATION
        return self.label(instance, category, f"the answer says {said!r}, the reference says "
                                              f"{'/'.join(sorted(wanted))!r}")


def _polarity_only(answer: str, asked: set[str], polarity: bool, refs: list[str],
                   wrongs: list[str]) -> tuple[Category, str] | None:
    """An answer that only restates the question ("A uterus can grow back after a hysterectomy.") says no more
    than yes or no: when every reference has one polarity and every known wrong answer the other, its polarity
    decides. None when the answer says more, or the references do not split by polarity."""
    rest = _content(answer, asked)
    ref_pol, wrong_pol = {negated(r) for r in refs}, {negated(w) for w in wrongs}
    if rest or len(ref_pol) != 1 or ref_pol != {not p for p in wrong_pol}:
        return None
    side = "negative" if polarity else "positive"
    if polarity in ref_pol:
        return Category.CORRECT, f"the answer restates the question in the {side} form, as every reference does"
    return Category.HALLUCINATION, f"the answer restates the question in the {side} form, as the known wrong " \
                                   "answers do (every reference has the opposite polarity)"


_SPECIFIC = re.compile(r"(?<![\w'])(?:\d[\w,.:/]*\w|\d|[A-Z][\w'-]*)")  # "1937", "332nd", "3:15", "Edward"
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*|[\"(]\s*)$")


def invented_specifics(answer: str, instance: Instance) -> list[str]:
    """The names (capitalised words not opening a sentence) and numbers of the answer that neither the question,
    the instruction, the context nor any acceptable answer holds, in order, each once."""
    given = set(tokens(" ".join([instance.question, instance.instruction or "", instance.context or "",
                                 *instance.references])))
    text = fold(answer)
    out: list[str] = []
    for match in _SPECIFIC.finditer(text):
        word = match.group(0)
        if word[0].isupper() and _SENTENCE_START.search(text[: match.start()]):
            continue  # "The", "It" opening a sentence
        toks = tokens(word)
        if word == "I" or not toks or all(t in given or t in YES_NO for t in toks):
            continue
        if word not in out:
            out.append(word)
    return out


def _other_numbers(stated: list[float], reference: list[float]) -> bool:
    """Both state numbers and none of the reference's is among the answer's."""
    return bool(stated and reference) and not any(math.isclose(a, b, rel_tol=1e-6) for a in stated for b in reference)


def _content(text: str, asked: set[str]) -> list[str]:
    """The words of a text besides the question's own words, negations, yes/no and framing words ("it is true
    that", "in fact")."""
    return [tok for tok in tokens(text) if tok not in asked and tok not in NEGATORS and tok not in YES_NO
            and tok not in _FRAMING]


def affirms(answer: str, phrase: str) -> bool:
    """Whether the answer contains the phrase without a negation just before it: "not Paris" and "it's a myth
    that Turkey is in the EU" do not affirm "Paris" / "Turkey is in the EU". A leading "No," answers the
    question, it does not negate what follows ("No, it is Paris")."""
    hay, needle = tokens(answer), tokens(phrase)
    if not needle:
        return False
    n = len(needle)
    for start in range(len(hay) - n + 1):
        if hay[start : start + n] != needle:
            continue
        before = [tok for i, tok in enumerate(hay[max(0, start - 3) : start], max(0, start - 3))
                  if not (i == 0 and tok in YES_NO)]
        if not any(tok in NEGATORS for tok in before):
            return True
    return False


def _inside(wrong: str, ref: str) -> bool:
    """Whether the wrong answer's phrase lies within the reference (r+ 'New York City', r- 'York')."""
    return find_phrase(ref, wrong) >= 0
