"""One scoring path for every level: fit on train, score the parts the protocol evaluates, cache, evaluate.

Detectors are fitted on the train view (labelled items only; val may inform choices), then score views that carry
no labels. Labels meet scores only in the protocol's `evaluate`, after scoring; nothing about orientation is decided
here. Every level goes through the same steps: the score log's lock (a second process waits, then reads), the
cache by key, and the re-key when another auxiliary model ran than the one resolved.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from haldet.config import RunConfig, digest
from haldet.detectors.base import DETECTORS, Detector, Scores, UnitScores
from haldet.evaluation.calibration import (
    CALIBRATION_METRICS,
    ECE_BINS,
    evaluate_calibrated,
    fit_calibrator,
    reliability,
)
from haldet.evaluation.metrics import MetricValue, evaluate
from haldet.evaluation.rejection import risk_coverage
from haldet.schema import Instance
from haldet.signals import TRACE_READS, Signal, SignalView, access_of
from haldet.store import CellStore, ScoreLog
from haldet.text.templates import override_text


@dataclass
class DetectorRun:
    """One detector's outcome on one cell at one level: test scores, metrics, timings."""

    name: str
    family: str
    scores: Scores | None = None  # response-level test scores (the protocol's flat records)
    metrics: list[MetricValue] = field(default_factory=list)
    fit_seconds: float = 0.0
    score_seconds: float = 0.0
    error: str = ""
    cached: bool = False
    timing_known: bool = True  # False: cached scores whose fit/score seconds were never recorded (cost unknown)
    key: str = ""        # the score cache key (reports read exactly these test scores)
    n_scored: int = 0    # test items scored
    meta: dict[str, Any] = field(default_factory=dict)  # what the detector reports: models/backends actually used
    identity: dict[str, Any] = field(default_factory=dict)  # version, resolved params/variant, auxiliary models
    level: str = "response"  # the level scored: response, or a unit level of a suite
    unit_scores: dict[str, Any] = field(default_factory=dict)  # unit levels: pooled test units (UnitData)
    train_labels: str = ""  # a trained detector's training-label set when a suite offers several (TRIVIA+)
    # curves for reports (manifest): "risk_coverage" (sampled), with calibration "reliability" and "calibration"
    curves: dict[str, Any] = field(default_factory=dict)
    probabilities: dict[str, float | None] = field(default_factory=dict)  # calibrated P(hallucination), test ids
    reads: frozenset[Any] = frozenset()  # the signals this instance read (an ensemble: its members' union)
    scope: str = "test"  # the items its metrics pool: "test", or "all" (evaluation.evaluate_on, training-free only)
    log: str = ""  # its score log's file in the cell (`scores/<detector>.jsonl`; the manifest records it)


def make_detector(name: str, config: RunConfig) -> Detector:
    """A selected detector with its configured parameters; a `NAME@VIEW` study row takes NAME's (but its own view)
    unless it has parameters of its own."""
    cls = DETECTORS.get(name, where="--detector")
    params = config.detector_params.get(name)
    if params is None:
        params = {k: v for k, v in config.detector_params.get(name.partition("@")[0], {}).items() if k != "reads"}
    for template, param in cls.prompt_templates.items():  # a replaced prompt from `templates:`; its own param wins
        if params.get(param) is None and (text := override_text(template, config.templates)) is not None:
            params = {**params, param: text}
    return cls(**params)


