"""VeriGray's tables and plots from its result rows (`evaluate`): Table 4 (BAcc, Hallu. Rec./Prec./F1, ranking
loss per detector, with the continuous ranking loss, AUROC and the perfect binary predictor's floor beside),
per-class F1 of the 7-way classifiers, selective risk against coverage, the transition Figs. 3 and 6
(`transition_figures`) and the breakdown by generator.

Rows may carry `model` (the proxy or classifier model); detectors are listed per model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from haldet.figures.data import Series
from haldet.suites.verigray.evaluate import split_metric
from haldet.suites.verigray.labels import CLASSES
from haldet.suites.verigray.transition_figures import transition_figures

if TYPE_CHECKING:
    from haldet.figures.render import FigureSet

TABLE4_COLUMNS = (("bacc", "BAcc"), ("recall", "Hallu. Rec."), ("precision", "Hallu. Prec."), ("f1", "Hallu. F1"),
                  ("rank_loss", "L_rank (binary)"), ("rank_loss_continuous", "L_rank (scores)"),
                  ("rank_loss_best_binary", "L_rank floor"), ("auroc", "AUROC"))
Row = Mapping[str, Any]


def _pct(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{100 * float(v):.1f}"


def _index(rows: Sequence[Row]) -> dict[tuple[str, str], dict[tuple[str, str], Row]]:
    """(model, detector) -> (metric, group) -> row; the group comes from the row or its `metric[group]` name."""
    out: dict[tuple[str, str], dict[tuple[str, str], Row]] = {}
    for r in rows:
        metric, group = split_metric(str(r["metric"]))
        group = str(r.get("group") or group)
        out.setdefault((str(r.get("model", "")), str(r["detector"])), {})[(metric, group)] = r
    return out


def table4(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and body (values in %) of the Table 4 layout, one line per (model, detector)."""
    header = ["model", "detector", *(label for _, label in TABLE4_COLUMNS), "N", "note"]
    body = []
    for (model, det), m in _index(rows).items():
        first = m.get(("bacc", "all"), {})
        body.append([model, det, *(_pct(m.get((metric, "all"), {}).get("value")) for metric, _ in TABLE4_COLUMNS),
                     str(first.get("n", "")), str(first.get("note") or "")])
    return header, body


def markdown(rows: Sequence[Row]) -> str:
    header, body = table4(rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in line) + " |" for line in body]
    return "\n".join(lines) + "\n"


def selective_series(rows: Sequence[Row]) -> list[Series]:
    """Per classifier, (coverage, selective risk) at each threshold class, most inclusive first."""
    out = []
    for (model, det), m in _index(rows).items():
        points = []
        for name in CLASSES:
            cov = m.get(("selective_coverage", f"threshold={name}"), {}).get("value")
            risk = m.get(("selective_risk", f"threshold={name}"), {}).get("value")
            if cov is not None and risk is not None:
                points.append((float(cov), float(risk), name))
        if points:
            out.append(Series(f"{det} ({model})" if model else det, points))
    return out


def _html_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def html_section(rows: Sequence[Row], figures: FigureSet | None = None, analyses: Sequence[Row] = ()) -> str:
    """The suite's part of the HTML report; its plots are drawn into `figures` (by default, the page's SVG only):
    selective prediction from the detectors' `rows`, the transition Figs. 3 and 6 from the data `analyses` rows."""
    from haldet.figures.charts import bar_figure, line_figure  # lazy: matplotlib; loaded when a report draws
    from haldet.figures.render import FigureSet  # lazy: matplotlib

    figures = figures if figures is not None else FigureSet(formats=())
    header, body = table4(rows)
    parts = ["<h2 id=verigray>VeriGray (sentence level, test split)</h2>",
             "<p class=muted>Protocol 1 drops Ambiguous, No-Fact and Out-Dependent sentences; L_rank (binary) is the "
             "paper's ranking loss of the binary verdicts, L_rank floor the best a perfect binary predictor can "
             "reach on the same sentences, L_rank (scores) the ranking loss of the continuous scores.</p>",
             _html_table(header, body)]
    f1 = [(key, m) for key, m in _index(rows).items() if any(metric == "class_f1" for metric, _ in m)]
    if f1:
        parts.append("<h3>Per-class F1 of the 7-way classifiers</h3>")
        parts.append(_html_table(["model", "detector", *CLASSES], [
            [model, det, *(_pct(m.get(("class_f1", f"class={c}"), {}).get("value")) for c in CLASSES)]
            for (model, det), m in f1]))
    series = selective_series(rows)
    if series:
        title = "Selective risk vs coverage"
        parts.append("<h3>Selective prediction</h3><div class=figs>" + figures.add("verigray-selective", line_figure(
            series, title=title, xlabel="coverage", ylabel="selective risk"), f"VeriGray: {title}") + "</div>")
    for dataset, model in sorted({(str(r["dataset"]), str(r.get("model", ""))) for r in analyses}):
        drawn = transition_figures([r for r in analyses if (r["dataset"], r.get("model", "")) == (dataset, model)],
                                   figures, f"{dataset}-{model}", bar_figure)
        if drawn:
            parts.append(f"<h3>Transition probabilities (Figs. 3 and 6): {escape(dataset)} | {escape(model)}</h3>"
                         "<div class=figs>" + "".join(drawn) + "</div>")
    groups = {str(r.get("group") or split_metric(str(r["metric"]))[1]) for r in rows}
    generators = sorted(g.split("=", 1)[1] for g in groups if g.startswith("generator="))
    if generators:
        parts.append("<h3>Balanced accuracy by generator</h3>")
        parts.append(_html_table(["model", "detector", *generators], [
            [model, det, *(_pct(m.get(("bacc", f"generator={g}"), {}).get("value")) for g in generators)]
            for (model, det), m in _index(rows).items()]))
    return "\n".join(parts)
