"""Claims as spans of the answer they come from: map a claim's text back to character offsets, and the offline
sentence / clause units used when no claim extractor is available.

A claim an LLM extracts (or an annotator wrote, as FActScore's atomic facts) is usually a rewrite, not a quote:
"He was born in 1970" for "... born in 1970 in Ohio". `map_claim` first looks for the claim verbatim (case and
spacing ignored); failing that, it aligns the claim's content words to the answer and keeps the tightest window
that holds at least `min_coverage` of them. A claim with too few words found maps to no span (`None`): the
caller lists it as unmapped and never keeps it, so every kept claim points at text the answer really contains.

The fallback units are rule-based and deterministic (no model): sentences end at `.`, `!`, `?` (or a line break)
followed by space and an upper-case letter, digit or quote, with common abbreviations kept whole; clauses split a
sentence further at `;`, `:` and at a comma before a coordinating or relative word (", and", ", which", ...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# words that carry no claim content: they never decide where a claim is
_STOP = """
a an the and or but nor of in on at to for from by with as is are was were be been being has have had do does did
this that these those it its he she they his her their them him we our you your i me my also which who whom whose
what when where while then than there here not no so such into onto over under about after before during up down
out off very can could would should will shall may might must one s"""
STOPWORDS = frozenset(_STOP.split())

_ABBR = """mr mrs ms dr prof sr jr st vs etc e.g i.e inc ltd co corp jan feb mar apr jun jul aug
sep sept oct nov dec no u.s u.k a.m p.m"""
ABBREVIATIONS = frozenset(_ABBR.split())

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9']*")
_SENTENCE_END = re.compile(r"([.!?]+[\"')\]]*)(\s+)(?=[A-Z0-9\"'(\[])|\n\s*\n|\n(?=\s*[-*\u2022\d])")
_CLAUSE_CUT = re.compile(r"[;:]\s+|,\s+(?=(?:and|but|or|while|whereas|which|who|where|although|though|because)\b)")


def _norm(word: str) -> str:
    return word.lower().strip("'")


def content_words(text: str) -> list[str]:
    """The claim's words that locate it: lower-cased, stopwords and one-letter words left out."""
    return [w for w in (_norm(m.group()) for m in _WORD.finditer(text)) if len(w) > 1 and w not in STOPWORDS]


def _verbatim(answer: str, claim: str, start: int, end: int) -> tuple[int, int] | None:
    words = [re.escape(w) for w in claim.strip().rstrip(".").split()]
    if not words:
        return None
    found = re.compile(r"\s+".join(words), re.IGNORECASE).search(answer, start, end)
    return (found.start(), found.end()) if found else None


def map_claim(answer: str, claim: str, start: int = 0, end: int | None = None, *,
              min_coverage: float = 0.6) -> tuple[int, int] | None:
    """The [start, end) span of `answer` (searched within `start`..`end`) that `claim` states, or None when it
    cannot be located: verbatim first, else the tightest window of answer words covering at least
    `min_coverage` of the claim's distinct content words (as many as some window holds, then the tightest)."""
    end = len(answer) if end is None else end
    exact = _verbatim(answer, claim, start, end)
    if exact is not None:
        return exact
    wanted = list(dict.fromkeys(content_words(claim)))
    if not wanted:
        return None
    need = max(1, -(-len(wanted) * min_coverage // 1))  # ceil
    tokens = [(m.start(), m.end(), _norm(m.group())) for m in _WORD.finditer(answer, start, end)]
    wanted_stems = {_stem(x) for x in wanted}
    hits = [(s, e, w) for s, e, w in tokens if _stem(w) in wanted_stems]
    stems = [_stem(w) for _, _, w in hits]
    for target in range(len({_stem(w) for w in wanted}), int(need) - 1, -1):  # most words found, then tightest
        best: tuple[int, int] | None = None
        for i in range(len(hits)):
            seen: set[str] = set()
            for j in range(i, len(hits)):
                seen.add(stems[j])
                if len(seen) >= target:
                    if best is None or hits[j][1] - hits[i][0] < best[1] - best[0]:
                        best = (hits[i][0], hits[j][1])
                    break
        if best is not None:
            return best
    return None


def _stem(word: str) -> str:
    """A crude suffix strip so 'born'/'borns', 'played'/'plays' meet; enough to locate, never to judge."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start and re.search(r"\w", text[start:end]) else None


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of `text` (rule-based; abbreviations such as 'Dr.' or 'U.S.' kept whole)."""
    spans: list[tuple[int, int]] = []
    begin = 0
    for m in _SENTENCE_END.finditer(text):
        if m.group(1):
            before = re.search(r"([A-Za-z.]+)\.$", text[begin : m.start(1) + 1])
            if before and (before.group(1).lower().rstrip(".") in ABBREVIATIONS or len(before.group(1)) == 1):
                continue  # 'Dr. Smith', 'J. Smith': not a sentence end
            cut = m.end(1)
        else:
            cut = m.start()
        span = _trimmed(text, begin, cut)
        if span:
            spans.append(span)
        begin = m.end()
    span = _trimmed(text, begin, len(text))
    if span:
        spans.append(span)
    return spans


def clause_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each clause: sentences cut further at ';', ':' and a comma before a coordinating or
    relative word. A piece of fewer than three words stays with the clause before it."""
    out: list[tuple[int, int]] = []
    for s_start, s_end in sentence_spans(text):
        pieces: list[tuple[int, int]] = []
        begin = s_start
        for m in _CLAUSE_CUT.finditer(text, s_start, s_end):
            pieces.append((begin, m.start()))
            begin = m.end()
        pieces.append((begin, s_end))
        merged: list[tuple[int, int]] = []
        for p in pieces:
            if merged and len(_WORD.findall(text[p[0] : p[1]])) < 3:
                merged[-1] = (merged[-1][0], p[1])
            else:
                merged.append(p)
        out += [span for a, b in merged if (span := _trimmed(text, a, b))]
    return out


def split_units(text: str, kind: str) -> list[tuple[int, int]]:
    """The offline units of `kind` ("sentence" or "clause")."""
    if kind == "sentence":
        return sentence_spans(text)
    if kind == "clause":
        return clause_spans(text)
    raise ValueError(f"unknown offline unit {kind!r}; choose sentence or clause")


def map_all(answer: str, claims: Sequence[str], *, min_coverage: float = 0.6
            ) -> tuple[list[tuple[str, int, int]], list[str]]:
    """(mapped claims as (text, start, end), unmapped claim texts), claims in their given order."""
    kept: list[tuple[str, int, int]] = []
    unmapped: list[str] = []
    for claim in claims:
        span = map_claim(answer, claim, min_coverage=min_coverage)
        if span is None:
            unmapped.append(claim)
        else:
            kept.append((claim, *span))
    return kept, unmapped
