"""A panel of LLM judges as a detector (the idea of uqlm's `LLMPanel`; the judge's three grades follow Chen &
Mueller 2023 as uqlm's default template does): several LLMs each grade the answer to the question (with its
context) CORRECT, INCORRECT or UNSURE, and the panel's score combines their grades.

Judge j's hallucination score h_j = 0 (CORRECT), 1 (INCORRECT), 0.5 (UNSURE); a reply naming no grade leaves the
judge out for that item (NaN, asked again next time). Variants:
- "mean": s = the mean of h_j over the judges that graded (uqlm's "avg" of the confidences c_j = 1 - h_j, as 1 - it);
- "vote": the majority of the judges' verdicts, INCORRECT against CORRECT (UNSURE casts no vote): 1 when more
  than half of those votes say INCORRECT, 0 when fewer, 0.5 on a tie.
No grade from any judge is NaN with each judge's reason. Each judge is a local model (a name or path) or a model
behind an OpenAI-compatible endpoint, asked through the one structured client (`haldet.models.pairs.prompted`,
question "answer_correct"); each (question, answer) is asked once per judge and kept in the cell's pair cache.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import ENDPOINT_PARAMS, prompted_scores
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


def panel_score(grades: np.ndarray, variant: str) -> float:
    """The panel's score from the judges' hallucination scores (NaN = no grade; at least one grade)."""
    h = grades[np.isfinite(grades)]
    if variant == "mean":
        return float(h.mean())
    bad, good = int((h == 1.0).sum()), int((h == 0.0).sum())
    return 1.0 if bad > good else 0.0 if bad < good else 0.5


@register("llm_panel")
class LLMPanel(Detector):
    """s = the panel's combination (variant) of the judges' grades; see the module docstring. `judges`: a list of
    model names (local, or at `base_url` when it is set) or {"model", "base_url", "api_key_env"} entries."""

    method_family = "judges and verifiers"
    paper = "uqlm's LLM panel (Bouchard & Chauhan 2025); grades after Chen & Mueller 2023"
    peers = ("uqlm",)
    requires = frozenset({Signal.RESPONSE})
    auxiliary: ClassVar[dict[str, str]] = {"judges": "causal_lm"}
    variants: ClassVar[dict[str, str]] = {
        "mean": "mean of the judges' scores INCORRECT 1 / UNSURE 0.5 / CORRECT 0 (uqlm's avg)",
        "vote": "majority of the judges' INCORRECT vs CORRECT verdicts (0.5 on a tie)",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "variant": "mean", "judges": ["smollm2-135m", "gemma3-270m"], "base_url": None,
        "api_key_env": "OPENAI_API_KEY", "timeout": 60.0, "concurrency": 8, "retries": 4, "batch_size": 8,
    }
    conformance_exemptions: ClassVar[dict[str, str]] = {
        "check_scores_clean_items": "the suite's stand-in judge (a random tiny Llama) never names a grade, so every "
                                    "item is NaN with that reason; grades are tested on the mock server's replies"}

    def judge_settings(self) -> list[tuple[str, dict[str, Any]]]:
        """(model, endpoint settings) of every judge, in the order given."""
        raw = self.params["judges"]
        entries = raw if isinstance(raw, (list, tuple)) else [raw]
        if not entries:
            raise ValueError("llm_panel: `judges` names no judge")
        shared = {k: self.params.get(k) for k in ENDPOINT_PARAMS}
        out = []
        for entry in entries:
            if isinstance(entry, dict):
                if not entry.get("model"):
                    raise ValueError(f"llm_panel: judge entry {entry!r} has no `model`")
                out.append((str(entry["model"]), {**shared, **{k: entry[k] for k in ENDPOINT_PARAMS if k in entry}}))
            else:
                out.append((str(entry), shared))
        return out

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.judge_settings()  # a malformed panel fails at construction, before any work

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        todo: list[tuple[int, tuple[str, str]]] = []
        for i, (inst, resp) in enumerate(zip(items.instances, items.get(Signal.RESPONSE), strict=True)):
            if not isinstance(resp, str) or not resp.strip():
                out.invalid(i, "empty response")
                continue
            asked = f"Question: {inst.question}" if inst.question else "Question: (none given)"
            if inst.context:
                asked = f"Context: {inst.context}\n\n{asked}"
            todo.append((i, (asked, resp.strip())))
        if not todo:
            return out
        pairs = [p for _, p in todo]
        grades = np.full((len(todo), len(self.judge_settings())), np.nan)
        why: list[list[str]] = [[] for _ in todo]
        used = []
        for j, (model, settings) in enumerate(self.judge_settings()):
            values, loaded = prompted_scores(self, "answer_correct", model, pairs, f"llm_panel judge {j + 1}",
                                             settings)
            used.append(loaded.id)
            grades[:, j] = values[:, 0]
            for row, pair in enumerate(pairs):
                if not np.isfinite(values[row, 0]):
                    why[row].append(f"{model}: {loaded.why(pair) or 'no grade'}")
        self.meta["judges"] = used
        for row, (i, _) in enumerate(todo):
            if np.isfinite(grades[row]).any():
                out.set(i, panel_score(grades[row], self.params["variant"]))
            else:
                out.invalid(i, "no judge graded the answer: " + "; ".join(why[row]))
        return out
