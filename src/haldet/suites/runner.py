"""One (dataset, model) cell of a suite run: given (or generated) responses, labels from the data, unit levels.

Flow: load items and prompts (as the main pipeline does) -> generate stage (a provided response is teacher-forced,
and the token-level signals the selected detectors read ride on that one pass) -> labels from the data (units of
each evaluated level; response labels shipped with the data or implied by the units; with the `generate`
protocol, the judges) -> split items (grouped, or the dataset's own split) -> the evidence stages the detectors
read -> per detector and level: fit on train (trained detectors), score validation and test items, pool units,
metrics with the threshold from validation (`Suite.unit_metrics`).

Scores are cached per (detector, level) in `scores/<detector>@<level>.jsonl`, one record per item with one value
per unit, keyed by detector params, level, evidence and (for trained detectors) the split.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from haldet.backends.base import Backend
from haldet.config import RunConfig, digest
from haldet.detectors.base import DETECTORS, Detector
from haldet.detectors.unit import UnitDetector, UnitScores
from haldet.errors import HaldetError
from haldet.evaluation.cost import stage_stats
from haldet.evaluation.detect import DetectorRun, fit_or_reuse, make_detector
from haldet.evaluation.splits import SPLITS, grouped_split
from haldet.evaluation.units import UnitData
from haldet.schema import Category, Instance
from haldet.signals import SignalView
from haldet.stages.base import Item, Progress
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages, evidence_key, needed_stages
from haldet.store import CellStore, RunStore
from haldet.suites.base import Suite, get_suite


def suite_split(suite: Suite, items: list[Item], fractions: tuple[float, float, float],
                seed: int) -> dict[str, list[str]]:
    """The dataset's own split when the suite says so (every item must carry one), else a seeded grouped split
    of items: units never cross parts."""
    if suite.splits == "given":
        missing = [i.id for i in items if i.instance.split is None]
        if missing:
            raise HaldetError(f"suite {suite.name!r} uses the dataset's own splits, but {len(missing)} item(s) have "
                              f"none (first: {missing[0]})", where=f"dataset {items[0].instance.dataset}",
                              hint="the adapter must set Instance.split (train/val/test) on every item")
        out: dict[str, list[str]] = {name: [] for name in SPLITS}
        for item in items:
            out[str(item.instance.split)].append(item.id)
        return {name: sorted(ids) for name, ids in out.items()}
    return grouped_split({i.id: suite.group_of(i.instance) for i in items}, fractions, seed)


def response_labels(items: list[Item]) -> dict[str, int]:
    """Binary response-level labels shipped with the data (or implied by the units); unlabelled items left out."""
    out = {}
    for item in items:
        unit = item.instance.units_of("response")[0]
        if unit.binary is not None:
            out[item.id] = unit.binary
    return out


def unit_counts(items: list[Item], levels: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per level: items, units, labelled units, hallucinated units, and units the adapter could not align to the
    response (`meta["unaligned"]`, kept out of the units: counted here, never dropped silently)."""
    out = {}
    for level in levels:
        units = [u for item in items for u in item.instance.units_of(level)]
        labelled = [u.binary for u in units if u.binary is not None]
        out[level] = {"items": sum(1 for i in items if i.instance.units_of(level)), "units": len(units),
                      "labelled": len(labelled), "hallucinated": int(sum(labelled)),
                      "unaligned": sum(len(i.instance.meta.get("unaligned") or []) for i in items)}
    return out


def pooled(view: SignalView, values: list[np.ndarray], level: str, labelled: list[Any],
           unit_tags_of: Callable[[str, list[tuple[Instance, Any]]], dict[str, list[str]]] | None = None) -> UnitData:
    """Units of a view's items with their labels (from `labelled`, the labelled instances), scores and item index;
    units with only an ordinal grade come too (y = -1), and the suite's per-unit tags (`unit_tags_of`, computed
    once over all pooled units)."""
    ys, ss, gs, grades = [], [], [], []
    kept: list[tuple[Instance, Any]] = []
    tags: dict[str, list[str]] = {}
    for g, (inst, vals) in enumerate(zip(labelled, values, strict=True)):
        units = inst.units_of(level)
        if len(units) != len(vals):
            raise ValueError(f"{len(vals)} unit scores for {len(units)} units of {inst.id} at level {level}")
        for unit, v in zip(units, vals, strict=True):
            if unit.binary is not None or unit.grade is not None:
                kept.append((inst, unit))
                ys.append(-1 if unit.binary is None else unit.binary)
                ss.append(v)
                gs.append(g)
                grades.append(-1 if unit.grade is None else unit.grade)
    if unit_tags_of is not None and kept:
        tags.update(unit_tags_of(level, kept))
    has_grade = any(x >= 0 for x in grades)
    return UnitData(np.array(ys, dtype=np.int64), np.array(ss, dtype=np.float64), np.array(gs, dtype=np.int64),
                    np.array(grades, dtype=np.int64) if has_grade else None, {k: np.array(v) for k, v in tags.items()})


