"""The HalluEntity suite (Yeh et al., 2025): entity-level hallucination detection on given biographies.

The responses ship with the data (ChatGPT biographies) and are teacher-forced through a proxy model, as the paper
does with 17 open models (here the embedded SmolLM2-135M by default: a substitute, named in every result row).
Five token-score detectors are aggregated to entities by the mean of their token scores, and evaluated pooled
over entities: AUROC, AUPRC, and F1 with its precision and recall at the F1-optimal threshold chosen on the
validation items (the paper's tune-on-test F1_Opt is reported as `f1_opt_test`). Items are split 60/20/20
(seeded), never entities.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from haldet.evaluation.breakdowns import breakdown_metrics, paper_breakdowns, unit_attributes
from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.units import UnitData
from haldet.figures.data import Series
from haldet.schema import Instance, SpanLabel
from haldet.suites.base import Suite, TableLayout, register
from haldet.suites.halluentity.analysis import (
    CORRELATION,
    FIG2_NER,
    FIG2_POS,
    FIG4,
    PER_RESPONSE,
    POSITION,
    TABLE4,
    label_statistics,
    proxy_correlation,
)
from haldet.suites.halluentity.figures import paper_figures

if TYPE_CHECKING:  # annotations only: matplotlib loads when a report draws
    from haldet.figures.render import FigureSet

HALLUENTITY_METRICS = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")


@register("halluentity")
class HalluEntitySuite(Suite):
    title = "HalluEntity: entity-level hallucination detection"
    paper = "HalluEntity: Benchmarking and Understanding Entity-Level Hallucination Detection (Yeh et al., 2025)"
    description = "Given ChatGPT biographies, entity labels; token scores from a proxy model, averaged per entity."
    datasets = ("halluentity",)
    answer_source = "provided"
    levels = ("entity",)
    detectors = ("likelihood", "entropy", "ccp", "unit_sar", "focus")
    tables = (TableLayout("Tables 2/3 (entity level)", metrics=HALLUENTITY_METRICS),
              TableLayout("Tune-on-test variant (the paper's F1_Opt convention)",
                          metrics=("f1_opt_test", "precision_opt_test", "recall_opt_test", "tie_share",
                                   "base_rate")),
              TableLayout("Fig. 2, left (entities by POS tag, all items)", table=FIG2_POS, line=("tag",),
                          metrics=("n_entities", "share", "hallucination_rate")),
              TableLayout("Fig. 2, middle (entities by entity type, all items)", table=FIG2_NER, line=("tag",),
                          metrics=("n_entities", "share", "hallucination_rate")),
              TableLayout("Hallucinated share by position in the sentence (section 3.2)", table=POSITION,
                          line=("tag",), metrics=("n_entities", "share", "hallucination_rate")),
              TableLayout("Fig. 4 (per-response hallucination rate)", table=FIG4, line=("bin",),
                          metrics=("n_items", "share")),
              TableLayout("Table 4 (responses per hallucination-rate group)", table=TABLE4, line=("rate_group",),
                          metrics=("n_items",)),
              TableLayout("Per response", table=PER_RESPONSE, line=("statistic",),
                          metrics=("entities", "hallucinated_share")),
              TableLayout("Tables 7/8 (Pearson's r of entity scores between proxy models)", table=CORRELATION,
                          line=("detector", "model_a", "model_b"), metrics=("pearson",)))
    DATA_TABLES = (FIG2_POS, FIG2_NER, POSITION, FIG4, TABLE4, PER_RESPONSE, CORRELATION)

    def extra_rows(self, instances: list[Instance], split: dict[str, list[str]], runs: list[Any],
                   config: Any) -> list[dict[str, Any]]:
        """The data's label statistics (Fig. 2, position, Fig. 4, Table 4, per response)."""
        return label_statistics(instances)

    def run_rows(self, unit_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Tables 7/8: Pearson's r between the proxy models' entity scores, per detector."""
        return proxy_correlation(unit_rows)

    def unit_tags_of(self, level: str, units: list[tuple[Instance, SpanLabel]]) -> dict[str, list[str]]:
        """Rate group, POS, entity type, sentence position and content flag of each test entity (spaCy)."""
        return unit_attributes(level, units)

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        out = super().unit_metrics(level, test, val, n_boot=n_boot, ci=ci, seed=seed)
        threshold = next(m.value for m in out if m.metric == "threshold")
        coverage = out[0].coverage
        return out + breakdown_metrics(test, threshold, coverage) + paper_breakdowns(test, coverage)

    def html_section(self, rows: list[dict[str, Any]], figures: FigureSet | None = None) -> str:
        """Tables 2/3 and the tune-on-test variant, FPR/FNR by position in the sentence per detector at the validation
        threshold, then the paper's Figs. 3c, 5 and 6 at its F1-optimal thresholds (`figures.paper_figures`)."""
        from html import escape

        from haldet.figures.charts import bar_figure, line_figure  # lazy: matplotlib; loaded when a report draws
        from haldet.figures.render import FigureSet  # lazy: matplotlib
        from haldet.suites.report import html_tables  # lazy: h5py

        figures = figures if figures is not None else FigureSet(formats=())
        rows = [r for r in rows if r.get("level") == "entity"]
        data = [r for r in rows if r.get("table") in self.DATA_TABLES]
        rows = [r for r in rows if r.get("table") not in self.DATA_TABLES]
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
                title = f"{kind.upper()} by position in sentence"
                parts.append("<div class=figs>" + figures.add(f"halluentity-{kind}-position", line_figure(
                    series, title=title, xlabel="first / middle / last words", ylabel=kind.upper()),
                    f"HalluEntity: {title}") + "</div>")
        cells = sorted({(str(r["dataset"]), str(r.get("model", ""))) for r in rows})
        for dataset, model in cells:
            drawn = paper_figures([r for r in rows if (r["dataset"], r.get("model", "")) == (dataset, model)],
                                  figures, f"{dataset}-{model}", bar_figure)
            if drawn:
                parts += [f"<h3>Figs. 3c, 5, 6 at the paper's F1-optimal thresholds: {escape(dataset)} | "
                          f"{escape(model)}</h3><p class=muted>Tuned on the evaluated entities, as the paper: Fig. 3c "
                          "at each rate group's own best-F1 threshold, Figs. 5 and 6 at the best-F1 threshold of all "
                          "test entities (the curves above use the validation threshold).</p>",
                          "<div class=figs>" + "".join(drawn) + "</div>"]
        if data:
            parts += ["<h3>Label statistics and proxy-model correlation</h3>", html_tables(self, data)]
        return "\n".join(parts)
