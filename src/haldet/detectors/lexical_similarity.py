"""Lexical similarity (Lin et al. 2023, "Generating with Confidence"): how much the K samples agree word-wise."""

from __future__ import annotations

from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import nonempty
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


@register("lexical_similarity")
class LexicalSimilarity(Detector):
    """s = 1 - mean over unordered sample pairs of ROUGE-L F1 (rouge-score, stemming on); empty samples are
    dropped and fewer than two non-empty samples is invalid."""
    method_family = "sample consistency"
    paper = ("Fomicheva et al. 2020, Unsupervised quality estimation for neural machine translation (as in Lin et "
             "al. 2024)")
    peers = ("lm-polygraph",)

    requires = frozenset({Signal.SAMPLES})
    defaults: ClassVar[dict[str, Any]] = {"use_stemmer": True}

    def score(self, items: SignalView) -> Scores:
        from rouge_score import rouge_scorer, tokenizers

        scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_OnceTokenizer(
            tokenizers.DefaultTokenizer(use_stemmer=bool(self.params["use_stemmer"]))))
        out = Scores.empty(len(items))
        advance = self.progress("lexical similarity", len(items))
        for i, raw in enumerate(items.get(Signal.SAMPLES)):
            samples = nonempty(raw)
            if samples is None:
                out.invalid(i, "no samples")
            elif len(samples) < 2:
                out.invalid(i, f"{len(samples)} non-empty sample(s); need 2")
            else:
                sims = [scorer.score(a, b)["rougeL"].fmeasure for a, b in combinations(samples, 2)]
                out.set(i, 1.0 - float(np.mean(sims)))
            advance(1)
        return out


class _OnceTokenizer:
    """rouge-score's own tokenizer (and stemmer), each text tokenized once: every sample is in K - 1 pairs."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.seen: dict[str, list[str]] = {}

    def tokenize(self, text: str) -> list[str]:
        if text not in self.seen:
            self.seen[text] = self.tokenizer.tokenize(text)
        return self.seen[text]
