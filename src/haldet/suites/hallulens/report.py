"""`OUT/report.html` of `haldet hallulens evaluate`: the Table 2-shaped rates, Fig. 4 (PreciseWikiQA rates per
h-score decile, as a plot and a table), Fig. 9 (GeneratedEntities false acceptance per place-frequency group) and
Kendall's tau between the models' rankings on two tasks; one self-contained page, the same numbers as `table.md`.
The Fig. 4 plot is drawn into the `FigureSet` passed in, which keeps its PDF and PNG for `OUT/figures/`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from haldet.figures.charts import line_figure
from haldet.figures.data import Series
from haldet.figures.render import FigureSet
from haldet.suites.hallulens.rates import kendall_cells


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _pct(stat: dict[str, Any] | None) -> str:
    mean = (stat or {}).get("mean")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    sd = stat.get("sd") if stat else None
    return f"{100 * mean:.2f}" + (f" ± {100 * sd:.2f}" if isinstance(sd, float) and not math.isnan(sd) else "")


def html_report(results: dict[str, Any], header: Sequence[str], rows: Sequence[Sequence[str]],
                figures: FigureSet | None = None) -> str:
    figures = figures if figures is not None else FigureSet(formats=())
    parts = ["<!doctype html><html><head><meta charset=utf-8><title>HalluLens</title><style>"
             "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
             "<h1>HalluLens</h1><p>Percent, mean ± sample sd over trials.</p>", _table(header, rows)]
    series, body = [], []
    for model, tasks in results["models"].items():
        deciles = tasks.get("precisewikiqa", {}).get("by_decile", {})
        points = [(int(d) / 9, float(v["hallucination"]["mean"]), f"decile {d}") for d, v in deciles.items()
                  if v["hallucination"].get("mean") is not None and not math.isnan(v["hallucination"]["mean"])]
        if points:
            series.append(Series(model, points))
        body += [[model, d, str(v["n"]), _pct(v["false_refusal"]), _pct(v["hallucination"]), _pct(v["correct"])]
                 for d, v in deciles.items()]
    if body:
        parts += ["<h2>Fig. 4: PreciseWikiQA per h-score decile</h2>",
                  figures.add("hallulens-fig4-deciles", line_figure(
                      series, title="Hallucination rate by decile (0 = least known)", xlabel="decile / 9",
                      ylabel="H"), "HalluLens Fig. 4: hallucination rate by h-score decile") if series else "",
                  _table(["model", "decile", "items", "FR", "H", "C"], body)]
    places = [[m, g, str(v["n"]), _pct(v["far"])] for m, t in results["models"].items()
              for g, v in t.get("nonexistent", {}).get("by_place_group", {}).items()]
    if places:
        parts += ["<h2>Fig. 9: GeneratedEntities false acceptance per place-frequency group</h2>",
                  _table(["model", "place group", "items", "FAR"], places)]
    if results.get("kendall"):
        parts += ["<h2>Kendall's tau between the models' rankings on two tasks</h2>",
                  _table(["metric A", "metric B", "tau", "p", "models", "note"],
                         [[r["a"], r["b"], *kendall_cells(r)[:2], str(r["n_models"]), kendall_cells(r)[2]]
                          for r in results["kendall"]])]
    return "\n".join([*parts, "</body></html>"])
