"""The one parameter of the cell flow: what differs between OpenHalDet's protocol and a hosted benchmark's.

`Procedure` is OpenHalDet's: answers generated and labelled by the judges, a stratified 60/20/20 split of
labelled items, one score per answer on test, AUROC/AUPR/FPR@95 with a stratified bootstrap. `SuiteProcedure` wraps a
suite (`haldet.suites.base.Suite`): labels that ship with the data (or its judges), its split (grouped or given), its
levels and training-label sets, val and test scored (thresholds come from validation), pooled unit metrics and its
own tables. The cell flow (`haldet.flow.cell`) and the scoring path (`haldet.flow.scoring`) are the same for both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from haldet.backends.openai_client import accumulate_usages
from haldet.config import RunConfig, digest
from haldet.detectors.base import Detector, UnitScores
from haldet.errors import HaldetError
from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.rejection import risk_coverage
from haldet.evaluation.splits import SPLITS, grouped_split, stratified_split
from haldet.evaluation.units import UnitData
from haldet.flow.scoring import DetectorRun, ResponseScoring, json_float
from haldet.schema import Category, Instance
from haldet.signals import SignalView
from haldet.stages.annotate import AnnotateStage, labels_of
from haldet.stages.base import CellContext, Item
from haldet.store import ScoreLog
from haldet.suites.base import Suite, get_suite
from haldet.util.limits import cut_off_summary


class Procedure(ResponseScoring):
    """OpenHalDet's protocol (the default; its scoring half is `ResponseScoring`); `SuiteProcedure` overrides what a
    hosted benchmark does differently."""

    needs_labels = True  # a cell without a usable response label ends with the reason (a suite may label units only)

    # --- items and labels ------------------------------------------------------------------------------------
    def prepare_instances(self, instances: list[Instance], backend: Any) -> list[Instance]:
        """The loaded instances as the model is fed them (unchanged here)."""
        return instances

    def scorable(self, items: list[Item], result: Any) -> list[Item]:
        """The items that get evidence and scores (a suite may mark some unscorable: NaN with a reason)."""
        return items

    def unscored(self, all_items: list[Item], scored: list[Item]) -> dict[str, Instance]:
        """Items left out of scoring that still count in the metrics (as NaN): none here, an item without an
        answer is simply not evaluated."""
        return {}

    def label(self, ctx: CellContext, items: list[Item], all_items: list[Item], result: Any,
              previous: dict[str, Any]) -> dict[str, int]:
        """Binary evaluation labels by item id (1 = hallucination); the judges label each generated answer."""
        result.data["generation"] = cut_off_summary(
            self.config, [(item.instance, item.generation.finish_reason if item.generation else "") for item in items])
        annotate = AnnotateStage(ctx)
        records = annotate.ensure(items)
        ctx.store.record_keys(annotate.name, records)  # the labels this run evaluates: what readers show
        labels = labels_of(records)
        result.annotation = annotate.summary(labels)  # per judge, failures, judge tokens/cost
        result.annotation["usage"] = accumulate_usages((previous.get("annotation") or {}).get("usage"),
                                                       result.annotation["usage"])  # summed over reruns
        result.label_counts = result.annotation["total"]
        return {i: int(lab.category is Category.HALLUCINATION) for i, lab in labels.items()
                if lab.category in (Category.CORRECT, Category.HALLUCINATION)}

    def evaluated(self, items: list[Item], labels: dict[str, int]) -> list[Item]:
        """The items whose evidence is computed and whose scores are evaluated: the labelled ones."""
        return [item for item in items if item.id in labels]

    def split(self, items: list[Item], labels: dict[str, int]) -> tuple[dict[str, list[str]], dict[str, Any]]:
        """The split and what `split.json` records beside it."""
        ev = self.config.evaluation
        return stratified_split(labels, ev.split, ev.split_seed), {}

    def training_labels(self, items: list[Item], labels: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
        """(name, labels) of each label set trained detectors fit on, in turn: here the evaluation labels."""
        return [("", labels)]

    def extra_rows(self, items: list[Item], split: dict[str, list[str]],
                   runs: list[DetectorRun]) -> list[dict[str, Any]]:
        return []


class SuiteProcedure(Procedure):
    """A hosted benchmark's protocol: everything it does differently is here or in the suite class."""

    scored_parts = ("val", "test")
    needs_labels = False

    def __init__(self, config: RunConfig, suite: Suite) -> None:
        super().__init__(config)
        self.suite = suite
        self.levels = suite.levels_for(config)

    def prepare_instances(self, instances: list[Instance], backend: Any) -> list[Instance]:
        """E.g. contexts over the model's window, fitted by the suite's recorded policy (`Suite.prepare_instances`)."""
        return self.suite.prepare_instances(instances, backend, self.config)

    def unscored(self, all_items: list[Item], scored: list[Item]) -> dict[str, Instance]:
        """Unscorable items (and any without an answer) stay in the split as NaN units, never dropped."""
        kept = {item.id for item in scored}
        return {item.id: item.instance for item in all_items if item.id not in kept}

    def scorable(self, items: list[Item], result: Any) -> list[Item]:
        if items and self.suite.answers_of(items[0].instance.dataset) == "provided":
            missing = [i.id for i in items if i.instance.response is None]
            if missing:
                dataset = items[0].instance.dataset
                raise HaldetError(f"suite {self.suite.name!r} scores responses that ship with the data, but "
                                  f"{len(missing)} item(s) of {dataset!r} have none (first: {missing[0]})",
                                  where=f"dataset {dataset}",
                                  hint=f"use a dataset of the suite ({', '.join(self.suite.datasets)})")
        unscored = {i.id: i.instance for i in items if i.instance.meta.get("unscorable")}
        if unscored:
            result.data["unscored"] = {i: inst.meta["unscorable"] for i, inst in unscored.items()}
        return [i for i in items if i.id not in unscored]

    def label(self, ctx: CellContext, items: list[Item], all_items: list[Item], result: Any,
              previous: dict[str, Any]) -> dict[str, int]:
        """Labels that ship with the data (response labels, or implied by the units); with the `generate`
        protocol the judges label each answer first (the response label of its instance)."""
        self.suite.answered(ctx, items)  # e.g. claims of each answer as its units (the longform suite)
        source = self.suite.answers_of(ctx.dataset)
        if source == "generate":
            records = AnnotateStage(ctx).ensure(items)
            ctx.store.record_keys(AnnotateStage.name, records)  # the labels this run evaluates: what readers show
            labels = labels_of(records)
            for item in items:
                label = labels.get(item.id)
                if label is not None and label.category in (Category.CORRECT, Category.HALLUCINATION):
                    item.instance = item.instance.model_copy(update={"response_label": label.category})
        given = source == "provided"
        result.data["protocol"] = source  # the manifest's key, kept for the runs already written
        result.data["input_format"] = self.config.tokens.input_format if given else "chat"
        result.data["units"] = unit_counts(all_items, self.levels)
        binary = response_labels(all_items)
        result.label_counts = dict(Counter("hallucination" if v else "correct" for v in binary.values()))
        return binary

    def evaluated(self, items: list[Item], labels: dict[str, int]) -> list[Item]:
        """Every scorable item: units may be labelled where the response is not."""
        return items

    def split(self, items: list[Item], labels: dict[str, int]) -> tuple[dict[str, list[str]], dict[str, Any]]:
        """The dataset's own split when the suite says so (every item must carry one); every item in test when the
        run fits nothing (`none`); else a seeded grouped split of items: units never cross parts."""
        ev = self.config.evaluation
        suite = self.suite
        policy = suite.split_policy(self.config)
        if policy == "none":
            return {"train": [], "val": [], "test": sorted(i.id for i in items)}, {"grouped": policy}
        if policy == "given":
            missing = [i.id for i in items if i.instance.split is None]
            if missing:
                raise HaldetError(f"suite {suite.name!r} uses the dataset's own splits, but {len(missing)} item(s) "
                                  f"have none (first: {missing[0]})", where=f"dataset {items[0].instance.dataset}",
                                  hint="the adapter must set Instance.split (train/val/test) on every item")
            out: dict[str, list[str]] = {name: [] for name in SPLITS}
            for item in items:
                out[str(item.instance.split)].append(item.id)
            return {name: sorted(ids) for name, ids in out.items()}, {"grouped": policy}
        split = grouped_split({i.id: suite.group_of(i.instance) for i in items}, ev.split, ev.split_seed)
        return split, {"grouped": policy}

    def training_labels(self, items: list[Item], labels: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
        """The suite's own labels by default; TRIVIA+: its noisy regimes (evaluation labels stay fixed)."""
        return self.suite.training_labels([i.instance for i in items], self.config) or [("", labels)]

    def scope(self, detector: Detector) -> str:
        """`evaluation.evaluate_on: all` (HalluEntity and VeriGray report on every item): training-free detectors
        are scored and evaluated on every item; trained ones still fit on train and report on test."""
        return "all" if self.config.evaluation.evaluate_on == "all" and not detector.trains else "test"

    def score_key(self, name: str, identity: dict[str, Any], level: str, evidence_key: str,
                  trained_on: tuple[dict[str, list[str]], dict[str, int]] | None) -> str:
        trained = None if trained_on is None else [trained_on[0], sorted(trained_on[1].items())]
        return digest([name, identity, level, evidence_key, trained])

    def score_log(self, name: str, level: str, train_labels: str) -> str:
        return ScoreLog.of(name, level, train_labels, suite=True).name

    def fitted_name(self, name: str, level: str) -> str:
        return f"{name}@{level}"

    def score(self, detector: Detector, view: SignalView, level: str) -> UnitScores:
        return detector.score_units(view, level)

    def score_records(self, ids: list[str], scores: UnitScores, key: str) -> list[dict[str, Any]]:
        """One record per item with one value per unit (`scores/<detector>@<level>.jsonl`)."""
        return [{"id": item_id, "key": key, "values": [json_float(v) for v in vals], "reasons": reasons}
                for item_id, vals, reasons in zip(ids, scores.values, scores.reasons, strict=True)]

    def read_scores(self, records: list[dict[str, Any]]) -> UnitScores:
        return UnitScores([np.array([np.nan if v is None else v for v in r["values"]]) for r in records],
                          [list(r["reasons"]) for r in records])

    def evaluate(self, run: DetectorRun, detector: Detector, view: SignalView, split: dict[str, list[str]],
                 scored: dict[str, tuple[list[str], UnitScores]], unscored: dict[str, Instance]) -> list[MetricValue]:
        """Pooled units of val and test (unscorable items count as NaN units, never dropped), metrics with the
        threshold from validation (`Suite.unit_metrics`). Scope "all": the evaluated units are those of every item
        (train, val and test), each row saying so; a validation threshold then applies to items that include val."""
        level = run.level
        instance = dict(zip(view.ids, view.instances, strict=True))
        data = {}
        evaluated = ("train", "val", "test") if run.scope == "all" else ("test",)
        for part in ("val", "evaluated"):
            parts = evaluated if part == "evaluated" else ("val",)
            ids = [i for p in parts for i in scored[p][0]]
            values = [v for p in parts for v in scored[p][1].values]
            extra = [unscored[i] for p in parts for i in split[p] if i in unscored]
            data[part] = pooled([*values, *(np.full(len(x.units_of(level)), np.nan) for x in extra)], level,
                                [*(instance[i] for i in ids), *extra],
                                self.suite.unit_tags_of if part == "evaluated" else None)
        run.unit_scores["rows"] = [
            row for part, (ids, scores) in scored.items()
            for row in unit_rows(part, level, [(instance[i], v, r) for i, v, r in
                                               zip(ids, scores.values, scores.reasons, strict=True)]
                                 + [(unscored[i], None, None) for i in split[part] if i in unscored])]
        if level == "response":  # per-item scores for a suite's own tables (strata, other label sets)
            run.unit_scores["items"] = {
                part: {**{i: float(v[0]) for i, v in zip(ids, scores.values, strict=True)},
                       **{i: float("nan") for i in split[part] if i in unscored}}
                for part, (ids, scores) in scored.items()}
        run.unit_scores["test"] = test = data["evaluated"]
        kept = (test.y >= 0) & np.isfinite(test.s)  # binary-labelled units with a score, as the response level's
        run.curves["risk_coverage"] = risk_coverage(test.y[kept], test.s[kept]).sampled()
        ev = self.config.evaluation
        metrics = self.suite.unit_metrics(level, data["evaluated"], data["val"], n_boot=ev.bootstrap, ci=ev.ci,
                                          seed=ev.bootstrap_seed, detector=detector)
        if run.scope == "all":
            for m in metrics:
                m.note = "; ".join(n for n in (m.note, ALL_ITEMS_NOTE) if n)
        return metrics

    def extra_rows(self, items: list[Item], split: dict[str, list[str]],
                   runs: list[DetectorRun]) -> list[dict[str, Any]]:
        return self.suite.extra_rows([i.instance for i in items], split, runs, self.config)


ALL_ITEMS_NOTE = ("scope all: every item evaluated (train, val and test, as the paper reports); a threshold chosen on "
                  "validation is applied to items that include validation")


def procedure_for(config: RunConfig) -> Procedure:
    """OpenHalDet's protocol, or the configured suite's."""
    return SuiteProcedure(config, get_suite(config.suite)) if config.suite else Procedure(config)


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


UNSCORED_REASON = "the item was not scored (no answer or no usable evidence); it counts as an invalid unit"


def unit_rows(part: str, level: str, items: list[tuple[Instance, np.ndarray | None, list[str] | None]]) -> list[
        dict[str, Any]]:
    """One row per unit of `level` of each (instance, unit scores, reasons) of one scored part, in the order the
    metrics pool them: the item id, the unit's index and character offsets into the response, its labels
    (`label` 1 = hallucinated, 0 = correct, None = no binary label; `grade` ordinal or None) and its score (None =
    invalid, with the reason). An unscored item (scores None) gives NaN units with `UNSCORED_REASON`."""
    rows = []
    for inst, vals, reasons in items:
        for u, unit in enumerate(inst.units_of(level)):
            value = None if vals is None else json_float(vals[u])
            why = UNSCORED_REASON if vals is None or reasons is None else reasons[u]
            rows.append({"part": part, "item_id": inst.id, "unit_index": u, "start": unit.start, "end": unit.end,
                         "label": unit.binary, "grade": unit.grade, "score": value,
                         "reason": why if value is None else ""})
    return rows


def pooled(values: list[np.ndarray], level: str, labelled: list[Instance],
           unit_tags_of: Callable[[str, list[tuple[Instance, Any]]], dict[str, list[str]]] | None = None) -> UnitData:
    """Units of the given instances with their labels, scores and item index; units with only an ordinal grade come
    too (y = -1), and the suite's per-unit tags (`unit_tags_of`, computed once over all pooled units)."""
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
