"""Parse a self-reported confidence out of free text (paper appendix E.2).

The auxiliary stage asks the model for a confidence between 0.0 and 1.0, but small models answer in many
shapes: "Confidence: 0.8", "I'm 85% sure", "7/10", "certainty 9 out of 10", or just a trailing number.
The rule: a number attached to an explicit marker (confidence / score / certainty / probability / sure)
wins; otherwise the last isolated number. Then map it to [0, 1]:

- a percentage (``85%``) -> /100;
- an explicit scale (``7/10``, ``7 out of 10``, ``85/100``) -> /denominator;
- a bare number in [0, 1] -> as is; in (1, 10] -> /10; in (10, 100] -> /100;
- anything else is clipped to [0, 1] (negative -> 0, above 100 -> 1).

Returns None when no number can be found, so the caller can mark the item invalid instead of guessing.
"""

from __future__ import annotations

import math
import re

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_MARKER = r"(?:confidence|confident|score|certainty|certain|probability|likelihood|sure)"
# A number with an optional scale: "7/10", "7 out of 10", "85 %", "85 percent".
_VALUE = (
    rf"(?P<num>{_NUM})\s*"
    rf"(?:(?P<pct>%|percent\b)|(?:/|\s+out\s+of\s+)\s*(?P<den>{_NUM}))?"
)
# Marker, up to ~24 non-digit characters (": ", " level is ", " of about "), then the value.
_MARKED = re.compile(rf"\b{_MARKER}\b[^\d\n\-+.]{{0,24}}{_VALUE}", re.IGNORECASE)
# Value followed by "confidence"/"sure"/"certain" ("90% confident", "0.7 confidence").
_MARKED_AFTER = re.compile(rf"{_VALUE}\s*(?:\w+\s+)?{_MARKER}\b", re.IGNORECASE)
# An isolated number: not part of a word or a longer token like "v2" or "3rd".
_ISOLATED = re.compile(rf"(?<![\w.]){_VALUE}(?![\w])", re.IGNORECASE)


def _to_unit(num: str, pct: str | None, den: str | None) -> float | None:
    """Map one matched value to [0, 1] following the scale rules above."""
    try:
        x = float(num)
    except ValueError:
        return None
    if not math.isfinite(x):
        return None
    if pct:
        x = x / 100.0
    elif den:
        d = float(den)
        if d <= 0 or not math.isfinite(d):
            return None
        x = x / d
    elif x > 1.0:
        x = x / 10.0 if x <= 10.0 else x / 100.0
    return min(1.0, max(0.0, x))


def parse_confidence(text: str | None) -> float | None:
    """The confidence in [0, 1] stated in `text`, or None when no number is found.

    Explicit markers (confidence/score/certainty...) take precedence over the last isolated number.
    """
    if not text or not text.strip():
        return None
    for pattern in (_MARKED, _MARKED_AFTER):
        m = pattern.search(text)
        if m:
            value = _to_unit(m.group("num"), m.group("pct"), m.group("den"))
            if value is not None:
                return value
    matches = list(_ISOLATED.finditer(text))
    for m in reversed(matches):
        value = _to_unit(m.group("num"), m.group("pct"), m.group("den"))
        if value is not None:
            return value
    return None


_SENTENCE_END = re.compile(r"\n|[.!?;](?:\s)")


def _statement_end(text: str | None) -> int | None:
    """Where the reply's first sentence that states a number ends (after its . ! ? ; or before its newline),
    or None while no such sentence has ended."""
    if not text:
        return None
    for end in _SENTENCE_END.finditer(text):
        cut = end.start() + (end.group() != "\n")  # the punctuation belongs to the sentence, the newline does not
        if parse_confidence(text[:cut]) is not None:
            return cut
    return None


def confidence_complete(text: str | None) -> bool:
    """Whether a reply being decoded already states its confidence: a sentence holding a number that parses has
    ended (a newline, or . ! ? ; then a whitespace), so further tokens cannot change what is read
    (`confidence_statement`). The auxiliary stage stops decoding a verbalized reply here."""
    return _statement_end(text) is not None


def confidence_statement(text: str) -> str:
    """The part of a reply the confidence is read from: up to the end of its first sentence that states a number
    ("1. 1" -> "1.", "0.8. 0" -> "0.8."), else the whole reply. A later sentence, or the token that showed the
    first one had ended, is not read, whether the decoding stopped there or ran on."""
    end = _statement_end(text)
    return text if end is None else text[:end]
