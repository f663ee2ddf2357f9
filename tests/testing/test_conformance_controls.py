"""Negative controls of the conformance checks: toy detectors each broken in one property fail exactly the check of
that property (and an honest one fails none); an exemption needs a known check and a reason; the float tolerance
of the batch checks admits rounding and nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from haldet.detectors.base import Detector, Scores
from haldet.errors import HaldetError
from haldet.signals import Signal, SignalView
from haldet.testing.conformance import (
    FLOAT_RTOL,
    SPREAD_ATOL,
    CannotRun,
    Case,
    Spy,
    agree,
    applicable,
    check_detector,
    run_check,
    run_through_runner,
    synthetic_view,
)


class _Honest(Detector):
    """Mean token NLL: a correct, training-free detector the broken ones below start from."""

    name = "honest"
    requires = frozenset({Signal.TOKEN_LOGPROBS})

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, lp in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            if lp is None or len(lp) == 0:
                out.invalid(i, "no tokens")
            else:
                out.set(i, float(-np.mean(lp)))
        return out


class _HonestTrained(_Honest):
    """Mean token NLL plus a shift learnt (deterministically) from the training items."""

    trains = True

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.shift = float(np.mean([len(lp) for lp in train.get(Signal.TOKEN_LOGPROBS)]))

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        out.values = out.values + self.shift
        return out


class _HonestUnits(_Honest):
    """Every sentence unit scores its item's mean token NLL (NaN with a reason when the item has no tokens)."""

    levels: ClassVar[tuple[str, ...]] = ("response", "sentence")

    def score_units(self, items: SignalView, level: str) -> Any:
        from haldet.detectors.unit import UnitScores

        flat = self.score(items)
        units = [inst.units_of(level) for inst in items.instances]
        return UnitScores([np.full(len(u), v) for u, v in zip(units, flat.values, strict=True)],
                          [[r] * len(u) for u, r in zip(units, flat.reasons, strict=True)])


class _ReadsReferences(_Honest):
    """Adds 1 when the answer misses the item's reference."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        for i, (inst, gen) in enumerate(zip(items.instances, items.generations, strict=True)):
            if np.isfinite(out.values[i]) and not any(r.lower() in gen.response.lower() for r in inst.references):
                out.values[i] += 1.0
        return out


class _HalfOnFailure(_Honest):
    """A missing item scores 0.5 instead of NaN."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        for i in np.flatnonzero(~np.isfinite(out.values)):
            out.set(int(i), 0.5)
        return out


class _Constant(_Honest):
    """0.5 for every item that has tokens."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        out.values[np.isfinite(out.values)] = 0.5
        return out


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


class _ByPosition(_Honest):
    """Adds 0.1 at odd positions of the batch: order matters, a subset starting at an even position does not."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        out.values = out.values + 0.1 * (np.arange(len(items)) % 2)
        return out


