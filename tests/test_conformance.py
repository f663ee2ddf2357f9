"""The conformance suite over every registered detector and each of its variants (parametrized from the registry:
a new detector is checked without touching this file), and negative controls it must reject."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from haldet.detectors.base import DETECTORS, Detector, Scores
from haldet.signals import Signal, SignalView
from haldet.testing.conformance import check_detector, light


def _cases() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for name, cls in DETECTORS:
        variants = list(cls.variants) or [None]
        cases += [(name, {} if v is None else {"variant": v}) for v in variants]
    return cases


CASES = _cases()


@pytest.fixture(scope="session")
def small_models(tmp_path_factory) -> dict[str, str]:
    """Small local stand-ins for each auxiliary model kind: a random 2-layer NLI classifier (MNLI labels) with
    MiniLM's tokenizer, a random 2-way fact-checking head; the packaged MiniLM for similarity and BERTScore."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from haldet.util.assets import resolve_embedding

    path = tmp_path_factory.mktemp("tiny-nli")
    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=3,
                        id2label={0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"},
                        label2id={"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2})
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    from tiny_llama import build_tiny_checker, build_tiny_llama

    support = build_tiny_checker(tmp_path_factory.mktemp("tiny-minicheck"))  # a 2-way head (label 1 = supported)

    llama = build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    return {"nli": str(path), "similarity": "minilm", "bertscore": "minilm", "support": str(support),
            "causal_lm": str(llama)}


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{p.get('variant', 'default')}" for n, p in CASES])
def test_detector_conforms(name: str, params: dict[str, Any], small_models: dict[str, str]) -> None:
    cls = DETECTORS.get(name)
    problems = check_detector(cls, light(cls, params, small_models))
    assert not problems, f"{name} {params}: " + "; ".join(problems)


# ---------------------------------------------------------------------------------------------- negative controls
class _Honest(Detector):
    """Mean token NLL: a correct, training-free detector the cheats below start from."""

    requires = frozenset({Signal.TOKEN_LOGPROBS})

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, lp in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            if lp is None or len(lp) == 0:
                out.invalid(i, "no tokens")
            else:
                out.set(i, float(-np.mean(lp)))
        return out


class _ReadsReferences(_Honest):
    """Cheats: adds 1 when the answer misses the item's reference."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        for i, (inst, gen) in enumerate(zip(items.instances, items.generations, strict=True)):
            if np.isfinite(out.values[i]) and not any(r.lower() in gen.response.lower() for r in inst.references):
                out.values[i] += 1.0
        return out


class _HalfOnFailure(_Honest):
    """Cheats: a missing item scores 0.5 instead of NaN."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        for i in np.flatnonzero(~np.isfinite(out.values)):
            out.set(int(i), 0.5)
        return out


class _Constant(_Honest):
    def score(self, items: SignalView) -> Scores:
        return Scores(values=np.full(len(items), 0.5))


class _ReadsUndeclared(_Honest):
    def score(self, items: SignalView) -> Scores:
        items.get(Signal.TOKEN_ENTROPIES)
        return super().score(items)


class _BatchNormalised(_Honest):
    """Scores relative to the batch mean: depends on which items are scored together."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        out.values = out.values - np.nanmean(out.values)
        return out


class _Unseeded(_Honest):
    trains = True

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.shift = float(np.random.default_rng().random())

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        out.values = out.values + self.shift
        return out


class _BadVariant(_Honest):
    variants: ClassVar[dict[str, str]] = {"a": "one", "b": "two"}
    defaults: ClassVar[dict[str, Any]] = {"variant": "c"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**{"variant": "a", **params})


class _ReadsUnitLabels(_Honest):
    """A unit-level cheat: each unit scores 1 when it is labelled hallucinated."""

    levels: ClassVar[tuple[str, ...]] = ("response", "sentence")

    def score_units(self, items: SignalView, level: str) -> Any:
        from haldet.detectors.unit import UnitScores

        values = [np.array([float(u.category == "hallucination") for u in inst.units_of(level)])
                  for inst in items.instances]
        return UnitScores(values, [[""] * len(v) for v in values])


CONTROLS = [(_ReadsReferences, "references"), (_HalfOnFailure, "instead of NaN"), (_Constant, "a constant"),
            (_ReadsUndeclared, "does not declare"), (_BatchNormalised, "which other items"),
            (_Unseeded, "not deterministic"), (_BadVariant, "default variant"),
            (_ReadsUnitLabels, "units' labels change")]


def test_honest_control_conforms() -> None:
    _Honest.name = "honest"
    assert check_detector(_Honest) == []


@pytest.mark.parametrize(("cls", "words"), CONTROLS, ids=[c.__name__ for c, _ in CONTROLS])
def test_suite_rejects_cheating_detector(cls: type[Detector], words: str) -> None:
    cls.name = cls.__name__.lower()
    problems = check_detector(cls)
    assert any(words in p for p in problems), problems


def test_score_views_are_spied_in_the_runner(tmp_path: Path) -> None:
    """The views come from run_detector: the test views carry no labels, the training view does."""
    from haldet.testing.conformance import Spy, run_through_runner, synthetic_view

    _Unseeded.name = "unseeded"
    spy = Spy([], [])
    run_through_runner(_Unseeded, {}, synthetic_view({Signal.TOKEN_LOGPROBS}), tmp_path, spy)
    assert spy.score_views and all(v.labels is None for v in spy.score_views)
    assert spy.fit_views[0].labels is not None and len(spy.fit_views[0]) == 36


def test_developing_template_runs_as_written_and_conforms() -> None:
    """The detector template of docs/developing.md, executed verbatim, registers and passes the suite."""
    import re

    text = (Path(__file__).parents[1] / "docs" / "developing.md").read_text()
    section = text.split("## Writing a detector", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)  # type: ignore[union-attr]
    namespace: dict[str, Any] = {"__name__": "developing_template"}
    try:
        exec(compile(code, "docs/developing.md", "exec"), namespace)
        cls = DETECTORS.get("my_detector")
        for variant in cls.variants:
            assert check_detector(cls, {"variant": variant}) == []
    finally:
        DETECTORS._items.pop("my_detector", None)
