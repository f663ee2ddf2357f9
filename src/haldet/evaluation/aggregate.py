"""Aggregation of the tidy results table into the paper's tables (section 4.2, Tables 2, 9 and 11).

Rules (checked against Table 9 of the paper in `tests/evaluation/test_aggregate.py`):

* A **scenario column** follows Table 2's taxonomy: every `qa_*` scenario is "QA"; rag, summarization, math,
  science, code, agent and multilingual are RAG, Sum., Math, Sci., Code, Agent, Multi. (any other scenario is its
  own column). A multi-dataset column is the mean over its datasets; a single-dataset column is that dataset.
* **Overall** is the mean over datasets (not over scenario columns): Table 9's Overall equals the dataset mean.
* A **Family Avg.** row is the mean over the family's detectors of their value in that column.
* A missing value (a detector with no number on a dataset: one class, no valid score, failed) is left out of
  the mean and the cell records how many values it averaged (`n` of `expected`), so partial means are visible.
* Per backbone: each model is its own block; `backbone_summary` condenses a block into family and overall means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from haldet.evaluation.metrics import refuse_max_orientation

TABLE2_GROUPS = {"rag": "RAG", "summarization": "Sum.", "math": "Math", "science": "Sci.", "code": "Code",
                 "agent": "Agent", "multilingual": "Multi."}
GROUP_ORDER = ("QA", "RAG", "Sum.", "Math", "Sci.", "Code", "Agent", "Multi.")
FAMILY_ORDER = ("black", "gray", "white")
FAMILY_TITLE = {"black": "Black-box detectors", "gray": "Gray-box detectors", "white": "White-box detectors"}
OVERALL = "Overall"
FAMILY_AVG = "Family Avg."


def scenario_group(scenario: str) -> str:
    """Table 2 column of a dataset's scenario."""
    if scenario.startswith("qa"):
        return "QA"
    return TABLE2_GROUPS.get(scenario, scenario)


def _group_rank(group: str) -> tuple[int, str]:
    return (GROUP_ORDER.index(group), "") if group in GROUP_ORDER else (len(GROUP_ORDER), group)


def _family_rank(family: str) -> tuple[int, str]:
    return (FAMILY_ORDER.index(family), "") if family in FAMILY_ORDER else (len(FAMILY_ORDER), family)


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass
class Agg:
    """An averaged cell: the mean of `n` values out of `expected` (None when no value exists), and the mean
    coverage (share of test items with a valid score) of the values it averages (None when unknown)."""

    value: float | None
    n: int = 1
    expected: int = 1
    coverage: float | None = None

    @property
    def partial(self) -> bool:
        return self.value is not None and self.n < self.expected


def mean_of(values: Iterable[float | None], expected: int | None = None,
            coverages: Iterable[float | None] | None = None) -> Agg:
    """Mean of the present values; with `coverages` (paired with `values`), the mean coverage of those values."""
    vals_in = list(values)
    pairs = list(zip(vals_in, list(coverages) if coverages is not None else [None] * len(vals_in), strict=True))
    vals = [v for v, _ in pairs if v is not None]
    covs = [c for v, c in pairs if v is not None and c is not None]
    exp = expected if expected is not None else len(vals)
    return Agg(sum(vals) / len(vals) if vals else None, len(vals), exp,
               sum(covs) / len(covs) if covs and len(covs) == len(vals) else None)


@dataclass
class Column:
    key: str          # dataset name, "<group> Avg." / group label, or "Overall"
    label: str
    group: str        # Table 2 scenario column it belongs to ("" for Overall)
    kind: str         # "dataset" | "group" | "overall"


@dataclass
class Row:
    model: str
    family: str
    detector: str     # detector name, or FAMILY_AVG
    kind: str         # "detector" | "family"
    values: dict[str, Agg] = field(default_factory=dict)


@dataclass
class Table:
    title: str
    metric: str
    columns: list[Column]
    rows: list[Row]

    def models(self) -> list[str]:
        return list(dict.fromkeys(r.model for r in self.rows))

    def get(self, model: str, detector: str, column: str, family: str | None = None) -> float | None:
        for r in self.rows:
            if r.model == model and r.detector == detector and (family is None or r.family == family):
                agg = r.values.get(column)
                return None if agg is None else agg.value
        raise KeyError((model, detector, column))


