"""HalluEntity's Figs. 3c, 5 and 6 drawn from a run's result rows, at the paper's F1-optimal thresholds.

The rows come from `haldet.evaluation.breakdowns.paper_breakdowns` (the run stores them in results.json):
- Fig. 3c: per detector, F1_Opt, Precision_Opt and Recall_Opt of each hallucination-rate group (<10%, 10-20%, >20%),
  each at the group's own best-F1 threshold, as the paper defines F1_Opt;
- Fig. 5: FPR and FNR per entity type (left: FPR, middle: FNR) and per position in the sentence (right), at the
  F1-optimal threshold of the evaluated entities;
- Fig. 6: FPR and FNR per POS tag at the same threshold.
Every detector of the run gets a bar (the paper shows Likelihood, SAR and Focus). Tags are ordered by their number
of entities, the `MAX_TAGS` most frequent shown. Each figure (one per paper figure, its panels side by side) is drawn
into the report's `FigureSet`, which writes it as PDF and PNG under the report's `figures/`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from haldet.evaluation.breakdowns import RATE_GROUPS
from haldet.figures.data import Bars, Panel

if TYPE_CHECKING:  # annotations only: matplotlib loads when a report draws
    from matplotlib.figure import Figure

    from haldet.figures.render import FigureSet

MAX_TAGS = 12
POSITIONS = ("first", "middle", "last")
Row = Mapping[str, Any]


def tagged(rows: Sequence[Row], metric: str, tag: str) -> dict[str, dict[str, tuple[float | None, int]]]:
    """detector -> group -> (value, n units) of the rows named `metric[tag=group]`."""
    out: dict[str, dict[str, tuple[float | None, int]]] = {}
    prefix = f"{metric}[{tag}="
    for r in rows:
        name = str(r.get("metric", ""))
        if name.startswith(prefix) and name.endswith("]"):
            value = r.get("value")
            out.setdefault(str(r["detector"]), {})[name[len(prefix):-1]] = (
                None if value is None else float(value), int(r.get("n") or 0))
    return out


def ordered_groups(found: Mapping[str, Mapping[str, tuple[float | None, int]]], limit: int = MAX_TAGS) -> list[str]:
    """The groups of any detector, most units first (ties by name), at most `limit`."""
    n: dict[str, int] = {}
    for groups in found.values():
        for g, (_, count) in groups.items():
            n[g] = max(n.get(g, 0), count)
    return sorted(n, key=lambda g: (-n[g], g))[:limit]


def error_bars(rows: Sequence[Row], metric: str, tag: str, groups: Sequence[str] | None = None
               ) -> tuple[list[str], list[Bars]]:
    """Categories and one `Bars` per detector of `metric_test[tag=group]` (FPR or FNR)."""
    found = tagged(rows, f"{metric}_test", tag)
    cats = list(groups) if groups is not None else ordered_groups(found)
    return cats, [Bars(det, [by.get(c, (None, 0))[0] for c in cats]) for det, by in found.items()]


def fig3c_bars(rows: Sequence[Row]) -> dict[str, list[Bars]]:
    """Per detector: F1_Opt, Precision_Opt and Recall_Opt over the rate groups (categories `RATE_GROUPS`)."""
    out: dict[str, list[Bars]] = {}
    for metric, label in (("f1_opt", "F1_Opt"), ("precision_opt", "Precision_Opt"), ("recall_opt", "Recall_Opt")):
        for det, by in tagged(rows, f"{metric}_test", "rate").items():
            out.setdefault(det, []).append(Bars(label, [by.get(g, (None, 0))[0] for g in RATE_GROUPS]))
    return out


def paper_figures(rows: Sequence[Row], figures: FigureSet, where: str, bar_figure: Callable[..., Figure]
                  ) -> list[str]:
    """The figures' HTML elements (Figs. 3c, 5 and 6, one figure each, a panel per detector or per tag and rate)
    of one cell's rows, drawn with `bar_figure` (`haldet.figures.charts.bar_figure`, imported by the caller when a
    report draws); `where` names the cell in the figures' names."""
    out = []
    fig3c = [Panel(det, RATE_GROUPS, bars) for det, bars in fig3c_bars(rows).items()]
    if fig3c:
        title = "Fig. 3c: F1_Opt, Precision_Opt, Recall_Opt by hallucination rate"
        out.append(figures.add(f"halluentity-fig3c-{where}", bar_figure(fig3c, title=title, ylabel="score",
                                                                        top=1.0, columns=3),
                               f"HalluEntity {title} ({where})"))
    for fig, tags in (("fig5", (("ner", "entity type"), ("position", "position in sentence"))),
                      ("fig6", (("pos", "POS tag"),))):
        panels = []
        for tag, label in tags:
            for metric in ("fpr", "fnr"):
                cats, bars = error_bars(rows, metric, tag, POSITIONS if tag == "position" else None)
                if bars:
                    panels.append(Panel(f"{metric.upper()} by {label}", cats, bars))
        if panels:
            title = f"Fig. {fig[3:]}: FPR / FNR at the F1-optimal threshold"
            out.append(figures.add(f"halluentity-{fig}-{where}", bar_figure(panels, title=title, ylabel="rate",
                                                                             top=1.0),
                                   f"HalluEntity {title} ({where})"))
    return out
