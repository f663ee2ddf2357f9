"""Verbalized confidence (paper appendix E.2): the model's self-reported confidence c, score 1 - c."""

from __future__ import annotations

from typing import Any, ClassVar

from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView
from haldet.text.confidence import parse_confidence


@register("verbalized")
class Verbalized(Detector):
    """s = 1 - c, c parsed from the auxiliary confidence response by `parse_confidence`.

    Variant "strict" (default): an unparsable reply is invalid (NaN with the reason), so coverage shows how often
    the model gave no confidence. Variant "paper": an unparsable reply scores c = 0.5, as the paper does; coverage
    then reads 100% and `meta["unparsable"]` counts the replies that got 0.5 (the coverage difference).
    """
    method_family = "self-assessment"
    paper = "Tian et al. 2023, Just ask for calibration; Xiong et al. 2024 (verbalized confidence)"
    peers = ("lm-polygraph", "TruthTorchLM")

    requires = frozenset({Signal.VERBALIZED})
    version = "2"
    variants: ClassVar[dict[str, str]] = {
        "strict": "unparsable reply -> NaN with the reason",
        "paper": "unparsable reply -> c = 0.5 (OpenHalDet appendix E.2)",
    }
    defaults: ClassVar[dict[str, Any]] = {"variant": "strict"}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        unparsable = 0
        for i, text in enumerate(items.get(Signal.VERBALIZED)):
            if text is None:
                out.invalid(i, "no verbalized-confidence response")
                continue
            conf = parse_confidence(text)
            if conf is None:
                unparsable += 1
                if self.params["variant"] == "paper":
                    out.set(i, 0.5)
                else:
                    out.invalid(i, f"no confidence found in {text[:60]!r}")
                continue
            out.set(i, 1.0 - conf)
        self.meta["unparsable"] = unparsable
        if self.params["variant"] == "paper" and unparsable:
            self.meta["note"] = (f"{unparsable}/{len(items)} unparsable replies scored 0.5 (paper variant); "
                                 f"the strict variant's coverage would be {1 - unparsable / max(1, len(items)):.0%}")
        return out
