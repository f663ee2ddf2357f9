"""Rule judge for multiple-choice items: the chosen option letter(s), or the chosen option's text, against the
correct letter(s) in r+.

Letters are read in order of reliability: an explicit marker ("Answer: B", "the correct option is (C)"), an
answer that starts with a letter ("B", "B.", "(B) Paris", "B) Paris"), then standalone option letters anywhere
(a capital "A" followed by a lower-case word is the article, "I" before a verb is the pronoun, and neither is
read as a choice). Without a letter, the text of exactly one option (normalised, as whole tokens) counts.
References may be letters ("B", "A, C") or option texts.
"""

from __future__ import annotations

import re

from haldet.judges.base import Judge, Undecided, register
from haldet.judges.text import contains_phrase, is_abstention, normalize
from haldet.schema import Category, Generation, Instance, Label

# marker words in any case, the letter itself case-sensitive ("the answer is a cat" chooses nothing)
_MARKER = (r"(?i:answer|option|choice)(?i:s)?\s*(?i:is|are|would be|should be|:|=)?\s*(?i:option\s*)?:?\s*"
           r"\(?\**({L})\**\)?(?![\w'])")


# words after a capital A/I that show it is an option letter, not the article or pronoun ("A or C", "A is right")
_NOT_ARTICLE = {"or", "and", "is", "was", "seems", "looks", "would", "should", "because", "since", "then", "nor"}


def _letter_pattern(keys: list[str]) -> str:
    return "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))


def chosen_letters(answer: str, keys: list[str]) -> tuple[list[str], str]:
    """(letters chosen, how they were read); ([], why) when the answer names none."""
    if not keys:
        return [], "no options"
    letters = _letter_pattern(keys)
    text = answer.strip()
    marked = list(re.finditer(_MARKER.format(L=letters), text))
    if marked:
        last = marked[-1]
        found = [last.group(1)]
        rest = text[last.end():]
        while more := re.match(rf"\s*(?:,|and|&)\s*\(?({letters})\)?(?![\w'])", rest):  # "A and C"
            found.append(more.group(1))
            rest = rest[more.end():]
        return _canon(found, keys), "explicit answer marker"
    lead = re.match(rf"^\W{{0,3}}({letters})(?:\s*[.):\]]|\s*$|\s+[-–—]|\s*,\s*({letters})\b)", text)
    if lead:
        found = [lead.group(1)] + ([lead.group(2)] if lead.group(2) else [])
        return _canon(found, keys), "leading option letter"
    found = []
    for match in re.finditer(rf"(?<![\w'’])({letters})(?![\w'’])", text):
        letter = match.group(1)
        after = text[match.end() : match.end() + 12]
        nxt = re.match(r"\s+([a-z]+)", after)
        if letter in ("A", "I") and nxt and nxt.group(1) not in _NOT_ARTICLE:
            continue  # the article "A good ..." / the pronoun "I think ..."
        found.append(letter)
    distinct = _canon(found, keys)
    if distinct:
        return distinct, "standalone option letter" + ("s" if len(distinct) > 1 else "")
    return [], "no option letter in the answer"


def _canon(found: list[str], keys: list[str]) -> list[str]:
    by_upper = {k.upper(): k for k in keys}
    out: list[str] = []
    for letter in found:
        key = by_upper.get(letter.upper())
        if key is not None and key not in out:
            out.append(key)
    return out


def correct_letters(instance: Instance) -> list[str]:
    """r+ as option keys: letters ("B", "A, C", "(A)") or option texts."""
    keys = list(instance.options)
    out: list[str] = []
    for ref in instance.references:
        parts = [p.strip(" ().") for p in re.split(r"[,;/]|\band\b", ref)]
        if parts and all(p.upper() in {k.upper() for k in keys} for p in parts if p):
            out += _canon([p for p in parts if p], keys)
            continue
        out += [k for k, text in instance.options.items() if normalize(text) == normalize(ref)]
    return sorted(set(out), key=keys.index)


@register("rule:mcq")
class MCQJudge(Judge):
    version = 2  # 2: a bare letter "A" is a choice, not an empty answer

    def applies(self, instance: Instance) -> bool:
        return bool(instance.options) and bool(correct_letters(instance))

    def judge(self, instance: Instance, generation: Generation) -> Label | Undecided:
        answer = generation.response.strip()
        if not re.search(r"\w", answer):  # not `normalize`: a bare "A" normalises to nothing (an article)
            return self.label(instance, Category.INVALID, "empty response")
        keys = list(instance.options)
        wanted = correct_letters(instance)
        chosen, how = chosen_letters(answer, keys)
        if not chosen:
            by_text = [k for k, text in instance.options.items() if normalize(text) and contains_phrase(answer, text)]
            if len(by_text) == 1:
                chosen, how = by_text, "option text"
        if not chosen:
            if is_abstention(answer):
                return self.label(instance, Category.ABSTENTION, "the answer declines to choose an option")
            return Undecided(f"rule:mcq: {how}, and no single option text found")
        if len(chosen) > len(wanted) and how.startswith("standalone"):
            return Undecided(f"rule:mcq: the answer mentions several options ({', '.join(chosen)}) without "
                             "marking one")
        if sorted(chosen) == sorted(wanted):
            return self.label(instance, Category.CORRECT, f"chose {', '.join(chosen)} ({how}); correct is "
                                                          f"{', '.join(wanted)}")
        return self.label(instance, Category.HALLUCINATION, f"chose {', '.join(chosen)} ({how}); correct is "
                                                              f"{', '.join(wanted)}")
