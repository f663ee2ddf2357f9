"""The named conformance checks: one function per property every detector must have (scikit-learn's `check_*`).

Each check takes a `Case` and returns its problems (empty = the property holds). `CHECKS` lists them in the order
`check_detector` runs them; `applicable(cls)` names those that apply to a detector class (the fit checks only to
detectors that train, the unit checks only to those with a unit level). A check that cannot judge its property
because another property fails first (a detector reading an undeclared signal, unit scores not aligned to the
units) raises `CannotRun` naming the check that reports the cause, so a broken detector fails exactly the checks of
the properties it breaks.

Scores compared across batches (order, subset, missing neighbours) must agree up to float rounding: BLAS kernels
(MKL's AVX-512 ones among them) may round a row by its position in the batch, one float32 step (6e-8 at 0.5). Two
scores a, b agree when |a - b| <= 1e-5 |b| + 1e-6 x spread, spread = max - min of the case's finite test scores;
a detector that really looks at its neighbours moves scores by a sizable part of the spread. Everything else
(no gold access, fit determinism, save/load, unit labels) must hold bit for bit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.detectors.base import Detector
from haldet.errors import HaldetError
from haldet.testing.conformance.harness import N_MISSING, BareNaN, Case, run_through_runner, unit_level
from haldet.testing.conformance.synthetic import (
    SIGNAL_MAKERS,
    UndeclaredRead,
    flip_unit_labels,
    with_missing,
    with_units,
    without_gold,
)

FLOAT_RTOL = 1e-5  # relative to the score itself
SPREAD_ATOL = 1e-6  # relative to the spread of the case's finite test scores


class CannotRun(Exception):
    """The check cannot judge its property: another property, named in the message, fails first."""


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Case], list[str]]
    applies: Callable[[type[Detector]], bool]

    @property
    def doc(self) -> str:
        return " ".join((self.run.__doc__ or "").split())


CHECKS: dict[str, Check] = {}


def _always(cls: type[Detector]) -> bool:
    return True


def _trains(cls: type[Detector]) -> bool:
    return bool(cls.trains)


def check(applies: Callable[[type[Detector]], bool] = _always) -> Callable[[Callable[[Case], list[str]]],
                                                                             Callable[[Case], list[str]]]:
    """Register a named check (its function name) that applies to the classes `applies` accepts."""

    def decorate(fn: Callable[[Case], list[str]]) -> Callable[[Case], list[str]]:
        CHECKS[fn.__name__] = Check(fn.__name__, fn, applies)
        return fn

    return decorate


def applicable(cls: type[Detector]) -> list[str]:
    """Names of the checks that apply to `cls`, in run order (exempt ones included)."""
    return [name for name, c in CHECKS.items() if c.applies(cls)]


def exemptions(cls: type[Detector]) -> dict[str, str]:
    """The class's `conformance_exemptions` (check name -> reason), refused unless every name is a check and
    every reason says why."""
    declared = getattr(cls, "conformance_exemptions", {}) or {}
    where = f"{cls.__module__}.{cls.__qualname__}.conformance_exemptions"
    if not isinstance(declared, dict):
        raise HaldetError("conformance exemptions must be a mapping of check name -> reason", where=where)
    for name, reason in declared.items():
        if name not in CHECKS:
            raise HaldetError(f"exemption from an unknown conformance check {name!r}", where=where,
                              hint=f"checks: {', '.join(CHECKS)}")
        if not isinstance(reason, str) or not reason.strip():
            raise HaldetError(f"the exemption from {name} gives no reason", where=where,
                              hint="say why the property cannot hold for this detector (docs/detectors.md lists it)")
    return dict(declared)


def run_check(case: Case, name: str) -> list[str]:
    """The problems check `name` finds (raises `CannotRun` when another failing property hides its own)."""
    try:
        return CHECKS[name].run(case)
    except UndeclaredRead as exc:
        raise CannotRun(f"the detector reads an undeclared signal ({exc}): see check_reads_declared_signals") from exc
    except BareNaN as exc:
        raise CannotRun(f"the scoring path refuses the scores ({exc}): see check_nan_with_reason") from exc


def check_detector(cls: type[Detector], params: dict[str, Any] | None = None, *, seed: int = 0) -> list[str]:
    """Every conformance problem of `cls(**params)` (empty list = conformant), each prefixed by the name of the
    check that found it. Runs every applicable check the class is not exempt from (`conformance_exemptions`)."""
    exempt = exemptions(cls)
    problems: list[str] = []
    with Case(cls, params, seed) as case:
        for name in applicable(cls):
            if name in exempt:
                continue
            try:
                problems += [f"{name}: {p}" for p in run_check(case, name)]
            except CannotRun:
                continue
    return problems


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical, NaN in the same places."""
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def agree(a: np.ndarray, b: np.ndarray, reference: np.ndarray) -> bool:
    """Equal up to float rounding (see the module docstring): NaN in the same places and |a - b| <= FLOAT_RTOL |b|
    + SPREAD_ATOL x spread, spread = max - min of the finite `reference` scores."""
    finite = reference[np.isfinite(reference)]
    spread = float(np.ptp(finite)) if finite.size else 0.0
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=FLOAT_RTOL, atol=SPREAD_ATOL * spread, equal_nan=True))