@dataclass
class Frame:
    """One metric's values from the tidy rows, indexed for aggregation."""

    metric: str
    values: dict[tuple[str, str, str], float | None]   # (model, detector, dataset) -> value
    coverage: dict[tuple[str, str, str], float | None]  # (model, detector, dataset) -> coverage
    scenario: dict[str, str]                           # dataset -> scenario
    family: dict[str, str]                             # detector -> family
    models: list[str]
    detectors: list[str]
    datasets: list[str]                                # ordered by Table 2 column, then first appearance

    def datasets_of(self, model: str) -> list[str]:
        return [d for d in self.datasets if any(k[0] == model and k[2] == d for k in self.values)]

    def detectors_of(self, model: str) -> list[str]:
        return [d for d in self.detectors if any(k[0] == model and k[1] == d for k in self.values)]


def frame(rows: Sequence[Mapping[str, Any]], metric: str = "auroc") -> Frame:
    refuse_max_orientation(metric)
    values: dict[tuple[str, str, str], float | None] = {}
    coverage: dict[tuple[str, str, str], float | None] = {}
    scenario: dict[str, str] = {}
    family: dict[str, str] = {}
    models: list[str] = []
    detectors: list[str] = []
    datasets: list[str] = []
    for row in rows:
        if row.get("metric") != metric:
            continue
        model, det, ds = str(row["model"]), str(row["detector"]), str(row["dataset"])
        # a thin cell (too few labelled test items per class) is marked in the tables, never averaged or ranked
        values[(model, det, ds)] = None if row.get("thin") else _finite(row.get("value"))
        coverage[(model, det, ds)] = _finite(row.get("coverage"))
        scenario.setdefault(ds, str(row.get("scenario") or "?"))
        fam = str(row.get("family") or "?")
        if fam != "?" or det not in family:
            family[det] = fam
        for seq, item in ((models, model), (detectors, det), (datasets, ds)):
            if item not in seq:
                seq.append(item)
    order = {d: i for i, d in enumerate(datasets)}
    datasets.sort(key=lambda d: (_group_rank(scenario_group(scenario[d])), order[d]))
    return Frame(metric, values, coverage, scenario, family, models, detectors, datasets)


