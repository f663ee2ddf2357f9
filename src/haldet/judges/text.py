"""Answer normalisation, token F1 and abstention detection shared by the rule judges."""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})

# Phrases models use to decline. Matched on the normalised answer (lower case, no punctuation), so they are
# written without apostrophes: "don't" normalises to "don t".
_ABSTAIN = re.compile(
    r"\b("
    r"i (do not|don t|dont) know|i m not sure|i am not sure|not sure|i (cannot|can t|cant) (answer|say|tell|determine"
    r"|provide|find|confirm|be certain)|unable to (answer|determine|find|provide)|no (way|means) to (know|tell)"
    r"|(do not|don t) have (enough|sufficient|the|any|access)|not enough (information|context|data)"
    r"|insufficient (information|context|data)|(context|passage|text|document) (does not|doesn t|do not) "
    r"(mention|say|provide|contain|specify|state)|no information|not (mentioned|specified|provided|stated) in"
    r"|cannot be determined|can t be determined|unknown|i have no (idea|comment)|no comment"
    r")\b"
)


def normalize(text: str) -> str:
    """SQuAD-style: lower case, punctuation to spaces, drop articles, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def tokens(text: str) -> list[str]:
    return normalize(text).split()


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = tokens(prediction), tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def contains_phrase(text: str, phrase: str) -> bool:
    """Whether the normalised phrase occurs in the normalised text as whole tokens."""
    hay, needle = tokens(text), tokens(phrase)
    if not needle:
        return False
    n = len(needle)
    return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def is_abstention(text: str) -> bool:
    return bool(_ABSTAIN.search(normalize(text)))
