"""LettuceDetect (Kovács & Recski 2025, "LettuceDetect: A Hallucination Detection Framework for RAG
Applications"): a token-classification verifier (ModernBERT) reads the context, the question and the answer and
gives each answer token P(hallucinated | context); its published checkpoints were trained on RAGTruth.

Run through the `lettucedetect` package (optional extra: `pip install 'haldet[lettucedetect]'`): its
`HallucinationDetector(method="transformer")` formats the prompt, splits a context longer than `max_length` into
chunks and keeps each token's highest probability over the chunks (`predict(..., output_format="tokens")`). The
item's context is one passage; without a question the package's summarisation prompt is used. Answer tokens map
to character spans of the answer by the tokenizer's offsets, skipping zero-width tokens, as the package does when
it builds spans. Scores (higher = more likely hallucinated):
- response: the highest token probability of the answer (the package flags an answer when any token's
  probability reaches 0.5);
- a unit level (sentence, claim, span): the highest probability among the tokens that overlap the unit.
No context is NaN with that reason. The checkpoint (`model`, a hub id or a local directory) is in the identity.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.unit import UnitScores
from haldet.errors import HaldetError
from haldet.models.pairs.base import device_name, load_error, local_only
from haldet.signals import Signal, SignalView

_LOADED: dict[tuple[Any, ...], Any] = {}


def load_verifier(name: str, max_length: int, device: str) -> Any:
    """The package's transformer detector for checkpoint `name`, loaded once per process; one error naming the
    missing extra or the checkpoint that cannot be loaded."""
    key = (name, max_length, device)
    if key not in _LOADED:
        try:
            from lettucedetect.models.inference import HallucinationDetector
        except ImportError as exc:
            raise HaldetError(f"the lettucedetect detector needs the `lettucedetect` package ({exc})",
                              where="detector lettucedetect",
                              hint="pip install 'haldet[lettucedetect]' (or leave the detector out)") from exc
        try:
            _LOADED[key] = HallucinationDetector(method="transformer", model_path=name, max_length=max_length,
                                                 device=device_name(device), local_files_only=local_only(name))
        except (OSError, ValueError) as exc:
            raise load_error(name, exc, "LettuceDetect checkpoint") from exc
    return _LOADED[key]


def answer_offsets(tokenizer: Any, answer: str) -> list[tuple[int, int]]:
    """Character span of each answer token with a width (the package's alignment of its token results)."""
    enc = tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
    return [(int(s), int(e)) for s, e in enc["offset_mapping"] if e > s]


def highest_overlapping(probs: np.ndarray, offsets: list[tuple[int, int]], start: int, end: int) -> float:
    """The highest probability among tokens overlapping [start, end) (NaN when none does)."""
    hit = [p for p, (s, e) in zip(probs, offsets, strict=True) if s < end and e > start]
    return float(max(hit)) if hit else float("nan")


@register("lettucedetect")
class LettuceDetect(Detector):
    """A token-classification verifier of the answer against its context (see the module docstring)."""

    method_family = "judges and verifiers"
    paper = "Kovacs & Recski 2025, LettuceDetect: a hallucination detection framework for RAG applications"
    peers = ()
    requires = frozenset({Signal.RESPONSE})
    levels: ClassVar[tuple[str, ...]] = ("response", "sentence", "claim", "span")
    auxiliary: ClassVar[dict[str, str]] = {"model": "token_classifier"}
    defaults: ClassVar[dict[str, Any]] = {"model": "KRLabsOrg/lettucedect-base-modernbert-en-v1", "max_length": 4096,
                                          "device": "auto"}

    def _tokens(self, items: SignalView) -> list[tuple[np.ndarray, list[tuple[int, int]]] | str]:
        """Per item (answer-token probabilities, their character spans), or why there are none."""
        verifier = None
        out: list[tuple[np.ndarray, list[tuple[int, int]]] | str] = []
        advance = self.progress("lettucedetect", len(items))
        for inst, resp in zip(items.instances, items.get(Signal.RESPONSE), strict=True):
            context = (inst.context or "").strip()
            if not isinstance(resp, str) or not resp.strip():
                out.append("empty response")
            elif not context:
                out.append("no context to verify the answer against")
            else:
                if verifier is None:
                    verifier = load_verifier(str(self.params["model"]), int(self.params["max_length"]),
                                             str(self.params["device"]))
                tokens = verifier.predict(context=[context], answer=resp, question=inst.question or None,
                                          output_format="tokens")
                offsets = answer_offsets(verifier.detector.tokenizer, resp)
                probs = np.array([float(t["prob"]) for t in tokens[: len(offsets)]])
                out.append((probs, offsets[: len(probs)]) if len(probs) else "no answer token")
            advance(1)
        return out

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, got in enumerate(self._tokens(items)):
            if isinstance(got, str):
                out.invalid(i, got)
            else:
                out.set(i, float(got[0].max()))
        return out

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        values: list[np.ndarray] = []
        reasons: list[list[str]] = []
        for inst, got in zip(items.instances, self._tokens(items), strict=True):
            units = list(inst.units_of(level))
            v, r = np.full(len(units), np.nan), [""] * len(units)
            for u, unit in enumerate(units):
                if isinstance(got, str):
                    r[u] = got
                else:
                    v[u] = highest_overlapping(got[0], got[1], unit.start, unit.end)
                    if not np.isfinite(v[u]):
                        r[u] = "no answer token inside the unit"
            values.append(v)
            reasons.append(r)
        return UnitScores(values, reasons)