class ResponseScoring:
    """How OpenHalDet scores and evaluates (the scoring half of `haldet.flow.protocol.Procedure`): one score per
    answer on the test part, cached in `scores/<detector>.jsonl` (value, reason), AUROC/AUPR/FPR@95 on the test labels
    with a stratified bootstrap. A suite's protocol overrides these methods (unit levels, val scored too)."""

    levels: tuple[str, ...] = ("response",)
    scored_parts: tuple[str, ...] = ("test",)

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        if config.evaluation.calibration != "none":  # the calibration map is fitted on validation scores
            self.scored_parts = tuple(dict.fromkeys(("val", *self.scored_parts)))

    def score_key(self, name: str, identity: dict[str, Any], level: str, evidence_key: str,
                  trained_on: tuple[dict[str, list[str]], dict[str, int]] | None) -> str:
        return digest([name, identity, evidence_key, None if trained_on is None else trained_on[0]])

    def scope(self, detector: Detector) -> str:
        """The items a detector's metrics pool: the test part here (a suite may evaluate on all items)."""
        return "test"

    def parts_scored(self, detector: Detector) -> tuple[str, ...]:
        """The split parts a detector scores: the protocol's, plus train when its scope is every item."""
        return ("train", *self.scored_parts) if self.scope(detector) == "all" else self.scored_parts

    def score_log(self, name: str, level: str, train_labels: str) -> str:
        return ScoreLog.of(name, level, train_labels, suite=False).name

    def fitted_name(self, name: str, level: str) -> str:
        return name

    def score(self, detector: Detector, view: SignalView, level: str) -> UnitScores:
        flat = detector.score(view)
        return UnitScores([flat.values[i : i + 1] for i in range(len(view))], [[r] for r in flat.reasons])

    def score_records(self, ids: list[str], scores: UnitScores, key: str) -> list[dict[str, Any]]:
        """One score-log record per item (`scores/<detector>.jsonl`: value, reason)."""
        return [{"id": item_id, "key": key, "value": json_float(vals[0]), "reason": reasons[0]}
                for item_id, vals, reasons in zip(ids, scores.values, scores.reasons, strict=True)]

    def read_scores(self, records: list[dict[str, Any]]) -> UnitScores:
        return UnitScores([np.array([np.nan if r["value"] is None else r["value"]]) for r in records],
                          [[r["reason"]] for r in records])

    def evaluate(self, run: DetectorRun, detector: Detector, view: SignalView, split: dict[str, list[str]],
                 scored: dict[str, tuple[list[str], UnitScores]], unscored: dict[str, Instance]) -> list[MetricValue]:
        """Metrics on the test labels, after scoring: detection and rejection metrics of the raw score, its
        risk-coverage curve and, with a calibration, ECE and Brier of the probabilities fitted on validation."""
        if run.scores is None or view.labels is None:
            raise RuntimeError(f"detector {run.name}: no scores, or a view without labels to evaluate them on")
        labels = dict(zip(view.ids, view.labels.tolist(), strict=True))
        y = np.array([labels[i] for i in scored["test"][0]], dtype=int)
        ev = self.config.evaluation
        out = evaluate(y, run.scores.values, n_boot=ev.bootstrap, ci=ev.ci, seed=ev.bootstrap_seed)
        valid = np.isfinite(run.scores.values)
        run.curves["risk_coverage"] = risk_coverage(y[valid], run.scores.values[valid]).sampled()
        if ev.calibration != "none":
            out += self.calibrated(run, labels, scored)
        return out

    def calibrated(self, run: DetectorRun, labels: dict[str, int],
                   scored: dict[str, tuple[list[str], UnitScores]]) -> list[MetricValue]:
        """Fit the configured calibration on validation scores and labels, apply it to test: ECE and Brier rows,
        the reliability bins and the map in `run.curves`, the test probabilities in `run.probabilities`."""
        ev = self.config.evaluation
        val_ids, val_scores = scored["val"]
        test_ids = scored["test"][0]
        y = np.array([labels[i] for i in test_ids], dtype=int)
        try:
            cal = fit_calibrator(ev.calibration, np.array([v[0] for v in val_scores.values]),
                                 np.array([labels[i] for i in val_ids], dtype=int))
        except ValueError as exc:  # no number without a map: the rows say why
            return [MetricValue(m, None, None, None, 0, 0, 0.0, f"{ev.calibration} calibration: {exc}")
                    for m in CALIBRATION_METRICS]
        assert run.scores is not None
        p = cal.predict(run.scores.values)
        run.probabilities = {i: json_float(v) for i, v in zip(test_ids, p, strict=True)}
        run.curves["calibration"] = {"method": cal.method, "params": cal.params, "note": cal.note,
                                     "fitted_on": f"val ({len(val_ids)} items)", "bins": ECE_BINS}
        run.curves["reliability"] = reliability(y, p)
        note = "; ".join(n for n in (f"{cal.method} fitted on val, {ECE_BINS} equal-width bins", cal.note) if n)
        return evaluate_calibrated(y, p, n_boot=ev.bootstrap, ci=ev.ci, seed=ev.bootstrap_seed, note=note)


