"""Pairwise relations between an item's texts (its answer and/or its samples), computed once per item and kind.

Several sample-based detectors read the same matrix: the graph-spectral family (EigV, Ecc, Deg, NumSemSets) with
one similarity, CoCoA with the answer's row of another. `relation_matrices(det, kind, groups)` returns one matrix
per group of texts and keeps each in a process-wide memory keyed by (kind, the settings that change its numbers,
the texts), so a second detector over the same items (or the same detector rescored) assembles nothing again.
NLI pairs additionally go through the NLI pair cache (`haldet.models.pairs.cache.PairCache`: process memory, then the
cell's `pairs/` log), so a pair any detector asked before is never sent to the model again.

Kinds (entry [i, j] relates text i to text j; an entry that involves an empty text is NaN):
- "jaccard": |words_i & words_j| / |words_i | words_j| over lower-cased whitespace-separated word sets; [n, n].
- "rougeL": ROUGE-L F1 (rouge-score's tokenizer, stemming per `use_stemmer`); [n, n], symmetric.
- "nli": P(entailment, neutral, contradiction) with premise i and hypothesis j; [n, n, 3]. A text paired with
  itself, or with an identical text, is entailment (1, 0, 0) without a model call.

A package-private helper module of `haldet.detectors` (the leading underscore keeps the detector registry from
scanning it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.detectors._consistency import pair_model, pair_scores
from haldet.detectors.base import Detector
from haldet.detectors.lexical_similarity import _OnceTokenizer
from haldet.models.pairs.base import ENTAILMENT

KINDS = ("jaccard", "rougeL", "nli")
MAX_KEPT = 50_000  # matrices kept in process memory (oldest dropped first)

_MEMORY: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()


def jaccard(a: str, b: str) -> float:
    """Jaccard index of the lower-cased whitespace-separated word sets (1.0 for two texts without words)."""
    sa, sb = set(a.lower().split()), set(b.lower().split())
    union = sa | sb
    return len(sa & sb) / len(union) if union else 1.0


def _settings(det: Detector, kind: str) -> tuple[Any, ...]:
    """What besides the texts changes a matrix of `kind` (part of the memory key)."""
    if kind == "rougeL":
        return (bool(det.params.get("use_stemmer", True)),)
    if kind == "nli":
        return (pair_model(det, "nli", "nli_model", batch_size=det.params["batch_size"],
                           max_length=det.params["max_length"]).id,)
    return ()


def _remember(key: tuple[Any, ...], value: np.ndarray) -> None:
    _MEMORY[key] = value
    _MEMORY.move_to_end(key)
    while len(_MEMORY) > MAX_KEPT:
        _MEMORY.popitem(last=False)


def _lexical(kind: str, texts: Sequence[str], use_stemmer: bool, rows: int | None = None) -> np.ndarray:
    n = len(texts)
    out = np.full((n, n), np.nan)
    score: Any = jaccard
    if kind == "rougeL":
        from rouge_score import rouge_scorer, tokenizers

        scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_OnceTokenizer(
            tokenizers.DefaultTokenizer(use_stemmer=use_stemmer)))  # each text tokenised once per matrix
        score = lambda a, b: scorer.score(a, b)["rougeL"].fmeasure  # noqa: E731
    for i in range(n):
        if not texts[i]:
            continue
        out[i, i] = 1.0
        for j in range(i + 1, n):
            if texts[j] and (rows is None or i < rows):
                out[i, j] = out[j, i] = 1.0 if texts[i] == texts[j] else float(score(texts[i], texts[j]))
    return out


def relation_matrices(det: Detector, kind: str, groups: Sequence[Sequence[str]], label: str = "",
                      rows: int | None = None) -> list[np.ndarray]:
    """One relation matrix of `kind` per group of texts (see the module docstring), from memory when known.
    NLI detectors carry `nli_model`, `fallback`, `batch_size`, `max_length` and `device` parameters.
    `rows` (lexical kinds): only the entries of the first `rows` texts' rows and columns are computed (the others
    stay NaN), e.g. 1 when only the answer's relations to its samples are read."""
    if kind not in KINDS:
        raise ValueError(f"unknown relation kind {kind!r}; known: {', '.join(KINDS)}")
    if not groups:
        return []  # nothing to relate: no model is loaded
    settings = _settings(det, kind)
    keys = [(kind, settings, tuple(g), None if kind == "nli" else rows) for g in groups]
    missing = [k for k in dict.fromkeys(keys) if k not in _MEMORY]
    if kind != "nli":
        for key in missing:
            _remember(key, _lexical(kind, key[2], bool(settings and settings[0]), rows))
    elif missing:
        pairs = list(dict.fromkeys((a, b) for key in missing for a in key[2] for b in key[2]
                                   if a and b and a != b))
        probs = pair_scores(det, "nli", "nli_model", pairs, label or f"{det.name} pairs") if pairs else np.zeros((0, 3))
        row = {p: v for p, v in zip(pairs, probs, strict=True)}
        same = np.zeros(3)
        same[ENTAILMENT] = 1.0
        for key in missing:
            texts = key[2]
            n = len(texts)
            out = np.full((n, n, 3), np.nan)
            for i in range(n):
                for j in range(n):
                    if texts[i] and texts[j]:
                        out[i, j] = same if texts[i] == texts[j] else row[(texts[i], texts[j])]
            _remember(key, out)
    result = []
    for key in keys:
        _MEMORY.move_to_end(key)
        result.append(_MEMORY[key])
    return result


def clear_memory() -> None:
    """Forget every kept matrix (tests)."""
    _MEMORY.clear()