def score_level(detector: Detector, view: SignalView, level: str) -> UnitScores:
    """Per-unit scores at `level`; a response-level detector scores the response as its one unit."""
    if isinstance(detector, UnitDetector) or hasattr(detector, "score_units"):
        result: UnitScores = detector.score_units(view, level)  # type: ignore[attr-defined]
        return result
    flat = detector.score(view)
    return UnitScores([flat.values[i : i + 1] for i in range(len(view))], [[r] for r in flat.reasons])


def run_level(name: str, level: str, suite: Suite, config: RunConfig, store: CellStore, view: SignalView,
              split: dict[str, list[str]], ev_key: str, progress: Progress | None,
              train_labels: tuple[str, dict[str, int]] = ("", {}),
              unscored: dict[str, Instance] | None = None) -> DetectorRun:
    """Fit (trained detectors, on `train_labels`: a label-set name and its labels, which key the scores), score
    validation and test items at one level, cache, evaluate (items in `unscored` count as NaN)."""
    detector = make_detector(name, config)
    detector.workdir = store.root
    if progress is not None:
        detector.progress = progress
    run = DetectorRun(name=name, family=str(detector.family()), level=level,
                      train_labels=train_labels[0] if detector.trains else "")
    position = {item_id: i for i, item_id in enumerate(view.ids)}
    run.identity = detector.identity()
    trained_on = [split, sorted(train_labels[1].items())] if detector.trains else None
    key = digest([name, run.identity, level, ev_key, trained_on])
    run.key = key
    log = store.log(f"scores/{name}@{level}" + (f"@{run.train_labels}" if run.train_labels else ""))
    cached = log.read(key)
    parts = {part: [position[i] for i in split[part] if i in position] for part in ("val", "test")}
    scored: dict[str, UnitScores] = {}
    if all(view.ids[i] in cached for idx in parts.values() for i in idx):
        for part, idx in parts.items():
            recs = [cached[view.ids[i]] for i in idx]
            scored[part] = UnitScores([np.array([np.nan if v is None else v for v in r["values"]]) for r in recs],
                                      [list(r["reasons"]) for r in recs])
        run.cached = True
    else:
        train_idx = [position[i] for i in split["train"] if i in position]
        if detector.trains:
            start = time.perf_counter()
            labelled = [i for i in train_idx if view.labels is not None and view.labels[i] >= 0]
            val_labelled = [i for i in parts["val"] if view.labels is not None and view.labels[i] >= 0]
            fit_or_reuse(detector, store, f"{name}@{level}", key, view.subset(labelled, with_labels=True),
                         view.subset(val_labelled, with_labels=True))
            run.fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for part, idx in parts.items():
            scored[part] = score_level(detector, view.subset(idx, with_labels=False), level)
            sub_ids = [view.ids[i] for i in idx]
            log.append({"id": item_id, "key": key, "values": [_json_float(v) for v in vals], "reasons": reasons}
                       for item_id, vals, reasons in zip(sub_ids, scored[part].values, scored[part].reasons,
                                                         strict=True))
        run.score_seconds = time.perf_counter() - start
        run.meta = dict(detector.meta)
    missing = unscored or {}
    data = {}
    for part, idx in parts.items():
        extra = [missing[i] for i in split[part] if i in missing]  # unscorable items: NaN units, never dropped
        data[part] = pooled(view, [*scored[part].values, *(np.full(len(x.units_of(level)), np.nan) for x in extra)],
                            level, [*(view.instances[i] for i in idx), *extra],
                            suite.unit_tags_of if part == "test" else None)
    if level == "response":  # per-item scores for a suite's own tables (strata, other label sets)
        run.unit_scores["items"] = {
            part: {**{view.ids[i]: float(v[0]) for i, v in zip(idx, scored[part].values, strict=True)},
                   **{i: float("nan") for i in split[part] if i in missing}}
            for part, idx in parts.items()}
    run.n_scored = len(parts["test"])
    run.unit_scores["test"] = data["test"]
    ev = config.evaluation
    run.metrics = suite.unit_metrics(level, data["test"], data["val"], n_boot=ev.bootstrap, ci=ev.ci,
                                     seed=ev.bootstrap_seed, detector=detector)
    return run


