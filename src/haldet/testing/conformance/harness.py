"""How the conformance checks run a detector: through the run's own scoring path and directly, once per case.

A `Case` is one detector configuration under test. What several checks need (the synthetic view, the split, the
scores the runner gives, a fitted instance and its test scores) is computed on first use and kept, so each named
check can run on its own (one pytest id per check) without refitting for every check.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from haldet.config import RunConfig
from haldet.detectors.base import Detector, Scores, UnitScores
from haldet.signals import SignalView
from haldet.testing.conformance.synthetic import synthetic_view, with_missing, with_units

N_MISSING = 3  # test items whose evidence `missing` removes


class BareNaN(ValueError):
    """The scoring path refused a NaN score that carries no reason."""


@dataclass
class Spy:
    """What `score_detector` handed the detector: the views `fit` and `score` received."""

    fit_views: list[SignalView] = field(default_factory=list)
    score_views: list[SignalView] = field(default_factory=list)


def spying(cls: type[Detector], spy: Spy) -> type[Detector]:
    """A subclass recording its fit/score views (a subclass, so the fitted state still pickles)."""

    def fit(self: Any, train: SignalView, val: SignalView | None) -> None:
        spy.fit_views += [train] + ([val] if val is not None else [])
        cls.fit(self, train, val)

    def score(self: Any, items: SignalView) -> Any:
        spy.score_views.append(items)
        return cls.score(self, items)

    return type(cls.__name__, (cls,), {"fit": fit, "score": score, "__module__": cls.__module__})


def split_of(view: SignalView) -> dict[str, list[str]]:
    """60/20/20 by position (the synthetic labels are already shuffled)."""
    n = len(view)
    a, b = int(0.6 * n), int(0.8 * n)
    return {"train": view.ids[:a], "val": view.ids[a:b], "test": view.ids[b:]}


def run_through_runner(cls: type[Detector], params: dict[str, Any], view: SignalView, workdir: Path,
                       spy: Spy | None = None) -> np.ndarray:
    """Test scores of `cls(**params)` from the run's scoring path (`score_detector`), exactly as a run computes them
    (in a fresh cell)."""
    from haldet.flow.scoring import ResponseScoring, score_detector  # lazy: sklearn, scipy
    from haldet.store import CellStore  # lazy: h5py

    spy = spy or Spy()
    split = split_of(view)
    assert view.labels is not None, "the runner's split needs a labelled view"
    config = RunConfig(detectors=[cls.name], evaluation={"bootstrap": 0})
    try:
        run = score_detector(cls.name, "response", ResponseScoring(config), CellStore(workdir), view, split,
                             "synthetic-evidence", detector=spying(cls, spy)(**params))
    except ValueError as exc:
        if "needs a reason" in str(exc):
            raise BareNaN(str(exc)) from exc
        raise
    if run.scores is None:
        raise RuntimeError(f"the scoring path gave no scores: {run.error}")
    return np.asarray(run.scores.values)


class Case:
    """One configuration `cls(**params)` under test, in its own temporary folder (`close` removes it)."""

    def __init__(self, cls: type[Detector], params: dict[str, Any] | None = None, seed: int = 0) -> None:
        self.cls, self.params, self.seed = cls, dict(params or {}), seed
        self._tmp = tempfile.TemporaryDirectory(prefix="haldet-conformance-")
        self.root = Path(self._tmp.name)

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> Case:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def view(self) -> SignalView:
        """60 labelled synthetic items serving exactly the signals the instance declares."""
        return synthetic_view(frozenset(self.cls(**self.params).signals()), seed=self.seed)

    @cached_property
    def split(self) -> dict[str, list[str]]:
        return split_of(self.view)

    @cached_property
    def test(self) -> list[int]:
        """Positions of the test items in `view`."""
        pos = {i: k for k, i in enumerate(self.view.ids)}
        return [pos[i] for i in self.split["test"]]

    @cached_property
    def runner(self) -> tuple[np.ndarray, Spy]:
        """The test scores the run's scoring path gives, and the views it handed the detector."""
        spy = Spy()
        return run_through_runner(self.cls, self.params, self.view, self.root / "runner", spy), spy

    def fitted(self, workdir: str = "direct") -> Any:
        """A new instance, fitted on the train/val items when the detector trains (not through the runner)."""
        det = self.cls(**self.params)
        det.workdir = self.root / workdir
        pos = {i: k for k, i in enumerate(self.view.ids)}
        if self.cls.trains:
            det.fit(self.view.subset([pos[i] for i in self.split["train"]], with_labels=True),
                    self.view.subset([pos[i] for i in self.split["val"]], with_labels=True))
        return det

    @cached_property
    def detector(self) -> Any:
        """The fitted instance the direct checks score with."""
        return self.fitted()

    def score(self, positions: list[int], view: SignalView | None = None, det: Any = None) -> Scores:
        """The detector's scores of the items at `positions` of `view` (default: the case's), without labels."""
        return (det or self.detector).score((view or self.view).subset(positions, with_labels=False))

    @cached_property
    def base(self) -> Scores:
        """The fitted instance's scores of the test items, in split order."""
        return self.score(self.test)

    @cached_property
    def missing(self) -> Scores:
        """Test scores when the first N_MISSING test items have no evidence at all."""
        return self.score(self.test, with_missing(self.view, self.test[:N_MISSING]))

    @cached_property
    def units(self) -> tuple[str, SignalView, UnitScores]:
        """(the first unit level, the test items carrying units of it, their unit scores)."""
        level = unit_level(self.cls)
        if level is None:
            raise ValueError(f"{self.cls.name} declares no unit level")
        part = with_units(self.view, level).subset(self.test, with_labels=True)  # labels kept: must not be read
        return level, part, self.detector.score_units(part, level)


def unit_level(cls: type[Detector]) -> str | None:
    """The first unit level a detector declares (levels share the unit machinery, so one is checked)."""
    return next((lv for lv in getattr(cls, "levels", ("response",)) if lv != "response"), None)


def light(cls: type[Detector], params: dict[str, Any], models: dict[str, str]) -> dict[str, Any]:
    """`params` with every auxiliary model parameter of kind k set to `models[k]` and no fallback: the suite's
    way to run model-backed detectors on small local models."""
    out = dict(params)
    for param, kind in getattr(cls, "auxiliary", {}).items():
        owner, _, leaf = param.rpartition(".")
        if kind not in models:
            continue
        if owner:  # a model inside a dict parameter
            out[owner] = {**cls.defaults.get(owner, {}), **out.get(owner, {}), leaf: models[kind], "fallback": None}
        elif param in cls.defaults:
            out[param] = models[kind]
            if "fallback" in cls.defaults:
                out["fallback"] = None
    return out