def _values(scores: Any) -> np.ndarray:
    return np.asarray(scores.values, dtype=np.float64)


# ---------------------------------------------------------------------------------------------------- class level
@check()
def check_declarations(case: Case) -> list[str]:
    """`version`, `defaults`, `variants` and `auxiliary` agree: a version string, the default variant is one of the
    variants, every variant builds and reads signals the suite can make, model parameters are parameters."""
    cls, problems = case.cls, []
    if not isinstance(getattr(cls, "version", None), str) or not cls.version:
        problems.append("no `version` string (bump it when the formula changes)")
    if cls.variants:
        default = cls.defaults.get("variant")
        if default not in cls.variants:
            problems.append(f"default variant {default!r} is not one of the variants {sorted(cls.variants)}")
    elif "variant" in cls.defaults:
        problems.append("a `variant` default without `variants` describing it")
    for param in getattr(cls, "auxiliary", {}):
        if param.split(".")[0] not in cls.defaults and param != "sentences":
            problems.append(f"auxiliary model parameter {param!r} is not in `defaults`")
    for variant in cls.variants or {}:
        try:
            det = cls(variant=variant)
        except (ValueError, TypeError) as exc:
            problems.append(f"variant {variant!r} does not build: {exc}")
            continue
        if not det.signals() or not set(det.signals()) <= set(SIGNAL_MAKERS):
            problems.append(f"variant {variant!r} reads {sorted(det.signals())}: empty or without a synthetic maker")
    return problems


# ---------------------------------------------------------------------------------------------------- the run's path
@check()
def check_reads_declared_signals(case: Case) -> list[str]:
    """Run through the scoring path on a view serving only the instance's `signals()`, it reads nothing else."""
    try:
        _ = case.runner  # computing it is the check
    except UndeclaredRead as exc:
        return [f"reads a signal it does not declare in signals(): {exc}"]
    return []


@check()
def check_no_labels_in_score(case: Case) -> list[str]:
    """The views `score` receives on the scoring path carry no labels; a trained detector's fit view does."""
    _, spy = case.runner
    problems = []
    if any(v.labels is not None for v in spy.score_views):
        problems.append("score() received a view with labels")
    if case.cls.trains and not any(v.labels is not None for v in spy.fit_views):
        problems.append("a training detector was fitted without labels")
    return problems


@check()
def check_no_gold_access(case: Case) -> list[str]:
    """Replacing or deleting the scored items' references, incorrect answers and source rows, and shuffling their
    labels, leaves every score bit-identical."""
    base, _ = case.runner
    blind = run_through_runner(case.cls, case.params, without_gold(case.view, set(case.split["test"])),
                               case.root / "blind")
    if same(base, blind):
        return []
    if not same(run_through_runner(case.cls, case.params, case.view, case.root / "again"), base):
        if case.cls.trains and check_fit_deterministic(case):
            raise CannotRun("two identical runs score differently: see check_fit_deterministic")
        return ["two identical runs through the scoring path score differently"]
    return ["scores change when the scored items' references/incorrect/source/labels change"]


@check()
def check_scores_clean_items(case: Case) -> list[str]:
    """Most items of a clean synthetic cell (every signal present) get a finite score."""
    base, _ = case.runner
    n = int(np.isfinite(base).sum())
    return [] if n >= len(base) / 2 else [f"only {n}/{len(base)} clean synthetic items scored"]


@check()
def check_not_constant(case: Case) -> list[str]:
    """Varied input does not give one value for every item (a constant fallback is not a score)."""
    base, _ = case.runner
    finite = base[np.isfinite(base)]
    if len(finite) > 2 and np.unique(finite).size == 1:
        return [f"every item scored {finite[0]!r}: a constant, not a score"]
    return []


# ---------------------------------------------------------------------------------------------------- direct scoring
@check()
def check_nan_with_reason(case: Case) -> list[str]:
    """Every NaN score carries a reason (the scoring path refuses one without)."""
    try:
        _ = case.runner
    except BareNaN as exc:
        return [f"the scoring path refuses the scores: {exc}"]
    bare = [r for v, r in zip(_values(case.base), case.base.reasons, strict=True)
            if not np.isfinite(v) and not str(r).strip()]
    return [f"{len(bare)} NaN score(s) without a reason"] if bare else []


@check()
def check_missing_evidence_is_nan(case: Case) -> list[str]:
    """Items whose signals are missing score NaN with a reason (a detector returning 0.5 on failure fails)."""
    out = case.missing
    values = _values(out)[:N_MISSING]
    if np.isfinite(values).any():
        return [f"items with missing evidence scored {values.tolist()} instead of NaN with a reason"]
    if not all(str(r).strip() for r in list(out.reasons)[:N_MISSING]):
        return ["items with missing evidence got NaN without a reason"]
    return []


