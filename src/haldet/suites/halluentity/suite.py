"""The HalluEntity suite (seeds/halluentity.txt): entity-level hallucination detection on given biographies.

The responses ship with the data (ChatGPT biographies) and are teacher-forced through a proxy model, as the paper
does with 17 open models (here the embedded SmolLM2-135M by default: a substitute, named in every result row).
Five token-score detectors are aggregated to entities by the mean of their token scores, and evaluated pooled
over entities: AUROC, AUPRC, and F1 with its precision and recall at the F1-optimal threshold chosen on the
validation items (the paper's tune-on-test F1_Opt is reported as `f1_opt_test`). Items are split 60/20/20
(seeded), never entities.
"""

from __future__ import annotations

from typing import Any

from haldet.evaluation.breakdowns import breakdown_metrics, unit_attributes
from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.units import UnitData
from haldet.schema import Instance, SpanLabel
from haldet.suites.base import Suite, TableLayout, register

HALLUENTITY_METRICS = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")


@register("halluentity")
class HalluEntitySuite(Suite):
    title = "HalluEntity: entity-level hallucination detection"
    paper = "seeds/halluentity.txt (Yeh et al., 2025)"
    description = "Given ChatGPT biographies, entity labels; token scores from a proxy model, averaged per entity."
    datasets = ("halluentity",)
    protocol = "provided"
    levels = ("entity",)
    detectors = ("likelihood", "entropy", "ccp", "unit_sar", "focus")
    tables = (TableLayout("Tables 2/3 (entity level)", metrics=HALLUENTITY_METRICS),
              TableLayout("Tune-on-test variant (the paper's F1_Opt convention)",
                          metrics=("f1_opt_test", "precision_opt_test", "recall_opt_test", "tie_share",
                                   "base_rate")))

    def unit_tags_of(self, level: str, units: list[tuple[Instance, SpanLabel]]) -> dict[str, list[str]]:
        """Rate group, POS, entity type, sentence position and content flag of each test entity (spaCy)."""
        return unit_attributes(level, units)

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        out = super().unit_metrics(level, test, val, n_boot=n_boot, ci=ci, seed=seed)
        threshold = next(m.value for m in out if m.metric == "threshold")
        coverage = out[0].coverage
        return out + breakdown_metrics(test, threshold, coverage)

    def html_section(self, rows: list[dict[str, Any]]) -> str:
        """Tables 2/3 and the tune-on-test variant, then FPR/FNR by position in the sentence (the paper's Figure 5,
        right) per detector, at the validation threshold."""
        from haldet.report.svg import Series, line_plot
        from haldet.suites.report import html_tables

        rows = [r for r in rows if r.get("level") == "entity"]
        parts = ["<h2 id=halluentity>HalluEntity (entity level, test items)</h2>",
                 "<p class=muted>Entity score = mean of its token scores from one teacher-forced pass of a proxy "
                 "model; "
                 "F1-opt/P-opt/R-opt at the threshold chosen on validation items (the paper tunes on the evaluated "
                 "items: the '(tuned on test)' columns).</p>", html_tables(self, rows)]
        x = {"first": 0.0, "middle": 0.5, "last": 1.0}
        for kind in ("fpr", "fnr"):
            series = []
            for det in dict.fromkeys(r["detector"] for r in rows):
                pts = [(x[pos], float(r["value"]), pos) for pos in x for r in rows
                       if r["detector"] == det and r["metric"] == f"{kind}[position={pos}]" and r["value"] is not None]
                if pts:
                    series.append(Series(det, pts))
            if series:
                parts.append("<div class=figs>" + line_plot(series, title=f"{kind.upper()} by position in sentence",
                                                            xlabel="first / middle / last words",
                                                            ylabel=kind.upper()) + "</div>")
        return "\n".join(parts)