def score_detector(name: str, level: str, protocol: ResponseScoring, store: CellStore, view: SignalView,
                   split: dict[str, list[str]], evidence_key: str, *, progress: Any = None,
                   train_labels: tuple[str, dict[str, int]] = ("", {}), detector: Detector | None = None,
                   unscored: dict[str, Any] | None = None) -> DetectorRun:
    """Fit (trained detectors, on the view's labels: `train_labels` names the label set and keys the scores), score
    the protocol's parts (test; a suite's val too, for thresholds), cache them, evaluate."""
    detector = detector if detector is not None else make_detector(name, protocol.config)
    view = view.reading(detector.reads)  # the part of each output it reads (a reasoning model's answer by default)
    detector.workdir = store.root  # per-run caches (NLI / similarity pairs)
    if progress is not None:
        detector.progress = progress
    # the family of what this instance reads (an ensemble: its members'; the class's for every other detector)
    run = DetectorRun(name=name, family=str(access_of(detector.signals())), level=level,
                      train_labels=train_labels[0] if detector.trains else "", scope=protocol.scope(detector))
    # the key covers what will actually run: version, resolved params (variant) and auxiliary model identities
    run.identity = detector.identity()
    run.reads = frozenset(detector.signals())
    calibration = protocol.config.evaluation.calibration
    if calibration != "none":  # how its probabilities are made is part of what the detector's numbers are
        run.identity["calibration"] = calibration
    sample_model = protocol.config.sample.model
    if sample_model is not None and Signal.SAMPLES in detector.signals():  # another model's samples: named, keyed
        run.identity["samples_model"] = sample_model
    procedure = protocol.config.auxiliary.procedure
    if procedure != "follow_up" and detector.signals() & {Signal.VERBALIZED, Signal.SELF_EVAL}:
        run.identity["auxiliary_procedure"] = procedure  # how the model was asked about its answer (E.2/E.3)
    run.key = protocol.score_key(name, run.identity, level, evidence_key,
                                 (split, train_labels[1]) if detector.trains else None)
    log_name = protocol.score_log(name, level, run.train_labels)
    run.log = f"{log_name}.jsonl"
    with store.lock(log_name):  # a second process waits, then reads these scores instead of recomputing
        scored = _score_or_reuse(run, detector, protocol, store, log_name, view, split)
    run.metrics = protocol.evaluate(run, detector, view, split, scored, unscored or {})
    if run.probabilities:  # calibrated probabilities beside the raw scores, for the explorer and the Python API
        store.write_json(f"{log_name}.calibrated.json",
                         {"key": run.key, **run.curves.get("calibration", {}), "probabilities": run.probabilities})
    return run


