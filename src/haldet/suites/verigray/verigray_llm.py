"""VeriGray's zero-shot 7-way LLM classifier (paper section 5.1, "Zero-shot LLMs") as a detector.

The prompt (`haldet.suites.verigray.classifier`, registered as the verdict prompt `verigray_7way`, asked once per
sentence unit by the `verdict` stage through the run's model or `verdict.model` at an OpenAI-compatible endpoint,
with `verdict.temperature`) shows the document, the summary and one sentence, and asks for one of options A-G.
The parsed class is stored with the raw reply; an unparsable reply keeps its text and scores NaN with the reason.

Score of a sentence = 6 - faithfulness degree of the predicted class (Explicitly-Supported 0 ... Contradicting 6),
so higher = less faithful; `decision_threshold` 1 makes the verdict Unfaithful below Implicitly-Supported, the
paper's threshold. The 7-way class itself (for per-class F1 and selective prediction) is `6 - score`.
Response level: the least faithful sentence's score (or the verdict of a response-level record).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.unit import UnitScores
from haldet.schema import Instance, SpanLabel
from haldet.signals import Signal, SignalView
from haldet.stages.verdict_prompts import Ask, Example, VerdictPrompt, register_prompt
from haldet.suites.verigray.classifier import messages, parse_reply
from haldet.suites.verigray.labels import CLASSES, IMPLICIT

TOP = len(CLASSES) - 1
PROMPT_NAME = "verigray_7way"


def _messages(instance: Instance, response: str, examples: Sequence[Example], unit: SpanLabel | None,
              texts: Mapping[str, str]) -> list[dict[str, str]]:
    sentence = response if unit is None else (unit.text or response[unit.start:unit.end])
    return messages(texts["verigray_classify"], document=instance.context or instance.question, summary=response,
                    sentence=sentence)


def _parse(reply: str) -> tuple[str | None, str]:
    grade, how = parse_reply(reply)
    return (CLASSES[grade], "") if grade is not None else (None, how)


SEVEN_WAY = register_prompt(VerdictPrompt(
    name=PROMPT_NAME, version="vg7-v1", labels=CLASSES, scores={c: float(TOP - g) for g, c in enumerate(CLASSES)},
    messages=_messages, parse=_parse, max_new_tokens=384, level="sentence", templates=("verigray_classify",)))


class SentenceVerdicts(Detector):
    """A detector that reads one sentence-level verdict prompt's parsed labels: score of a label = `prompt.scores`,
    the response's score = its least faithful sentence's. Subclasses set `prompt` and `ask`."""

    requires = frozenset({Signal.VERDICT})
    levels: ClassVar[tuple[str, ...]] = ("response", "sentence")
    defaults: ClassVar[dict[str, Any]] = {}
    prompt: ClassVar[VerdictPrompt]
    ask: ClassVar[Ask]

    def _record(self, verdicts: Any) -> dict[str, Any] | None:
        rec = (verdicts or {}).get(self.ask.name)
        return rec if isinstance(rec, dict) else None

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        name, scores = self.prompt.name, self.prompt.scores
        for i, verdicts in enumerate(items.get(Signal.VERDICT)):
            rec = self._record(verdicts)
            units = (rec or {}).get("units")
            if rec is None:
                out.invalid(i, f"no {name} verdict (the call failed after its retries, or was not asked)")
            elif units is not None:
                values = [scores[u["label"]] for u in units if u.get("label") is not None]
                if len(values) < len(units) or not values:
                    out.invalid(i, next((u.get("reason") for u in units if u.get("label") is None), "no sentence"))
                else:
                    out.set(i, max(values))
            elif rec.get("label") is None:
                out.invalid(i, rec.get("reason") or "the reply states no class")
            else:
                out.set(i, scores[rec["label"]])
        return out

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        """Per item, one score per unit of `level` (aligned to `instance.units_of(level)`) with reasons."""
        values, reasons = [], []
        for inst, verdicts in zip(items.instances, items.get(Signal.VERDICT), strict=True):
            n = len(inst.units_of(level))
            vals, why = np.full(n, np.nan), [""] * n
            units = (self._record(verdicts) or {}).get("units")
            if units is None or len(units) != n:
                why = [f"no {self.prompt.name} verdict for this item's sentences" if units is None else
                       f"{len(units)} verdicts for {n} sentences"] * n
            else:
                for k, u in enumerate(units):
                    if u.get("label") is None:
                        why[k] = u.get("reason") or "the reply states no class"
                    else:
                        vals[k] = self.prompt.scores[u["label"]]
            values.append(vals)
            reasons.append(why)
        return UnitScores(values, reasons)


@register("verigray_llm")
class VeriGrayLLM(SentenceVerdicts):
    """Zero-shot 7-way classifier; see the module docstring."""
    method_family = "judges and verifiers"
    paper = "VeriGray's zero-shot seven-class LLM classifier of sentence faithfulness"
    peers = ()

    version = "1"
    decision_threshold: ClassVar[float] = float(TOP - IMPLICIT)  # score > 1: below Implicitly-Supported
    graded: ClassVar[bool] = True  # scores are 6 - a class degree (per-class F1, selective prediction)
    prompt = SEVEN_WAY
    ask = Ask(PROMPT_NAME)
