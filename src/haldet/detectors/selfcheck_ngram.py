"""SelfCheckGPT n-gram (Manakul et al. 2023, "SelfCheckGPT", section 5.4; its `SelfCheckNgram` with n = 1): a
unigram language model estimated from the samples and the answer itself judges the answer's tokens; tokens the
samples rarely repeat are improbable under it.

Counts come from the answer and every non-empty sample, tokenised by spaCy's English tokenizer (the tokenizer of
the en_core_web_sm pipeline the original uses) and lower-cased; p(w) = (c(w) + k) / (N + k |V|) with add-k
smoothing (`smoothing` k = 0 as in the original; every answer token is counted, so no probability is 0). The
answer is split into sentences by haldet's sentence splitter (`haldet.text.sentences`, recorded in the meta).

Variants (the original's document-level scores): "max" (the paper's Unigram (Max), its better variant): mean over
the answer's sentences of the largest -log p of a token in the sentence; "avg": mean -log p over all the answer's
tokens."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import answer_and_samples
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView
from haldet.text.sentences import split_many, splitter_id


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    import spacy

    return spacy.blank("en").tokenizer


def words(text: str) -> list[str]:
    """spaCy English tokens of `text`, lower-cased (whitespace tokens dropped)."""
    return [t.text.lower() for t in _tokenizer()(text) if not t.is_space]


def unigram_scores(answer_sentences: list[str], texts: list[str], k: float = 0.0) -> tuple[float, float]:
    """(avg, max) document scores of the answer's sentences under the add-k unigram model of `texts` (the answer
    and its samples). Raises ValueError when no sentence has a token."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(words(text))
    total, vocab = sum(counts.values()), len(counts) + 1  # + 1: the unknown-word entry the original keeps

    def logp(w: str) -> float:
        p = (counts.get(w, 0) + k) / (total + k * vocab)
        return float(np.log(p)) if p > 0 else -np.inf

    per_sentence = [[logp(w) for w in words(s)] for s in answer_sentences]
    per_sentence = [lp for lp in per_sentence if lp]
    if not per_sentence:
        raise ValueError("no token in the answer")
    every = np.concatenate([np.asarray(lp) for lp in per_sentence])
    return float(-every.mean()), float(np.mean([-min(lp) for lp in per_sentence]))


@register("selfcheck_ngram")
class SelfCheckNgram(Detector):
    method_family = "sample consistency"
    paper = "Manakul et al. 2023, SelfCheckGPT: zero-resource black-box hallucination detection"
    peers = ("selfcheckgpt",)
    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES})
    auxiliary: ClassVar[dict[str, str]] = {"sentences": "splitter"}
    variants: ClassVar[dict[str, str]] = {
        "max": "mean over answer sentences of the largest token -log p (the paper's Unigram (Max))",
        "avg": "mean token -log p over the answer (the paper's Unigram (Avg))",
    }
    defaults: ClassVar[dict[str, Any]] = {"variant": "max", "smoothing": 0.0}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        todo: list[tuple[int, str, list[str]]] = []
        for i, (resp, raw) in enumerate(zip(items.get(Signal.RESPONSE), items.get(Signal.SAMPLES), strict=True)):
            usable = answer_and_samples(resp, raw)
            if isinstance(usable, str):
                out.invalid(i, usable)
            else:
                todo.append((i, *usable))
        sentences = split_many([t[1] for t in todo])
        self.meta["sentence_splitter"] = splitter_id()
        column = 1 if self.params["variant"] == "max" else 0
        for (i, resp, samples), sents in zip(todo, sentences, strict=True):
            try:
                out.set(i, unigram_scores(sents, [resp, *samples], float(self.params["smoothing"]))[column])
            except ValueError as exc:
                out.invalid(i, str(exc))
        return out