def _groups(fr: Frame, datasets: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ds in datasets:
        out.setdefault(scenario_group(fr.scenario[ds]), []).append(ds)
    return out


def _detector_rows(fr: Frame, model: str, columns: list[Column], groups: dict[str, list[str]],
                   datasets: list[str]) -> list[Row]:
    rows: list[Row] = []
    dets = sorted(fr.detectors_of(model), key=lambda d: (_family_rank(fr.family[d]), fr.detectors.index(d)))
    for det in dets:
        row = Row(model, fr.family[det], det, "detector")
        for col in columns:
            members = [col.key] if col.kind == "dataset" else groups[col.group] if col.kind == "group" else datasets
            row.values[col.key] = mean_of([fr.values.get((model, det, d)) for d in members], len(members),
                                          [fr.coverage.get((model, det, d)) for d in members])
        rows.append(row)
    # family averages after each family's detectors
    out: list[Row] = []
    for fam in sorted({r.family for r in rows}, key=_family_rank):
        fam_rows = [r for r in rows if r.family == fam]
        out += fam_rows
        avg = Row(model, fam, FAMILY_AVG, "family")
        for col in columns:
            avg.values[col.key] = mean_of((m.values[col.key].value for m in fam_rows), len(fam_rows))
        out.append(avg)
    return out


def scenario_table(rows: Sequence[Mapping[str, Any]], metric: str = "auroc") -> Table:
    """Table 2: per backbone and detector, one column per scenario group plus Overall; family averages."""
    fr = frame(rows, metric)
    out: list[Row] = []
    all_columns: dict[str, Column] = {}
    for model in fr.models:
        datasets = fr.datasets_of(model)
        groups = _groups(fr, datasets)
        columns = [Column(g, g, g, "group") for g in groups] + [Column(OVERALL, OVERALL, "", "overall")]
        for c in columns:
            all_columns.setdefault(c.key, c)
        out += _detector_rows(fr, model, columns, groups, datasets)
    cols = sorted((c for c in all_columns.values() if c.kind == "group"), key=lambda c: _group_rank(c.group))
    cols.append(all_columns.get(OVERALL, Column(OVERALL, OVERALL, "", "overall")))
    return Table(f"{metric.upper()} by scenario (Table 2 layout)", metric, cols, out)


def dataset_table(rows: Sequence[Mapping[str, Any]], metric: str = "auroc") -> Table:
    """Table 9: per dataset, with a "<group> Avg." column after every multi-dataset scenario group, then Overall."""
    fr = frame(rows, metric)
    out: list[Row] = []
    groups_all = _groups(fr, fr.datasets)
    columns: list[Column] = []
    for group, members in groups_all.items():
        columns += [Column(d, d, group, "dataset") for d in members]
        if len(members) > 1:
            columns.append(Column(f"{group} Avg.", f"{group} Avg.", group, "group"))
    columns.append(Column(OVERALL, OVERALL, "", "overall"))
    for model in fr.models:
        datasets = fr.datasets_of(model)
        groups = _groups(fr, datasets)
        model_cols = [c for c in columns if c.kind != "dataset" or c.key in datasets]
        model_cols = [c for c in model_cols if c.kind != "group" or c.group in groups]
        out += _detector_rows(fr, model, model_cols, groups, datasets)
    return Table(f"{metric.upper()} per dataset (Table 9 layout)", metric, columns, out)


def backbone_summary(rows: Sequence[Mapping[str, Any]], metric: str = "auroc") -> list[dict[str, Any]]:
    """Per backbone: each family's overall mean, the all-detector mean, and the best detector by Overall."""
    table = scenario_table(rows, metric)
    out = []
    for model in table.models():
        det_rows = [r for r in table.rows if r.model == model and r.kind == "detector"]
        fam_rows = [r for r in table.rows if r.model == model and r.kind == "family"]
        entry: dict[str, Any] = {"model": model}
        for r in fam_rows:
            entry[r.family] = r.values[OVERALL].value
        entry["all"] = mean_of(r.values[OVERALL].value for r in det_rows).value
        scored = [r for r in det_rows if r.values[OVERALL].value is not None]
        best = max(scored, key=lambda r: r.values[OVERALL].value or 0.0, default=None)
        entry["best_detector"] = best.detector if best else None
        entry["best_value"] = best.values[OVERALL].value if best else None
        covs = {None if (cov := r.values[OVERALL].coverage) is None else round(cov, 6) for r in scored}
        entry["mixed_coverage"] = len(covs) > 1  # the best was chosen among detectors scored on different items
        entry["n_datasets"] = len({k[2] for k in frame(rows, metric).values if k[0] == model})
        out.append(entry)
    return out


COST_FIELDS = ("cost_at_n", "score_only_s", "infer_s_item", "extra_calls_item", "extra_tokens_item", "prep_s_item",
               "fit_s", "score_s")


def cost_table(rows: Sequence[Mapping[str, Any]], metric: str = "auroc") -> list[dict[str, Any]]:
    """Table 11: per backbone and detector, the mean over datasets of the metric and of each cost column."""
    refuse_max_orientation(metric)
    by_key: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("metric") == metric:
            by_key.setdefault((str(row["model"]), str(row["detector"])), []).append(row)
    out = []
    for (model, det), members in by_key.items():
        entry: dict[str, Any] = {"model": model, "detector": det, "family": members[0].get("family"),
                                 "evidence": members[0].get("evidence"), "n_datasets": len(members),
                                 "cost_n": members[0].get("cost_n")}
        agg = mean_of([_finite(m.get("value")) for m in members], None, [_finite(m.get("coverage")) for m in members])
        entry[metric], entry["coverage"] = agg.value, agg.coverage
        for f in COST_FIELDS:
            entry[f] = mean_of(_finite(m.get(f)) for m in members).value
        billed = [m for m in members if "usd_at_n" in m]  # an API model's: USD, None where a price is unknown
        if billed:
            usd = [m["usd_at_n"] for m in billed]
            entry["usd_at_n"] = None if any(u is None for u in usd) else sum(usd) / len(usd)
        out.append(entry)
    model_order = {m: i for i, m in enumerate(dict.fromkeys(e["model"] for e in out))}
    det_order = {d: i for i, d in enumerate(dict.fromkeys(e["detector"] for e in out))}
    out.sort(key=lambda e: (model_order[e["model"]], _family_rank(str(e["family"])), det_order[e["detector"]]))
    return out