def run_suite_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
                   backends: dict[str, Backend], previous: dict[str, Any] | None = None) -> Any:
    from haldet.pipeline import prepare_cell

    suite = get_suite(str(config.suite))
    result, ctx, items = prepare_cell(config, store, dataset, model, progress, backends)
    cell = ctx.store
    if suite.protocol == "provided":
        missing = [i.id for i in items if i.instance.response is None]
        if missing:
            raise HaldetError(f"suite {suite.name!r} scores responses that ship with the data, but {len(missing)} "
                              f"item(s) of {dataset!r} have none (first: {missing[0]})", where=f"dataset {dataset}",
                              hint=f"use a dataset of the suite ({', '.join(suite.datasets)})")
    unscored = {i.id: i.instance for i in items if i.instance.meta.get("unscorable")}
    if unscored:
        result.data["unscored"] = {i: inst.meta["unscorable"] for i, inst in unscored.items()}
    all_items, items = items, [i for i in items if i.id not in unscored]
    gen_records = GenerateStage(ctx).ensure(items)
    attach_generations(items, gen_records)
    if suite.protocol == "generate":
        _judge_responses(ctx, items)
    result.data["protocol"] = suite.protocol
    result.data["input_format"] = config.tokens.input_format if suite.protocol == "provided" else "chat"
    result.data["units"] = unit_counts(all_items, suite.levels)
    binary = response_labels(all_items)
    result.label_counts = dict(Counter("hallucination" if v else "correct" for v in binary.values()))
    ev = config.evaluation
    split = suite_split(suite, all_items, ev.split, ev.split_seed)
    cell.write_json("split.json", {"seed": ev.split_seed, "fractions": list(ev.split), "grouped": suite.splits,
                                   **split})
    result.split_sizes = {k: len(v) for k, v in split.items()}
    # one pass per training-label set (the suite's own labels by default; TRIVIA+: its noisy regimes): trained
    # detectors fit on each, the others score once; evaluation is always on the suite's evaluation labels
    label_sets = suite.training_labels([i.instance for i in all_items], config) or [("", binary)]
    for r, (regime, train) in enumerate(label_sets):
        ctx.split, ctx.labels = split, train  # few-shot verdict demonstrations come from these labels
        stage_records = ensure_stages(ctx, items, needed_stages(ctx.signals or ()))
        if r == 0:
            stage_records[GenerateStage.name] = dict(gen_records)
            result.evidence = {name: stage_stats(name, recs, wall_seconds=ctx.timings.get(name),
                                                 computed=ctx.counts.get(f"{name}_computed"),
                                                 previous=((previous or {}).get("evidence") or {}).get(name))
                               for name, recs in stage_records.items()}
        view = SignalView(ids=[i.id for i in items], instances=[i.instance for i in items],
                          generations=[i.generation for i in items if i.generation is not None],
                          loader=EvidenceLoader(ctx, items), labels=np.array([train.get(i.id, -1) for i in items]))
        for name in config.detectors:
            cls = DETECTORS.get(name, where="--detector")
            if r > 0 and not cls.trains:
                continue
            for level in suite.levels:
                if level not in cls.levels:  # e.g. a response-level detector in an entity-level suite
                    if r == 0:
                        result.data.setdefault("not_scored", []).append(
                            f"{name} at {level} level (it scores {', '.join(cls.levels)})")
                    continue
                try:
                    ev_key = evidence_key(ctx, items, needed_stages(make_detector(name, config).signals()))
                    run = run_level(name, level, suite, config, cell, view, split, ev_key, progress,
                                    train_labels=(regime, train), unscored=unscored)
                except (ValueError, RuntimeError) as exc:  # a detector bug or bad parameter: reported, no number
                    run = DetectorRun(name=name, family=str(cls.family()), level=level, train_labels=regime,
                                      error=f"{type(exc).__name__}: {exc}")
                result.detectors.append(run)
    result.extra_rows = suite.extra_rows([i.instance for i in all_items], split, result.detectors, config)
    result.timings = dict(ctx.timings)
    result.counts = dict(ctx.counts)
    return result


def _judge_responses(ctx: Any, items: list[Item]) -> None:
    """`generate` protocol: the judges label each generated answer (the response label of its instance)."""
    from haldet.stages.annotate import AnnotateStage, labels_of

    labels = labels_of(AnnotateStage(ctx).ensure(items))
    for item in items:
        label = labels.get(item.id)
        if label is not None and label.category in (Category.CORRECT, Category.HALLUCINATION):
            item.instance = item.instance.model_copy(update={"response_label": label.category})


def _json_float(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None
