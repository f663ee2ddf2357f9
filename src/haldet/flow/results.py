"""What a finished cell leaves: the tidy result rows (one per detector, level and metric, with CI, N, coverage,
cost and provenance) and its manifest entry."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from haldet.detectors.base import DETECTORS
from haldet.errors import ThinCellWarning
from haldet.evaluation.cost import DEFAULT_N, detector_cost
from haldet.evaluation.metrics import max_orientation_row
from haldet.flow.cell import CellResult
from haldet.models.provenance import substitutes
from haldet.stages.plan import stage_provides


def result_rows(cell: CellResult, cost_n: int = DEFAULT_N, *, max_orientation: bool = False) -> list[dict[str, Any]]:
    """The tidy results: one row per (dataset, scenario, model, detector, family, metric), with the metric's
    value, CI, N, positives, coverage and scope (the items pooled: test, or all), and the detector's cost columns on
    this cell (haldet.evaluation.cost). `max_orientation`: each AUROC row gets an `auroc_max_orientation` row
    beside it (`report.max_orientation`; never ranked)."""
    rows = []
    thin = str(cell.data.get("thin") or "")
    # outputs cut off inside their reasoning: not labelled, not scored, counted on every row of the cell
    no_answer = int((cell.data.get("no_answer") or {}).get("n") or 0)
    for run in cell.detectors:
        timed = run.name not in cell.untimed
        reads = run.reads or DETECTORS.get(run.name, where="--detector").requires  # an ensemble: its members'
        cost = detector_cost(reads, cell.evidence,
                             fit_s=round(run.fit_seconds, 6) if timed else None,
                             score_s=round(run.score_seconds, 6) if timed else None,
                             n_scored=run.n_scored, n=cost_n, stage_signals=stage_provides()) if not run.error else {}
        if not timed and not run.error:
            cost["cost_note"] = "scores read from an earlier run's cache that recorded no fit/score timings"
        for m in run.metrics:
            rows.append({
                "dataset": cell.dataset, "scenario": cell.scenario, "model": cell.model,
                "detector": run.name, "family": run.family, "metric": m.metric, "level": run.level,
                "value": m.value, "ci_low": m.ci_low, "ci_high": m.ci_high, "n": m.n, "n_pos": m.n_pos,
                "coverage": m.coverage, "fit_s": round(run.fit_seconds, 4), "score_s": round(run.score_seconds, 4),
                "note": "; ".join(n for n in (thin, m.note, str(run.meta.get("note") or "")) if n),
                "scope": run.scope, "access": str(cell.data.get("access") or ""),
                **cost,
                **provenance_columns(run.name, run.identity),
                **({"train_labels": run.train_labels} if run.train_labels else {}),
                **({"thin": thin} if thin else {}),
                **({"no_answer": no_answer} if no_answer else {}),
            })
    if max_orientation:
        rows = [out for row in rows for out in ([row, max_orientation_row(row)] if row["metric"] == "auroc"
                                                else [row])]
    base = {"dataset": cell.dataset, "scenario": cell.scenario, "model": cell.model}
    return rows + [{**base, **row} for row in cell.extra_rows]


def warn_thin(cells: Iterable[CellResult]) -> None:
    """A `ThinCellWarning` per cell too thin to rank detectors: what the CLI prints, for callers of the Python API."""
    for cell in cells:
        if cell.data.get("thin") and not cell.error:
            warnings.warn(f"{cell.dataset} | {cell.model}: {cell.data['thin']}",
                          ThinCellWarning, stacklevel=3)


def unit_score_rows(cell: CellResult) -> list[dict[str, Any]]:
    """Every unit score of a suite cell (val and test parts, every detector and level) with its label and position,
    the rows of `unit_scores.csv`: enough to recompute a unit-level metric without haldet."""
    rows = []
    for run in cell.detectors:
        base = {"dataset": cell.dataset, "model": cell.model, "detector": run.name, "level": run.level,
                "train_labels": run.train_labels, "variant": run.identity.get("variant") or "", "key": run.key}
        rows += [{**base, **row} for row in run.unit_scores.get("rows") or []]
    return rows


def cell_entry(c: CellResult) -> dict[str, Any]:
    """A cell's manifest entry: what ran, how long each stage took (`stage_seconds`: this run's wall time;
    `evidence`: per-item cost stats that survive caching), and each detector's score key and timings."""
    return {"dataset": c.dataset, "scenario": c.scenario, "model": c.model, "error": c.error, "data": c.data,
            "model_fingerprint": c.fingerprint, "labels": c.label_counts,
            "annotation": c.annotation, "split": c.split_sizes,
            "stage_seconds": c.timings, "computed": c.counts, "evidence": c.evidence,
            "detectors": [{"name": d.name, "family": d.family, "level": d.level, "key": d.key, "n_scored": d.n_scored,
                           "trains": DETECTORS.get(d.name, where="--detector").trains,  # read by reports
                           "fit_s": d.fit_seconds, "score_s": d.score_seconds,
                           "timing_known": d.name not in c.untimed, "cached": d.cached, "error": d.error,
                           **({"train_labels": d.train_labels} if d.train_labels else {}),
                           "identity": d.identity, "meta": d.meta, **({"log": d.log} if d.log else {}),
                           **({"curves": d.curves} if d.curves else {})} for d in c.detectors]}


def provenance_columns(name: str, identity: dict[str, Any]) -> dict[str, Any]:
    """Result-row columns saying what produced a detector's numbers: its variant (and whether that is the default),
    its version and any substitute auxiliary model ('requested -> used'; empty when none)."""
    cls = DETECTORS.get(name, where="--detector")
    variant = identity.get("variant") or ""
    return {"variant": variant, "default_variant": variant == (cls.defaults.get("variant") or ""),
            "version": identity.get("version", cls.version), "substitute": "; ".join(substitutes(identity))}