class _BareNaN(_Honest):
    """Short answers (three tokens) score NaN with no reason."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        for i, lp in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            if lp is not None and len(lp) == 3:
                out.values[i], out.reasons[i] = np.nan, ""
        return out


class _MostlyNaN(_Honest):
    """Only answers of ten or more tokens score."""

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        for i, lp in enumerate(items.get(Signal.TOKEN_LOGPROBS)):
            if lp is not None and 0 < len(lp) < 10:
                out.invalid(i, "too short")
        return out


class _Unseeded(_HonestTrained):
    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.shift = float(np.random.default_rng().random())


class _LosesStateOnLoad(_HonestTrained):
    def load(self, path: Path) -> None:
        super().load(path)
        self.shift += 1.0


class _BadVariant(_Honest):
    variants: ClassVar[dict[str, str]] = {"a": "one", "b": "two"}
    defaults: ClassVar[dict[str, Any]] = {"variant": "c"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**{"variant": "a", **params})


class _IdentityNotJson(_Honest):
    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "seen": {1, 2}}


class _ReadsUnitLabels(_HonestUnits):
    """Each unit labelled hallucinated scores 1 more."""

    def score_units(self, items: SignalView, level: str) -> Any:
        out = super().score_units(items, level)
        for k, inst in enumerate(items.instances):
            hallucinated = [float(u.category == "hallucination") for u in inst.units_of(level)]
            out.values[k] = out.values[k] + np.array(hallucinated)
        return out


class _UnitsMisaligned(_HonestUnits):
    """One score per item whatever its units."""

    def score_units(self, items: SignalView, level: str) -> Any:
        out = super().score_units(items, level)
        return type(out)([v[:1] for v in out.values], [r[:1] for r in out.reasons])


class _UnitsByPosition(_HonestUnits):
    def score_units(self, items: SignalView, level: str) -> Any:
        out = super().score_units(items, level)
        return type(out)([v + 0.1 * (k % 2) for k, v in enumerate(out.values)], out.reasons)


class _UnitsScoreMissing(_HonestUnits):
    """Units of items without tokens score 0 instead of NaN."""

    def score_units(self, items: SignalView, level: str) -> Any:
        out = super().score_units(items, level)
        return type(out)([np.nan_to_num(v) for v in out.values], out.reasons)


CONTROLS = [(_ReadsReferences, "check_no_gold_access"), (_HalfOnFailure, "check_missing_evidence_is_nan"),
            (_Constant, "check_not_constant"), (_ReadsUndeclared, "check_reads_declared_signals"),
            (_BatchNormalised, "check_subset_invariance"), (_ByPosition, "check_order_invariance"),
            (_BareNaN, "check_nan_with_reason"), (_MostlyNaN, "check_scores_clean_items"),
            (_Unseeded, "check_fit_deterministic"), (_LosesStateOnLoad, "check_save_load_round_trip"),
            (_BadVariant, "check_declarations"), (_IdentityNotJson, "check_identity_json"),
            (_ReadsUnitLabels, "check_unit_labels_unread"), (_UnitsMisaligned, "check_unit_alignment"),
            (_UnitsByPosition, "check_unit_order_invariance"), (_UnitsScoreMissing, "check_unit_missing_evidence")]


def _failing(cls: type[Detector]) -> set[str]:
    """The checks `cls` fails (a check that cannot run because another fails first does not count)."""
    failing = set()
    with Case(cls) as case:
        for name in applicable(cls):
            try:
                if run_check(case, name):
                    failing.add(name)
            except CannotRun:
                pass
    return failing


@pytest.mark.parametrize("cls", [_Honest, _HonestTrained, _HonestUnits], ids=lambda c: c.__name__)
def test_honest_controls_pass_every_check(cls: type[Detector]) -> None:
    assert _failing(cls) == set()
    assert check_detector(cls) == []


@pytest.mark.parametrize(("cls", "check"), CONTROLS, ids=[c.__name__ for c, _ in CONTROLS])
def test_a_broken_detector_fails_exactly_its_check(cls: type[Detector], check: str) -> None:
    assert check in applicable(cls)
    assert _failing(cls) == {check}
    problems = check_detector(cls)
    assert problems and all(p.startswith(f"{check}: ") for p in problems), problems


def test_every_check_has_a_negative_control() -> None:
    """Except check_no_labels_in_score, which guards the scoring path (a detector cannot make it fail)."""
    from haldet.testing.conformance import CHECKS

    assert set(CHECKS) - {c for _, c in CONTROLS} == {"check_no_labels_in_score"}


def test_an_exemption_skips_its_check_and_needs_a_reason() -> None:
    exempt = type("_ExemptConstant", (_Constant,), {
        "conformance_exemptions": {"check_not_constant": "a fixed prior, by design"}})
    assert check_detector(exempt) == []
    for bad, words in [({"check_not_constant": ""}, "gives no reason"), ({"check_not_constant": "  "}, "no reason"),
                       ({"check_constant": "typo"}, "unknown conformance check")]:
        cls = type("_BadExemption", (_Constant,), {"conformance_exemptions": bad})
        with pytest.raises(HaldetError, match=words) as err:
            check_detector(cls)
        assert "_BadExemption.conformance_exemptions" in err.value.where


def test_batch_tolerance_admits_rounding_only() -> None:
    """Scores within a few float32 steps agree; a shift of 1e-4 of the spread does not."""
    base = np.array([0.1, 0.58, 0.9, np.nan])
    step = np.spacing(np.float32(0.58))  # one float32 step: 6e-8
    assert agree(base + np.array([0, step, -2 * step, 0]), base, base)
    assert not agree(base + np.array([0, 1e-4 * 0.8, 0, 0]), base, base)
    assert not agree(np.array([0.1, 0.58, 0.9, 0.5]), base, base)  # NaN in other places
    assert FLOAT_RTOL * 0.58 + SPREAD_ATOL * 0.8 < 1e-4 * 0.8


def test_score_views_are_spied_in_the_runner(tmp_path: Path) -> None:
    """The views come from run_detector: the test views carry no labels, the training view does."""
    spy = Spy()
    run_through_runner(_Unseeded, {}, synthetic_view({Signal.TOKEN_LOGPROBS}), tmp_path, spy)
    assert spy.score_views and all(v.labels is None for v in spy.score_views)
    assert spy.fit_views[0].labels is not None and len(spy.fit_views[0]) == 36
