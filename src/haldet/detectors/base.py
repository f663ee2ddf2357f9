"""The detector interface and registry.

A detector is one class in one file with one decorator:

    @register("my_detector")
    class MyDetector(Detector):
        requires = frozenset({Signal.TOKEN_LOGPROBS})
        def score(self, items: SignalView) -> Scores: ...

Scores are oriented by the method (higher = more likely hallucinated) and never flipped with test labels;
a detector that learns an orientation learns it in `fit`, from the training view's labels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from haldet.errors import HaldetError, did_you_mean
from haldet.models.provenance import resolve_auxiliary
from haldet.registry import Registry
from haldet.schema import Access
from haldet.signals import READS, Signal, SignalView, access_of, served


@dataclass
class Scores:
    """Scores for a view's items in order; NaN marks an invalid item and `reasons` says why."""

    values: np.ndarray
    reasons: list[str] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int) -> Scores:
        return cls(values=np.full(n, np.nan, dtype=np.float64), reasons=[""] * n)

    def set(self, i: int, value: float) -> None:
        self.values[i] = value
        self.reasons[i] = ""

    def invalid(self, i: int, reason: str) -> None:
        self.values[i] = np.nan
        self.reasons[i] = reason

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=np.float64)
        if not self.reasons:
            self.reasons = ["" if np.isfinite(v) else "non-finite score" for v in self.values]
        if len(self.reasons) != len(self.values):
            raise ValueError("one reason per score")


@dataclass
class UnitScores:
    """Per item, one score per unit (aligned to `instance.units_of(level)`); NaN entries have a reason."""

    values: list[np.ndarray]
    reasons: list[list[str]]

    def __post_init__(self) -> None:
        self.values = [np.asarray(v, dtype=np.float64) for v in self.values]
        if len(self.values) != len(self.reasons) or any(
                len(v) != len(r) for v, r in zip(self.values, self.reasons, strict=True)):
            raise ValueError("one reason list per item and one reason per unit score")
        for v, r in zip(self.values, self.reasons, strict=True):
            if any(not np.isfinite(x) and not why for x, why in zip(v, r, strict=True)):
                raise ValueError("a non-finite unit score needs a reason")


