"""Fit and score detectors on a cell's split, then evaluate on test: the only place labels meet scores.

Detectors are fitted on the train view (and may use val for choices), then score val and test views that
carry no labels. Metrics use the test labels after scoring; nothing about orientation is decided here.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from haldet.config import RunConfig, digest
from haldet.detectors.base import DETECTORS, Detector, Scores
from haldet.evaluation.metrics import MetricValue, evaluate
from haldet.signals import SignalView
from haldet.store import CellStore


@dataclass
class DetectorRun:
    """One detector's outcome on one cell: test scores, metrics, timings."""

    name: str
    family: str
    scores: Scores | None = None
    metrics: list[MetricValue] = field(default_factory=list)
    fit_seconds: float = 0.0
    score_seconds: float = 0.0
    error: str = ""
    cached: bool = False
    key: str = ""        # the score cache key (reports read exactly these test scores)
    n_scored: int = 0    # test items scored
    meta: dict[str, Any] = field(default_factory=dict)  # what the detector reports: models/backends actually used
    identity: dict[str, Any] = field(default_factory=dict)  # version, resolved params/variant, auxiliary models
    level: str = "response"  # the level scored: response, or a unit level of a suite (suites/runner.py)
    unit_scores: dict[str, Any] = field(default_factory=dict)  # unit levels: pooled test units (UnitData)
    train_labels: str = ""  # a trained detector's training-label set when a suite offers several (TRIVIA+)


def make_detector(name: str, config: RunConfig) -> Detector:
    cls = DETECTORS.get(name, where="--detector")
    return cls(**config.detector_params.get(name, {}))


def run_detector(name: str, config: RunConfig, store: CellStore, view: SignalView,
                 split: dict[str, list[str]], labels: dict[str, int], evidence_key: str,
                 progress: Any = None) -> DetectorRun:
    """Fit on train, score test, evaluate; cached in `scores/<name>.jsonl` by detector params, split and evidence.
    The detector's `meta` (e.g. which NLI model ran, fallbacks) is kept in `scores/<name>.meta.json` by key."""
    detector = make_detector(name, config)
    detector.workdir = store.root  # per-run caches (NLI / similarity pairs)
    if progress is not None:
        detector.progress = progress
    run = DetectorRun(name=name, family=str(detector.family()))
    position = {item_id: i for i, item_id in enumerate(view.ids)}
    test_idx = [position[i] for i in split["test"]]
    # the key covers what will actually run: version, resolved params (variant) and auxiliary model identities
    run.identity = detector.identity()
    key = digest([name, run.identity, evidence_key, split if detector.trains else None])
    run.key, run.n_scored = key, len(test_idx)
    with store.lock(f"scores/{name}"):  # a second process waits, then reads these scores instead of recomputing
        _score_or_reuse(run, detector, store, name, key, view, split, position, test_idx)
    y = np.array([labels[view.ids[i]] for i in test_idx], dtype=int)
    ev = config.evaluation
    if run.scores is None:
        raise RuntimeError(f"detector {name} left no scores")
    run.metrics = evaluate(y, run.scores.values, n_boot=ev.bootstrap, ci=ev.ci, seed=ev.bootstrap_seed)
    return run


def _score_or_reuse(run: DetectorRun, detector: Detector, store: CellStore, name: str, key: str, view: SignalView,
                    split: dict[str, list[str]], position: dict[str, int], test_idx: list[int]) -> None:
    """Read the test scores cached under `key`, else fit (or reuse the fitted state) and score, then append them.
    The caller holds the detector's score lock (one writer per score log, fitted state and meta file)."""
    log = store.log(f"scores/{name}")
    cached = log.read(key)
    if all(view.ids[i] in cached for i in test_idx) and test_idx:
        values = np.array([np.nan if cached[view.ids[i]]["value"] is None else cached[view.ids[i]]["value"]
                           for i in test_idx], dtype=np.float64)
        run.scores = Scores(values=values, reasons=[cached[view.ids[i]]["reason"] for i in test_idx])
        run.cached = True
        run.meta = (store.read_json(f"scores/{name}.meta.json") or {}).get(key, {})
    else:
        train = view.subset([position[i] for i in split["train"]], with_labels=True)
        val = view.subset([position[i] for i in split["val"]], with_labels=True)
        test = view.subset(test_idx, with_labels=False)
        start = time.perf_counter()
        if detector.trains:
            fit_or_reuse(detector, store, name, key, train, val)
        run.fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        run.scores = detector.score(test)
        run.score_seconds = time.perf_counter() - start
        run.meta = dict(detector.meta)
        loaded = models_loaded(run.meta)
        expected = {m["requested"]: m["used"] for m in run.identity.get("models", {}).values() if "requested" in m}
        if any(expected.get(req, used) != used for req, used in loaded):
            # another model ran than the one resolved before scoring: never file its scores under that key
            run.meta["identity_mismatch"] = {"resolved": expected, "loaded": dict(loaded)}
            run.key = key = digest([key, sorted(loaded)])
        if run.meta:
            store.write_json(f"scores/{name}.meta.json",
                             {**(store.read_json(f"scores/{name}.meta.json") or {}), key: run.meta})
        log.append({"id": item_id, "key": key, "value": _json_float(v), "reason": r}
                   for item_id, v, r in zip(test.ids, run.scores.values, run.scores.reasons, strict=True))


def models_loaded(meta: Any) -> list[tuple[str, str]]:
    """(requested, loaded) of every auxiliary model a detector's meta reports loading (nested meta included)."""
    if not isinstance(meta, dict):
        return []
    found = [(str(meta["requested"]), str(meta["loaded"]))] if "requested" in meta and "loaded" in meta else []
    return found + [pair for value in meta.values() for pair in models_loaded(value)]


def fitted_path(store: CellStore, name: str, key: str) -> Path:
    """Where a trained detector's fitted state lives: keyed like its scores (params + evidence + split)."""
    return store.root / "fitted" / f"{name}-{key}.pt"


def fit_or_reuse(detector: Detector, store: CellStore, name: str, key: str, train: SignalView,
                 val: SignalView | None) -> None:
    """Load the fitted state saved under the same key, else fit on train (choices on val) and save it.
    A state file that cannot be read (older haldet, damaged) is refitted and overwritten, never trusted."""
    path = fitted_path(store, name, key)
    if path.exists():
        try:
            detector.load(path)
            detector.meta["fitted"] = f"reused {path.name}"
            return
        except (OSError, EOFError, RuntimeError, AttributeError, ImportError, pickle.UnpicklingError) as exc:
            detector.meta["fitted_reload_failed"] = f"{type(exc).__name__}: {exc}"
    detector.fit(train, val)
    detector.meta["fitted"] = f"fitted now, saved {path.name}"
    try:
        detector.save(path)
    except (OSError, TypeError, AttributeError, pickle.PicklingError) as exc:  # state that does not pickle
        detector.meta["fitted"] = f"fitted now, not saved ({type(exc).__name__}: {exc})"


def _json_float(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None
