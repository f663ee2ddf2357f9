"""Self-evaluation P(True) (paper appendix E.3): score 1 - P(True) of the model's verdict on its own answer."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView

# "incorrect" contains "correct": negative words are matched as whole words and the last verdict word wins
_VERDICT = re.compile(r"\b(incorrect|not correct|wrong|false|no|correct|right|true|yes)\b", re.IGNORECASE)
_NEGATIVE = {"incorrect", "not correct", "wrong", "false", "no"}


def parse_verdict(text: str | None) -> bool | None:
    """True for a "correct" verdict, False for "incorrect", None when the text has neither (last word wins)."""
    if not text:
        return None
    found = _VERDICT.findall(text)
    if not found:
        return None
    return found[-1].lower() not in _NEGATIVE


@register("self_eval")
class SelfEval(Detector):
    """s = 1 - P(True), P(True) clipped to [0, 1].

    Variant "normalized" (default): P(True) = p(True words) / (p(True words) + p(False words)). A small model
    spreads most next-token mass over other tokens, so the raw probability is tiny for every item and mostly
    measures how well the model follows the answer format; normalising over the two answers keeps the verdict.
    Variant "raw" (the paper, appendix E.3): P(True) is the raw next-token probability mass of the True words.
    Only when the probability is absent (an API without log-probs) is the verdict text parsed: "Correct" -> 0,
    "Incorrect" -> 1; neither -> invalid.

    The "decision" variants read the evaluator procedure's records (`auxiliary.procedure: evaluator`, OpenHalDet
    E.3: a separate evaluator chat, the model reasons, then ends with Correct or Incorrect): p is the probability of
    the token where the last decision word starts. "decision": P(True) = p after "Correct", 1 - p after "Incorrect"
    (the decision's probability read as a probability that the answer is true). "decision_literal": P(True) = p
    whatever the decision says, the paper's sentence read word for word (a confident "Incorrect" then scores as a
    confident "Correct"). Without a log-prob the decision itself is the fallback (Correct -> 0, Incorrect -> 1);
    records of the follow-up procedure are invalid for these variants (NaN naming the setting).
    """
    method_family = "self-assessment"
    paper = "Kadavath et al. 2022, Language models (mostly) know what they know (P(True))"
    peers = ("lm-polygraph", "TruthTorchLM", "uqlm")

    requires = frozenset({Signal.SELF_EVAL})
    version = "2"
    variants: ClassVar[dict[str, str]] = {
        "normalized": "1 - P(True) / (P(True) + P(False)): the verdict, independent of format mass",
        "raw": "1 - P(True) from the raw token probability (the follow-up procedure)",
        "decision": "evaluator procedure (E.3): P(True) = p(decision token), 1 - p after Incorrect",
        "decision_literal": "evaluator procedure (E.3): P(True) = p(decision token) whatever the decision",
    }
    defaults: ClassVar[dict[str, Any]] = {"variant": "normalized", "text_fallback": True}

    def _p_true(self, value: dict[str, Any]) -> float | None:
        if self.params["variant"] == "raw":
            lp = value.get("logp_true")
            return None if lp is None else math.exp(float(lp))
        p = value.get("p_true")
        return None if p is None else float(p)

    def _decision(self, value: dict[str, Any]) -> tuple[float | None, str]:
        """(score, reason when None) of an evaluator record (the "decision" variants)."""
        if value.get("procedure") != "evaluator":
            return None, "no evaluator reply (set auxiliary.procedure: evaluator for this variant)"
        decision, lp = value.get("decision"), value.get("logp_decision")
        if decision not in ("correct", "incorrect"):
            return None, f"no Correct/Incorrect decision in {str(value.get('text'))[-60:]!r}"
        if lp is None:
            if not self.params["text_fallback"]:
                return None, "no decision log-prob (text fallback disabled)"
            return (0.0 if decision == "correct" else 1.0), ""
        p = min(1.0, max(0.0, math.exp(float(lp))))
        p_true = p if decision == "correct" or self.params["variant"] == "decision_literal" else 1.0 - p
        return 1.0 - p_true, ""

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, value in enumerate(items.get(Signal.SELF_EVAL)):
            if not isinstance(value, dict):
                out.invalid(i, "no self-evaluation")
                continue
            if self.params["variant"].startswith("decision"):
                score, reason = self._decision(value)
                if score is None:
                    out.invalid(i, reason)
                else:
                    out.set(i, score)
                continue
            p = self._p_true(value)
            if p is not None:
                if not math.isfinite(p):
                    out.invalid(i, "non-finite P(True)")
                    continue
                out.set(i, 1.0 - min(1.0, max(0.0, p)))
                continue
            if not self.params["text_fallback"]:
                out.invalid(i, "no P(True) (text fallback disabled)")
                continue
            verdict = parse_verdict(value.get("text"))
            if verdict is None:
                out.invalid(i, f"no P(True) and no verdict in {str(value.get('text'))[:60]!r}")
            else:
                out.set(i, 0.0 if verdict else 1.0)
        return out