class Detector:
    """Base class. Subclasses set `requires` (and `trains`, `variants`, `defaults`) and implement `score`."""

    name: ClassVar[str] = ""
    requires: ClassVar[frozenset[Signal]] = frozenset()
    trains: ClassVar[bool] = False
    # levels scored: "response" (one score per answer, `score`), or unit levels (detectors/unit.py, `score_units`)
    levels: ClassVar[tuple[str, ...]] = ("response",)
    variants: ClassVar[dict[str, str]] = {}
    defaults: ClassVar[dict[str, Any]] = {}
    # the formula's version: part of every score and fitted-state key, so bump it when the numbers would change
    version: ClassVar[str] = "1"
    # auxiliary models that produce numbers: parameter name -> kind ("nli", "similarity", "bertscore"), plus
    # "sentences": "splitter" for detectors that split text into sentences (haldet.models.provenance resolves them)
    auxiliary: ClassVar[dict[str, str]] = {}
    # True: without its auxiliary model every item is NaN with the reason (the run goes on); False: the model must
    # be found, as asked or as its fallback, before the run starts (haldet.flow.run.check_auxiliary_models)
    nan_without_auxiliary: ClassVar[bool] = False
    # what `haldet detectors list` groups and cites (every registered detector declares them on its own class,
    # tests/cli/test_detector_listing.py): the method family (information, sample consistency, internal states,
    # attention, self-assessment, judges and verifiers, ensemble), the paper it comes from, and the peer tools
    # (lm-polygraph, TruthTorchLM, uqlm, selfcheckgpt) that also ship the method
    method_family: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    peers: ClassVar[tuple[str, ...]] = ()
    # conformance checks this detector is exempt from, check name -> why the property cannot hold for it
    # (haldet.testing.conformance; an empty reason is refused; docs/detectors.md lists every exemption)
    conformance_exemptions: ClassVar[dict[str, str]] = {}
    # the view it reads unless `reads` says otherwise: "answer", or the view of a `NAME@VIEW` study row
    view: ClassVar[str] = "answer"
    # packaged prompt templates it sends (haldet.text.templates) -> the parameter a run config's `templates:` entry
    # of that name fills when the detector's own parameters leave it unset (so the text is in its identity)
    prompt_templates: ClassVar[dict[str, str]] = {}

    def __init__(self, **params: Any) -> None:
        # which part of a reasoning model's output it reads (`haldet.signals.READS`): every detector has it
        self.reads = str(params.pop("reads", self.view))
        if self.reads not in READS:
            raise ValueError(f"detector {self.name!r}: reads {self.reads!r} is not one of {', '.join(READS)}")
        unknown = set(params) - set(self.defaults)
        if unknown:
            guesses = [f"{u!r}: {g}" for u in sorted(unknown) if (g := did_you_mean(u, self.defaults))]
            raise ValueError(
                f"detector {self.name!r} has no parameter(s) {sorted(unknown)}"
                + (f" ({'; '.join(guesses)})" if guesses else "") + f"; known: {sorted(self.defaults)}"
            )
        self.params: dict[str, Any] = {**self.defaults, **params}
        # set by the scoring path before fit/score: the cell directory (per-run caches such as NLI pairs) and a
        # progress factory (description, total) -> advance(n); `meta` is what the detector reports back
        # (models actually used, fallbacks taken), recorded in the manifest
        self.workdir: Path | None = None
        self.progress: Callable[[str, int], Callable[[int], None]] = lambda description, total: lambda n: None
        self.meta: dict[str, Any] = {}
        beyond = sorted(s.value for s in self.requires - served(self.reads)) if self.reads != "answer" else []
        if beyond:
            raise ValueError(f"detector {self.name!r} cannot read {self.reads!r}: it reads {', '.join(beyond)}, which "
                             f"exist for the answer alone; reads: {self.reads} serves "
                             f"{', '.join(sorted(s.value for s in served(self.reads)))}")
        variant = self.params.get("variant")
        if variant is not None and self.variants and variant not in self.variants:
            guess = did_you_mean(str(variant), self.variants)
            raise ValueError(f"detector {self.name!r} has no variant {variant!r}; {guess + ' ' if guess else ''}"
                             f"known: {sorted(self.variants)}")

    @classmethod
    def family(cls) -> Access:
        return access_of(cls.requires)

    def signals(self) -> frozenset[Signal]:
        """The signals this instance reads; a variant needing less (or more) evidence overrides this."""
        return self.requires

    def identity(self) -> dict[str, Any]:
        """What produces this instance's numbers, resolved before scoring: name, version, parameters (variant
        included) and every auxiliary model with its fingerprint. Keys scores and fitted state; recorded."""
        identity = {"detector": self.name, "version": self.version, "params": self.params,
                    "variant": self.params.get("variant"), "models": resolve_auxiliary(self)}
        if self.reads != "answer":  # the default keys scores as before: the answer is all a non-reasoning output is
            identity["reads"] = self.reads
        return identity

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        """Learn from labelled train (and val) items. Training-free detectors keep this no-op."""

    def score(self, items: SignalView) -> Scores:
        raise NotImplementedError

    # attributes the scoring path sets, not part of the fitted state
    _UNSAVED: ClassVar[frozenset[str]] = frozenset({"workdir", "progress", "reads"})

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        """One score per unit of `level` (aligned to `instance.units_of(level)`). A response-level detector scores
        the response as its one unit; unit-level detectors (`levels` beyond "response") override this."""
        flat = self.score(items)
        return UnitScores([flat.values[i : i + 1] for i in range(len(items))], [[r] for r in flat.reasons])

    def save(self, path: Path) -> None:
        """Persist the fitted state (default: the instance's attributes, via torch.save, written atomically) so
        a rerun with the same key skips fitting. Override for state that does not pickle."""
        import torch

        from haldet.store import atomic_path  # lazy: h5py

        with atomic_path(path) as tmp:
            torch.save({k: v for k, v in self.__dict__.items() if k not in self._UNSAVED}, tmp)

    def load(self, path: Path) -> None:
        """Restore what `save` wrote (a file from this run directory, written by haldet itself)."""
        import torch

        state = torch.load(path, map_location="cpu", weights_only=False)
        self.__dict__.update({k: v for k, v in state.items() if k not in self._UNSAVED})


class DetectorRegistry(Registry[type[Detector]]):
    """The detector registry; `NAME@VIEW` (VIEW one of `READS`) names detector NAME reading that view of a reasoning
    model's outputs, a row of its own in every table (the reasoning-trace study: `perplexity@reasoning`,
    `lexical_similarity@remove`), made once per name as a subclass whose default `reads` is VIEW."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._views: dict[str, type[Detector]] = {}

    def get(self, name: str, *, where: str = "") -> type[Detector]:
        base, at, view = name.partition("@")
        if not at:
            return super().get(name, where=where)
        cls = super().get(base, where=where)
        if view not in READS:
            raise HaldetError(f"detector {name!r}: {view!r} is not a view", where=where or "--detector",
                              hint=f"NAME@VIEW with VIEW one of {', '.join(READS)}")
        if name not in self._views:
            self._views[name] = type(f"{cls.__name__}_{view}", (cls,), {
                "name": name, "view": view, "__module__": cls.__module__,
                "__doc__": f"{cls.__name__} reading {view} of a reasoning model's outputs."})
        return self._views[name]

    def __contains__(self, name: object) -> bool:
        base, at, view = str(name).partition("@")
        return super().__contains__(base) and (not at or view in READS)


DETECTORS: DetectorRegistry = DetectorRegistry("detector", "haldet.detectors", in_suites=True)


register = DETECTORS.register  # class decorator: @register("name")
