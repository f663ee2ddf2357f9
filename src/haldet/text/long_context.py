"""Contexts longer than the model's window: a recorded policy instead of a crash or a silent cut.

TRIVIA+ articles reach ~94K characters; a proxy model's window is often 2-8K tokens. Two policies:
- `truncate`: keep the passages of the article most relevant to the question and the answer (TF-IDF cosine
  similarity of each passage to question + answer), in their original order, until the token budget is full;
  dropped stretches are marked with " [...] ". The record says how much was kept.
- `skip`: leave the item's context as is and mark it too long: every detector gives it NaN with that reason
  (coverage drops, per length stratum in the report).
Items that fit are untouched under both policies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

POLICIES = ("truncate", "skip")
GAP = " [...] "
_PASSAGE_SPLIT = re.compile(r"\n\s*\n|(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


@dataclass(frozen=True)
class ContextFit:
    """What the policy did to one context: the text to use, and what a record should say about it."""

    text: str
    policy: str
    original_tokens: int
    kept_tokens: int
    truncated: bool = False
    too_long: bool = False  # `skip` policy and over budget: detectors must give NaN with `reason`

    @property
    def reason(self) -> str:
        if self.too_long:
            return (f"context of {self.original_tokens} tokens exceeds the {self.kept_tokens}-token budget "
                    f"(long_context policy 'skip')")
        return ""

    def record(self) -> dict[str, object]:
        return {"policy": self.policy, "original_tokens": self.original_tokens, "kept_tokens": self.kept_tokens,
                "truncated": self.truncated, "too_long": self.too_long}


def passages(text: str) -> list[str]:
    """The article cut into paragraphs and sentences (the units the truncation keeps or drops)."""
    return [p.strip() for p in _PASSAGE_SPLIT.split(text) if p and p.strip()]


def relevance(chunks: list[str], query: str) -> np.ndarray:
    """TF-IDF cosine similarity of each chunk to the query (fitted on the chunks and the query together)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        matrix = TfidfVectorizer(lowercase=True, stop_words="english").fit_transform([*chunks, query])
    except ValueError:  # only stop words / empty vocabulary: no passage is more relevant than another
        return np.zeros(len(chunks))
    sims = (matrix[:-1] @ matrix[-1].T).toarray().ravel()
    return np.asarray(sims, dtype=np.float64)


def fit_context(context: str, query: str, budget: int, count_tokens: Callable[[str], int],
                policy: str = "truncate") -> ContextFit:
    """`context` within `budget` tokens (counted by `count_tokens`) under `policy`."""
    if policy not in POLICIES:
        raise ValueError(f"long-context policy must be one of {POLICIES}, not {policy!r}")
    total = count_tokens(context)
    if total <= budget:
        return ContextFit(context, policy, total, total)
    if policy == "skip":
        return ContextFit(context, policy, total, budget, too_long=True)
    chunks = passages(context)
    sizes = [count_tokens(c) + 2 for c in chunks]  # + separator tokens
    order = np.argsort(-relevance(chunks, query), kind="stable")
    keep: set[int] = set()
    used = 0
    for i in order:
        if used + sizes[i] <= budget:
            keep.add(int(i))
            used += sizes[i]
    parts: list[str] = []
    for i, chunk in enumerate(chunks):
        if i in keep:
            parts.append(chunk)
        elif not parts or parts[-1] != GAP.strip():
            parts.append(GAP.strip())
    text = " ".join(parts)
    return ContextFit(text, policy, total, count_tokens(text), truncated=True)