@check()
def check_order_invariance(case: Case) -> list[str]:
    """Scoring the test items in another order gives each item the same score (up to float rounding)."""
    base = _values(case.base)
    perm = np.random.default_rng(3).permutation(len(case.test))
    shuffled = _values(case.score([case.test[k] for k in perm]))
    return [] if agree(shuffled, base[perm], base) else ["scores depend on the order of the items"]


@check()
def check_subset_invariance(case: Case) -> list[str]:
    """An item's score does not depend on which other items are scored with it, nor on their evidence being
    missing (up to float rounding)."""
    base, problems = _values(case.base), []
    half = len(case.test) // 2
    if not agree(_values(case.score(case.test[half:])), base[half:], base):
        problems.append("an item's score depends on which other items are scored with it")
    if not agree(_values(case.missing)[N_MISSING:], base[N_MISSING:], base):
        problems.append("missing evidence on some items changed other items' scores")
    return problems


@check(_trains)
def check_fit_deterministic(case: Case) -> list[str]:
    """Fitting again on the same items gives bit-identical scores (seeds come from the configuration)."""
    again = _values(case.score(case.test, det=case.fitted("again")))
    return [] if same(again, _values(case.base)) else ["fit is not deterministic under the configured seed"]


@check(_trains)
def check_save_load_round_trip(case: Case) -> list[str]:
    """`save` then `load` into a new instance gives bit-identical scores."""
    path = case.root / "fitted.pt"
    case.detector.save(path)
    loaded = case.cls(**case.params)
    loaded.workdir = case.root / "direct"
    loaded.load(path)
    if same(_values(case.score(case.test, det=loaded)), _values(case.base)):
        return []
    return ["save/load does not round-trip to identical scores"]


@check()
def check_identity_json(case: Case) -> list[str]:
    """`identity()` (what keys the scores and the fitted state) is JSON."""
    try:
        json.dumps(case.detector.identity(), sort_keys=True)
    except (TypeError, ValueError) as exc:
        return [f"identity() is not JSON: {exc}"]
    return []


# ---------------------------------------------------------------------------------------------------- unit levels
def _flat(scores: Any) -> np.ndarray:
    return np.concatenate([np.asarray(v, dtype=np.float64) for v in scores.values]) if scores.values else np.zeros(0)


def _aligned(case: Case) -> tuple[str, Any, Any]:
    level, part, out = case.units
    if [len(v) for v in out.values] != [len(i.units_of(level)) for i in part.instances]:
        raise CannotRun("unit scores are not aligned to the units: see check_unit_alignment")
    return level, part, out


def _has_units(cls: type[Detector]) -> bool:
    return unit_level(cls) is not None


@check(_has_units)
def check_unit_alignment(case: Case) -> list[str]:
    """At the first unit level the detector declares: one score per unit, aligned to the items' units, most of
    them finite on clean evidence."""
    level, part, out = case.units
    if [len(v) for v in out.values] != [len(i.units_of(level)) for i in part.instances]:
        return [f"{level}: unit scores not aligned to the items' units"]
    flat = _flat(out)
    n = int(np.isfinite(flat).sum())
    return [] if n >= len(flat) / 2 else [f"{level}: only {n}/{len(flat)} clean synthetic units scored"]


@check(_has_units)
def check_unit_labels_unread(case: Case) -> list[str]:
    """Swapping every unit's label leaves every unit score bit-identical."""
    level, part, out = _aligned(case)
    if same(_flat(case.detector.score_units(flip_unit_labels(part), level)), _flat(out)):
        return []
    return [f"{level}: unit scores change when the units' labels change"]


@check(_has_units)
def check_unit_order_invariance(case: Case) -> list[str]:
    """Scoring the items in another order gives each unit the same score (up to float rounding)."""
    level, part, out = _aligned(case)
    perm = [int(k) for k in np.random.default_rng(5).permutation(len(case.test))]
    shuffled = case.detector.score_units(part.subset(perm, with_labels=True), level)
    back = np.concatenate([np.asarray(shuffled.values[perm.index(k)], dtype=np.float64) for k in range(len(perm))])
    flat = _flat(out)
    return [] if agree(back, flat, flat) else [f"{level}: unit scores depend on the order of the items"]


@check(_has_units)
def check_unit_missing_evidence(case: Case) -> list[str]:
    """The units of items whose evidence is missing score NaN (with a reason), not a value."""
    level, _, out = _aligned(case)
    broken_view = with_units(with_missing(case.view, case.test[:2]), level).subset(case.test, with_labels=True)
    broken = case.detector.score_units(broken_view, level)
    if np.isfinite(_flat(type(out)(broken.values[:2], broken.reasons[:2]))).any():
        return [f"{level}: units of items with missing evidence scored instead of NaN with a reason"]
    return []
