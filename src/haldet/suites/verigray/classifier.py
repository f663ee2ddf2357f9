"""The zero-shot 7-way VeriGray classifier: its prompt and the parser of its replies.

The prompt (packaged `templates/verigray_classify.txt`, jinja2, overridable from a template directory) shows the
document, the whole summary and the sentence to judge, describes options A-G and asks for the facts to be
checked one by one before a final "Option: <letter>" line. Letters follow the paper's detector prompt:
A Explicitly-Supported, B Generally-Supported (= Implicitly-Supported), C Inconsistent (= Contradicting),
D Fabricated, E Out-Dependent, F Ambiguous, G No-Fact.

`parse_reply` maps a reply to a grade (0..6), trying in order: an explicit "Option/Answer/Choice: X", a reply
that is only a letter, a reply that starts with "X." / "X)" / "(X)", and finally the class name (or alias)
mentioned last. Anything else is unparsable: grade None with a reason quoting the reply, never a guessed class.
Reasoning models' <think>...</think> blocks are ignored.
"""

from __future__ import annotations

import re
from functools import lru_cache

from haldet.suites.verigray.labels import (
    ALIASES,
    AMBIGUOUS,
    CLASSES,
    CONTRADICTING,
    EXPLICIT,
    FABRICATED,
    IMPLICIT,
    NO_FACT,
    OUT_DEPENDENT,
)

OPTIONS = {"A": EXPLICIT, "B": IMPLICIT, "C": CONTRADICTING, "D": FABRICATED, "E": OUT_DEPENDENT,
           "F": AMBIGUOUS, "G": NO_FACT}
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_MARKED = re.compile(r"(?i:option|answer|choice|label|verdict)\W{0,4}(?:(?i:is)\W{0,3})?\(?([A-G])(?![A-Za-z])")
_BARE = re.compile(r"^\W*([A-G])\W*$")
_LEADING = re.compile(r"^\W*\(?([A-G])(?:[.):]|\s*[-–]\s)")


@lru_cache(maxsize=1)
def _name_patterns() -> list[tuple[re.Pattern[str], int]]:
    names = [(n, g) for g, n in enumerate(CLASSES)] + list(ALIASES.items())
    return [(re.compile(r"(?<![A-Za-z])" + r"[\s_-]*".join(map(re.escape, n.split("-"))) + r"(?![A-Za-z])", re.I),
             g) for n, g in names]


def render(template: str, *, document: str, summary: str, sentence: str) -> str:
    import jinja2

    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    return env.from_string(template).render(document=document.strip(), summary=summary.strip(),
                                            sentence=sentence.strip()).strip()


def messages(template: str, *, document: str, summary: str, sentence: str) -> list[dict[str, str]]:
    """The chat messages for one sentence (one user turn)."""
    return [{"role": "user", "content": render(template, document=document, summary=summary, sentence=sentence)}]


def parse_reply(text: str) -> tuple[int | None, str]:
    """(grade, how it was read) or (None, why not)."""
    body = _THINK.sub(" ", text or "").strip()
    if not body:
        return None, "unparsable reply: empty"
    marked = _MARKED.findall(body)
    if marked:
        return OPTIONS[marked[-1]], f"option {marked[-1]}"
    for pattern in (_BARE, _LEADING):
        match = pattern.match(body)
        if match:
            return OPTIONS[match.group(1)], f"option {match.group(1)}"
    found = [(m.start(), g) for pattern, g in _name_patterns() for m in pattern.finditer(body)]
    if found:
        grade = max(found)[1]
        return grade, f"class name {CLASSES[grade]}"
    return None, f"unparsable reply: {body[:160]!r}"
