"""TokenSAR at any level (Duan et al., 2024; HalluEntity section 4): token NLL weighted by the token's relevance.

    y_i = -log p(x_i | x_<i) * R~(x_i),   R(x_i) = 1 - g(x, x without x_i)

g is the similarity of sentence embeddings (default SentenceBERT RoBERTa-large as in the paper, offline substitute
MiniLM, named in `meta`), x is the token's sentence (`scope: sentence`, HalluEntity's notation) or the whole
response (`scope: response`); "x without x_i" removes the token's characters. `normalise: sum` divides R by its sum
over the scope's tokens (SAR's normalisation; equal weights when all relevances are 0), `none` keeps R.
Units then average their tokens' y_i (`aggregate`). The response-level `token_sar` detector (sar.py) is the same
idea over a generated answer with the question as prefix.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import pair_scores
from haldet.detectors.base import register
from haldet.detectors.unit import UnitDetector
from haldet.signals import Signal, SignalView
from haldet.text.linguistics import analyse


def scopes(text: str, offsets: np.ndarray, sentence_starts: list[int] | None) -> list[tuple[int, int, np.ndarray]]:
    """(start, end, token indices) of each scope: sentences (given their start offsets) or the whole response."""
    offsets = np.asarray(offsets).reshape(-1, 2)
    if not sentence_starts:
        return [(0, len(text), np.arange(len(offsets)))]
    bounds = sorted(set(sentence_starts) | {0})
    out = []
    for k, start in enumerate(bounds):
        end = bounds[k + 1] if k + 1 < len(bounds) else len(text)
        index = np.flatnonzero((offsets[:, 0] >= start) & (offsets[:, 0] < end))
        if len(index):
            out.append((start, end, index))
    return out


def weighted_nll(logprobs: np.ndarray, relevance: np.ndarray, normalise: str) -> np.ndarray:
    r = np.clip(np.asarray(relevance, dtype=np.float64), 0.0, None)
    if normalise == "sum":
        r = r / r.sum() if r.sum() > 0 else np.full(len(r), 1.0 / len(r))
    return -np.asarray(logprobs, dtype=np.float64) * r


@register("unit_sar")
class UnitSAR(UnitDetector):
    method_family = "information (token probabilities)"
    paper = "Duan et al. 2024, Shifting attention to relevance (token SAR per unit)"
    peers = ("lm-polygraph", "TruthTorchLM")
    requires = UnitDetector.requires | {Signal.RESPONSE, Signal.TOKEN_LOGPROBS}
    version = "1"
    auxiliary: ClassVar[dict[str, str]] = {"similarity_model": "similarity"}
    defaults: ClassVar[dict[str, Any]] = {**UnitDetector.defaults,
                                          "similarity_model": "bi:sentence-transformers/all-roberta-large-v1",
                                          "fallback": "minilm", "scope": "sentence", "normalise": "sum",
                                          "batch_size": 64, "max_length": 512, "device": "auto"}

    def reads_linguistics(self) -> bool:
        return self.params["scope"] == "sentence"

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        if self.params["scope"] not in ("sentence", "response") or self.params["normalise"] not in ("sum", "none"):
            raise ValueError("unit_sar: scope must be sentence|response and normalise sum|none")
        responses = [r or "" for r in items.get(Signal.RESPONSE)]
        words = analyse(responses) if self.params["scope"] == "sentence" else [[] for _ in responses]
        out: list[np.ndarray | str] = []
        jobs: list[tuple[int, np.ndarray, list[tuple[np.ndarray, list[tuple[str, str]]]]]] = []
        for i, (text, wds, offsets, lps) in enumerate(zip(responses, words, items.get(Signal.TOKEN_OFFSETS),
                                                          items.get(Signal.TOKEN_LOGPROBS), strict=True)):
            out.append("")
            if offsets is None or lps is None or len(lps) == 0 or len(offsets) != len(lps):
                out[i] = ("no answer tokens or offsets" if offsets is None or lps is None or len(lps) == 0 else
                          f"{len(offsets)} token offsets for {len(lps)} token log-probs")
                continue
            starts = sorted({w.sent_start for w in wds}) if self.params["scope"] == "sentence" else None
            parts = []
            for start, end, index in scopes(text, offsets, starts):
                scope_text = text[start:end].strip()
                pairs = []
                for t in index:
                    a, b = (int(x) for x in offsets[t])
                    pairs.append((scope_text, (text[start:a] + text[b:end]).strip()))
                parts.append((index, pairs))
            jobs.append((i, np.asarray(lps, dtype=np.float64), parts))
        all_pairs = [p for _, _, parts in jobs for _, ps in parts for p in ps]
        if all_pairs:
            sims = pair_scores(self, "similarity", "similarity_model", all_pairs, "unit_sar pairs")
            pos = 0
            for i, lps, parts in jobs:
                scores = np.full(len(lps), np.nan)
                for index, ps in parts:
                    g = sims[pos : pos + len(ps), 0]
                    pos += len(ps)
                    scores[index] = weighted_nll(lps[index], 1.0 - g, self.params["normalise"])
                out[i] = scores
        return out
