"""The VeriGray suite (`haldet run --suite verigray`): given summaries, sentence units with seven ordered classes.

Items are split 60/20/20 by document (`group_of`): the summaries of one document never straddle parts. Per
detector, `unit_metrics` keeps the core's pooled unit metrics on the protocol-1 sentences (AUROC and AUPR with
item-grouped bootstrap CIs, F1 at the validation threshold) and adds VeriGray's rows (`evaluate`): Table 4 (BAcc,
Unfaithful recall/precision/F1, the paper's ranking loss of binary verdicts), the ranking loss of the continuous
scores, the floor a perfect binary predictor reaches, the 7-way classifiers' per-class F1 and selective prediction,
and every Table 4 metric per generator and per gold class. Breakdown rows are named `metric[group]`.

A detector's own verdict is used when it declares `decision_threshold` (Unfaithful when score > threshold, e.g.
the NLI verifier's argmax, the classifier's class below Implicitly-Supported); otherwise the threshold with the best
validation balanced accuracy. A detector declaring `graded` scores 6 - class degree (the 7-way classifier).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.units import UnitData
from haldet.schema import Instance, SpanLabel
from haldet.suites.base import Suite, TableLayout, register
from haldet.suites.verigray.analysis import FIG2, FIG3, FIG6, POLARITIES, SEVEN, analysis_rows
from haldet.suites.verigray.evaluate import DetectorOutput, Sentences, evaluate, metric_name
from haldet.suites.verigray.labels import CLASSES
from haldet.suites.verigray.report import TABLE4_COLUMNS, html_section

if TYPE_CHECKING:  # annotations only: matplotlib loads when a report draws
    from haldet.figures.render import FigureSet

TOP = len(CLASSES) - 1
CORE_METRICS = ("auroc", "aupr")  # the core's rows (with CIs) already hold these at group "all"


def detector_output(name: str, scores: np.ndarray, detector: Any) -> DetectorOutput:
    """Scores plus the detector's own binary verdict and 7-way class when it declares them."""
    out = DetectorOutput(name, scores=scores)
    threshold = getattr(detector, "decision_threshold", None)
    if threshold is not None:
        out.binary = np.where(np.isfinite(scores), (scores > threshold).astype(np.float64), np.nan)
        if getattr(detector, "params", {}).get("threshold") is not None:  # a configured, not a built-in, verdict
            out.note = f"fixed threshold {detector.params['threshold']:.6g} (configured; no validation threshold)"
    if getattr(detector, "graded", False):
        out.classes = TOP - scores
    return out


@register("verigray")
class VeriGraySuite(Suite):
    title = "VeriGray"
    paper = "The Gray Zone of Faithfulness: Taming Ambiguity in Unfaithfulness Detection (Ding et al.)"
    description = ("summary sentences in 7 ordered faithfulness classes; protocol 1 (binary), ranking loss, "
                   "selective prediction")
    datasets = ("verigray",)
    levels = ("sentence",)
    detectors = ("likelihood", "entropy", "ccp", "focus", "llmcheck_hidden", "llmcheck_attention", "nli_verifier")
    # a classifier, checker or verifier model each
    optional = ("verigray_llm", "minicheck", "lynx", "anah_v2", "lettucedetect")
    tables = (TableLayout("Table 4", metrics=tuple(m for m, _ in TABLE4_COLUMNS), level="sentence"),
              TableLayout("Fig. 2 (class share per generator, all splits)", table=FIG2, level="sentence",
                          line=("generator",), metrics=CLASSES),
              TableLayout("Fig. 3 (transition probabilities between consecutive sentences' polarities)", table=FIG3,
                          level="sentence", line=("from",), metrics=POLARITIES),
              TableLayout("Fig. 6 (transition probabilities of the polarities per generator, and between sentences "
                          "k = 2, 3, 4 apart)", table=FIG6, level="sentence", line=("view", "from"),
                          metrics=POLARITIES),
              TableLayout("Transition probabilities between consecutive sentences' seven classes", table=SEVEN,
                          level="sentence", line=("from",), metrics=CLASSES))
    settings: ClassVar[dict[str, Any]] = {}

    def group_of(self, instance: Instance) -> str:
        return str(instance.meta.get("document_id") or instance.id)

    def unit_tags_of(self, level: str, units: list[tuple[Instance, SpanLabel]]) -> dict[str, list[str]]:
        return {"generator": [str(inst.meta.get("generator", "")) for inst, _ in units]}

    def extra_rows(self, instances: list[Instance], split: dict[str, list[str]], runs: list[Any],
                   config: Any) -> list[dict[str, Any]]:
        """The data's class distribution per generator (Fig. 2) and the sentence-to-sentence transition matrices
        (Figs. 3 and 6, the seven classes), over every item of the cell."""
        return analysis_rows(instances)

    def html_section(self, rows: list[dict[str, Any]], figures: FigureSet | None = None) -> str:
        from haldet.suites.report import html_tables  # lazy: h5py

        mine = [r for r in rows if r.get("level") == "sentence"]
        analyses = [r for r in mine if r.get("table") in (FIG2, FIG3, FIG6, SEVEN)]
        return "\n".join([html_section([r for r in mine if not r.get("table")], figures, analyses),
                          "<h3>Data analyses (Figs. 2, 3, 6; 95% Wilson intervals)</h3>" if analyses else "",
                          html_tables(self, analyses)])

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        out = super().unit_metrics(level, test, val, n_boot=n_boot, ci=ci, seed=seed)
        if test.grade is None:
            return out
        parts = [("test", test)] + ([("val", val)] if val is not None and val.grade is not None else [])
        name = getattr(detector, "name", "") or "detector"
        sents = Sentences(item=np.concatenate([f"{p}:" + d.group.astype(str) for p, d in parts]),
                          degree=np.concatenate([TOP - d.grade for p, d in parts if d.grade is not None]),
                          generator=np.concatenate([d.tags.get("generator", np.full(len(d.y), "")) for _, d in parts]),
                          split=np.concatenate([np.full(len(d.y), p) for p, d in parts]))
        scores = np.concatenate([d.s for _, d in parts])
        for row in evaluate(sents, detector_output(name, scores, detector), n_boot=n_boot, ci=ci, seed=seed):
            if row["group"] == "all" and row["metric"] in CORE_METRICS:
                continue
            out.append(MetricValue(metric_name(row["metric"], row["group"]), row["value"], row.get("ci_low"),
                                   row.get("ci_high"), row["n"],
                                   int(row["n_pos"] or 0), float(row["coverage"]) if row["coverage"] is not None
                                   else 1.0, row["note"]))
        return out
