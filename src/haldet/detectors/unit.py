"""Unit-level detectors: one score per unit (entity, sentence, claim, span, token) of each item's response.

A detector declares the levels it scores in `levels`. Response-level detectors (the default) implement `score`.
A `UnitDetector` implements `token_scores` (one score per answer token, higher = more likely hallucinated) and gets
both levels for free: `score_units(items, level)` aggregates token scores over the tokens that overlap each unit
(by the token pass's character offsets; `aggregate` = mean by default, max or sum), aligned to
`instance.units_of(level)`; `score(items)` aggregates over all answer tokens (the response as one unit).

    @register("my_token_score")
    class MyTokenScore(UnitDetector):
        requires = UnitDetector.requires | {Signal.ANSWER_ENTROPIES}
        def token_scores(self, items: SignalView) -> list[np.ndarray | str]: ...   # [T] per item, or a reason
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, UnitScores
from haldet.schema import LEVELS, SpanLabel
from haldet.signals import Signal, SignalView
from haldet.text.linguistics import linguistics_identity

AGGREGATES = ("mean", "max", "sum")


def unit_token_index(offsets: np.ndarray, units: list[SpanLabel]) -> list[np.ndarray]:
    """For each unit, the indices of the tokens whose character span overlaps it (zero-width tokens never do)."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    nonempty = ends > starts
    return [np.flatnonzero(nonempty & (starts < u.end) & (ends > u.start)) for u in units]


def aggregate(values: np.ndarray, how: str) -> float:
    if how == "mean":
        return float(np.mean(values))
    if how == "max":
        return float(np.max(values))
    if how == "sum":
        return float(np.sum(values))
    raise ValueError(f"unknown aggregate {how!r}; choose from {', '.join(AGGREGATES)}")


class UnitDetector(Detector):
    """Base of token-score detectors scored at any level."""

    levels: ClassVar[tuple[str, ...]] = LEVELS
    requires: ClassVar[frozenset[Signal]] = frozenset({Signal.TOKEN_OFFSETS})
    defaults: ClassVar[dict[str, Any]] = {"aggregate": "mean"}

    aggregates: ClassVar[tuple[str, ...]] = AGGREGATES

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["aggregate"] not in self.aggregates:
            raise ValueError(f"detector {self.name!r}: aggregate must be one of {', '.join(self.aggregates)}, "
                             f"not {self.params['aggregate']!r}")

    def combine(self, values: np.ndarray) -> float:
        """A unit's score from the finite scores of its tokens (`aggregate`); a subclass may add its own ways."""
        return aggregate(values, self.params["aggregate"])

    def reads_linguistics(self) -> bool:
        """Whether this instance reads spaCy tags (`haldet.text.linguistics`); their pipeline then keys its scores."""
        return False

    def identity(self) -> dict[str, Any]:
        out = super().identity()
        if self.reads_linguistics():
            out["models"] = {**out.get("models", {}), "linguistics": linguistics_identity()}
        return out

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        """Per item, one score per answer token (NaN allowed for single tokens), or a reason the item has none."""
        raise NotImplementedError

    def score(self, items: SignalView) -> Scores:
        """Response level: the aggregate over all answer tokens."""
        out = Scores.empty(len(items))
        for i, tokens in enumerate(self.token_scores(items)):
            if isinstance(tokens, str):
                out.invalid(i, tokens)
                continue
            finite = tokens[np.isfinite(tokens)]
            if len(finite) == 0:
                out.invalid(i, "no answer token has a valid score")
            else:
                out.set(i, self.combine(finite))
        return out

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        """One score per unit of `level` per item: the aggregate of the scores of the tokens it overlaps."""
        if level == "response":
            flat = self.score(items)
            return UnitScores([flat.values[i : i + 1] for i in range(len(items))],
                              [[flat.reasons[i]] for i in range(len(items))])
        offsets = items.get(Signal.TOKEN_OFFSETS)
        values: list[np.ndarray] = []
        reasons: list[list[str]] = []
        for inst, tokens, offs in zip(items.instances, self.token_scores(items), offsets, strict=True):
            units = inst.units_of(level)
            vals = np.full(len(units), np.nan)
            why = [""] * len(units)
            problem = tokens if isinstance(tokens, str) else (
                "no token offsets for this item" if offs is None else
                f"{len(tokens)} token scores for {len(offs)} token offsets" if len(offs) != len(tokens) else "")
            for u, index in enumerate([] if problem else unit_token_index(offs, units)):
                scores = np.asarray(tokens)[index]
                scores = scores[np.isfinite(scores)]
                if len(index) == 0:
                    why[u] = "no answer token overlaps this unit"
                elif len(scores) == 0:
                    why[u] = "no token of this unit has a valid score"
                else:
                    vals[u] = self.combine(scores)
            if problem:
                why = [problem] * len(units)
            values.append(vals)
            reasons.append(why)
        return UnitScores(values, reasons)
