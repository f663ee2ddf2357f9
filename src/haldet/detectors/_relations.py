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
- "embedding": cosine of the texts' unit sentence embeddings (the detector's `embedding_model`, a bi-encoder: `bi:`
  name or an alias such as `minilm`), clipped to [0, 1] as the bi-encoder similarity pair model clips it; [n, n].
  The embeddings are shared evidence (`haldet.models.pairs.embeddings`): each text embedded once per encoder and
  settings, kept in process memory and in the cell's `embeddings/` log, read by every embedding reader.

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
from haldet.models.pairs.embeddings import EmbeddingStore
from haldet.models.pairs.loader import load_pair_model
from haldet.models.pairs.similarity import BiEncoderSimilarity

KINDS = ("jaccard", "rougeL", "nli", "embedding")
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
    if kind == "embedding":
        return (encoder(det).embedding_key,)
    return ()


def encoder(det: Detector) -> BiEncoderSimilarity:
    """The detector's `embedding_model` as a bi-encoder (loaded once per process; recorded in `det.meta`)."""
    name = str(det.params["embedding_model"])
    model, meta = load_pair_model("similarity", name if name.startswith("bi:") else f"bi:{name}",
                                  device=det.params.get("device", "auto"))
    if not isinstance(model, BiEncoderSimilarity):
        raise ValueError(f"{det.name}: embedding_model {name!r} is not a sentence encoder")
    det.meta["embedding_model"] = meta
    return model


def _embedding(det: Detector, groups: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """Cosine matrices of the groups' texts from their shared embeddings (every distinct text embedded once)."""
    model = encoder(det)
    texts = list(dict.fromkeys(t for g in groups for t in g if t))
    vec = dict(zip(texts, EmbeddingStore(det.workdir).vectors(model, texts), strict=True)) if texts else {}
    out = []
    for g in groups:
        n = len(g)
        m = np.full((n, n), np.nan)
        for i in range(n):
            for j in range(n):
                if g[i] and g[j]:
                    m[i, j] = 1.0 if g[i] == g[j] else min(1.0, max(0.0, float((vec[g[i]] * vec[g[j]]).sum(-1))))
        out.append(m)
    return out


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
    keys = [(kind, settings, tuple(g), rows if kind in ("jaccard", "rougeL") else None) for g in groups]
    missing = [k for k in dict.fromkeys(keys) if k not in _MEMORY]
    if kind == "embedding":
        for key, matrix in zip(missing, _embedding(det, [k[2] for k in missing]), strict=True):
            _remember(key, matrix)
    elif kind != "nli":
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