def _score_or_reuse(run: DetectorRun, detector: Detector, protocol: ResponseScoring, store: CellStore, log_name: str,
                    view: SignalView, split: dict[str, list[str]]) -> dict[str, tuple[list[str], UnitScores]]:
    """Per scored part: (item ids, their unit scores), read from the log under the run's key, else fitted (or the
    fitted state reused) and scored, then appended. The caller holds the log's lock (one writer per score log,
    fitted state and meta file)."""
    position = {item_id: i for i, item_id in enumerate(view.ids)}
    parts = {part: [position[i] for i in split[part] if i in position] for part in protocol.parts_scored(detector)}
    run.n_scored = sum(len(idx) for idx in parts.values()) if run.scope == "all" else len(parts["test"])
    log = store.log(log_name)
    cached = log.read(run.key)
    meta_file, timings_file = f"{log_name}.meta.json", f"{log_name}.timings.json"
    if parts["test"] and all(view.ids[i] in cached for idx in parts.values() for i in idx):
        run.cached = True
        run.meta = (store.read_json(meta_file) or {}).get(run.key, {})
        # the seconds these scores took when computed, whichever run (and manifest) computed them
        timing = (store.read_json(timings_file) or {}).get(run.key)
        run.timing_known = timing is not None
        if timing is not None:
            run.fit_seconds, run.score_seconds = float(timing["fit_s"]), float(timing["score_s"])
        out = {part: ([view.ids[i] for i in idx], protocol.read_scores([cached[view.ids[i]] for i in idx]))
               for part, idx in parts.items()}
    else:
        start = time.perf_counter()
        if detector.trains:
            def labelled(ids: list[int]) -> list[int]:
                return [i for i in ids if view.labels is not None and view.labels[i] >= 0]

            train_idx = [position[i] for i in split["train"] if i in position]
            fit_or_reuse(detector, store, protocol.fitted_name(run.name, run.level), run.key,
                         view.subset(labelled(train_idx), with_labels=True),
                         view.subset(labelled([position[i] for i in split["val"] if i in position]),
                                     with_labels=True))
        run.fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        out = {}
        for part, idx in parts.items():  # an empty part (no validation items when nothing is fitted): no call
            sub = view.subset(idx, with_labels=False)
            out[part] = ([view.ids[i] for i in idx], skipped_reasons(sub, protocol.score(detector, sub, run.level))
                         if idx else UnitScores([], []))
        run.score_seconds = time.perf_counter() - start
        run.meta = dict(detector.meta)
        _rekey_on_identity_mismatch(run)
        if run.meta:
            store.write_json(meta_file, {**(store.read_json(meta_file) or {}), run.key: run.meta})
        for ids, scores in out.values():
            log.append(protocol.score_records(ids, scores, run.key))
        store.write_json(timings_file, {**(store.read_json(timings_file) or {}),
                                        run.key: {"fit_s": run.fit_seconds, "score_s": run.score_seconds}})
    test_scores = out["test"][1]
    if all(len(v) == 1 for v in test_scores.values):  # one score per item: the response-level view of them
        run.scores = Scores(values=np.array([v[0] for v in test_scores.values], dtype=np.float64),
                            reasons=[r[0] for r in test_scores.reasons])
    return out


def skipped_reasons(view: SignalView, scores: UnitScores) -> UnitScores:
    """A response the model read no token of (it exceeds the model's context) has that reason on each of its
    scores without a value, whatever the detector said of the empty evidence it saw ("empty response")."""
    for k, generation in enumerate(view.generations):
        why = generation.skipped if generation is not None else None
        if generation is not None and generation.no_answer and view.reads in ("answer", "all"):
            why = generation.no_answer  # cut off inside its reasoning: never scored as an empty answer
            scores.values[k] = np.full(len(scores.values[k]), np.nan)
        elif generation is not None and view.reads in TRACE_READS and generation.reasoning is None:
            why = "no reasoning: the output holds no thinking block"
            scores.values[k] = np.full(len(scores.values[k]), np.nan)
        if why:
            scores.reasons[k] = [why if not np.isfinite(v) else r
                                 for v, r in zip(scores.values[k], scores.reasons[k], strict=True)]
    return scores


def _rekey_on_identity_mismatch(run: DetectorRun) -> None:
    """Another auxiliary model ran than the one resolved before scoring: never file its scores under that key."""
    loaded = models_loaded(run.meta)
    expected = {m["requested"]: m["used"] for m in run.identity.get("models", {}).values() if "requested" in m}
    if any(expected.get(req, used) != used for req, used in loaded):  # None on both sides: nothing loaded
        run.meta["identity_mismatch"] = {"resolved": expected, "loaded": dict(loaded)}
        run.key = digest([run.key, sorted(loaded, key=lambda pair: (pair[0], pair[1] or ""))])


def models_loaded(meta: Any) -> list[tuple[str, str | None]]:
    """(requested, loaded) of every auxiliary model a detector's meta reports loading (nested meta included);
    loaded is None where none loaded (as the resolved identity says when nothing could be)."""
    if not isinstance(meta, dict):
        return []
    found = []
    if "requested" in meta and "loaded" in meta:
        found.append((str(meta["requested"]), None if meta["loaded"] is None else str(meta["loaded"])))
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


def json_float(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None
