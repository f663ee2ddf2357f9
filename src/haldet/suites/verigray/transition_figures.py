"""VeriGray's transition figures drawn from a run's result rows: Fig. 3 (polarity transitions between consecutive
sentences) and Fig. 6 (appendix C: the same per generating model, and between sentences k = 2, 3, 4 apart), as
bars of p(to | from) with their 95% Wilson intervals.

Per cell: `verigray-fig3-CELL` (every target polarity), `verigray-fig6-generators-CELL` (one bar per generator) and
`verigray-fig6-steps-CELL` (one bar per k, k = 1 being Fig. 3), the last two with a panel for p(Faithful | from)
and one for p(Unfaithful | from); the report's `FigureSet` writes each as PDF and PNG under `figures/`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from haldet.figures.data import Bars, Panel
from haldet.suites.verigray.analysis import FIG3, FIG6, POLARITIES

if TYPE_CHECKING:  # annotations only: matplotlib loads when a report draws
    from matplotlib.figure import Figure

    from haldet.figures.render import FigureSet

Row = Mapping[str, Any]


def _bars(name: str, rows: Sequence[Row], target: str) -> Bars:
    """p(target | from) per source polarity (the categories `POLARITIES`) of one transition matrix's rows."""
    cell = {str(r["from"]): r for r in rows if r.get("metric") == target}
    got = [cell.get(a, {}) for a in POLARITIES]
    return Bars(name, [r.get("value") for r in got], [r.get("ci_low") for r in got], [r.get("ci_high") for r in got])


def fig3_bars(rows: Sequence[Row]) -> list[Bars]:
    """Fig. 3: one series per target polarity."""
    mine = [r for r in rows if r.get("table") == FIG3]
    return [_bars(f"p({t} | from)", mine, t) for t in POLARITIES] if mine else []


def fig6_bars(rows: Sequence[Row], kind: str, target: str) -> list[Bars]:
    """Fig. 6: p(target | from) per generator (`kind` "generator") or per step k (`kind` "k", k = 1 from Fig. 3)."""
    views: dict[str, list[Row]] = {}
    for r in rows:
        view = str(r.get("view") or "")
        if r.get("table") == FIG6 and view.startswith(f"{kind}="):
            views.setdefault(view.split("=", 1)[1], []).append(r)
    if kind == "k" and views:
        views = {"1": [r for r in rows if r.get("table") == FIG3], **views}
    return [_bars(f"{kind}={v}" if kind == "k" else v, views[v], target) for v in views]


def transition_figures(rows: Sequence[Row], figures: FigureSet, where: str, bar_figure: Callable[..., Figure]
                       ) -> list[str]:
    """The figures' HTML elements for one cell's rows, drawn with `bar_figure` (imported by the caller when a report
    draws)."""
    out = []
    bars = fig3_bars(rows)
    if bars:
        title = "Fig. 3: transitions between consecutive sentences"
        out.append(figures.add(f"verigray-fig3-{where}", bar_figure(
            [Panel("p(to | from)", POLARITIES, bars)], title=title, ylabel="p, 95% CI", top=1.0),
            f"VeriGray {title} ({where})"))
    for kind, label, stem in (("generator", "per generator", "generators"), ("k", "every k sentences", "steps")):
        panels = [Panel(f"p({target} | from)", POLARITIES, found) for target in ("Faithful", "Unfaithful")
                  if (found := fig6_bars(rows, kind, target))]
        if panels:
            title = f"Fig. 6: transitions {label}"
            out.append(figures.add(f"verigray-fig6-{stem}-{where}", bar_figure(
                panels, title=title, ylabel="p, 95% CI", top=1.0), f"VeriGray {title} ({where})"))
    return out
