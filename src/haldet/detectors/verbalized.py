"""Verbalized confidence (paper appendix E.2): the model's self-reported confidence c, score 1 - c."""

from __future__ import annotations

from typing import Any, ClassVar

from haldet.confidence import parse_confidence
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


@register("verbalized")
class Verbalized(Detector):
    """s = 1 - c, c parsed from the auxiliary confidence response by `parse_confidence`.

    An unparseable response is invalid (NaN with the reason); the paper scores it as c = 0.5 instead, which
    `neutral_fallback: true` reproduces.
    """

    requires = frozenset({Signal.VERBALIZED})
    defaults: ClassVar[dict[str, Any]] = {"neutral_fallback": False}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, text in enumerate(items.get(Signal.VERBALIZED)):
            if text is None:
                out.invalid(i, "no verbalized-confidence response")
                continue
            conf = parse_confidence(text)
            if conf is None:
                if self.params["neutral_fallback"]:
                    out.set(i, 0.5)
                else:
                    out.invalid(i, f"no confidence found in {text[:60]!r}")
                continue
            out.set(i, 1.0 - conf)
        return out
