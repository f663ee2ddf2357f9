"""ROC and precision-recall curves: a few detectors share one plot, many get a small panel each (with the best
detector's curve behind for reference). A curve is thinned to at most `MAX_POINTS` points before it is drawn, so
a figure costs the same for 100 test items or 100,000."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from haldet.figures.data import ROC, Curve, CurveKind
from haldet.figures.style import REFERENCE, colour_for, drawing, framed, legend_right, new_figure

MAX_POINTS = 300
FEW = 4  # up to this many curves share one plot
GAP, HEAD = 0.12, 0.14  # between small multiples, and above each for its name (in panel widths)


def thin(x: Sequence[float], y: Sequence[float], limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most `limit` points of the polyline (x, y), picked evenly along its length, first and last kept; a line
    of `limit` points or fewer comes back unchanged."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(xs)
    if n <= limit:
        return xs, ys
    length = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(xs), np.diff(ys)))])
    idx = np.searchsorted(length, np.linspace(0.0, length[-1], limit), side="left")
    idx = np.unique(np.concatenate([np.clip(idx, 0, n - 1), [0, n - 1]]))
    return xs[idx], ys[idx]


def _value(v: float | None) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{100 * v:.1f}"


def _reference(ax: Axes, kind: CurveKind, baseline: float | None, lw: float) -> None:
    if kind is ROC:
        ax.plot([0, 1], [0, 1], ls="--", color=REFERENCE, lw=lw)
    elif baseline is not None:
        ax.axhline(baseline, ls="--", color=REFERENCE, lw=lw)


def _square(ax: Axes, kind: CurveKind) -> None:
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_aspect("equal")


def curve_figure(curves: Sequence[Curve], *, kind: CurveKind = ROC, title: str = "", baseline: float | None = None,
                 few: int = FEW, columns: int = 4) -> Figure:
    """Up to `few` curves on one square plot with a legend of name (area in %); more as small multiples.
    `baseline`: PR only, the share of positives (a random detector's precision), drawn dashed."""
    with drawing():
        if len(curves) <= few:
            return _one_plot(curves, kind, title, baseline)
        return _small_multiples(curves, kind, title, baseline, columns)


def _one_plot(curves: Sequence[Curve], kind: CurveKind, title: str, baseline: float | None) -> Figure:
    names = [f"{c.name} ({kind.value_name} {_value(c.value)})" for c in curves]
    fig, ax = framed(2.6, 2.6, names)
    _reference(ax, kind, baseline, 0.8)
    for k, (c, name) in enumerate(zip(curves, names, strict=True)):
        x, y = thin(c.x, c.y)
        ax.plot(x, y, color=colour_for(k), lw=1.4, drawstyle=kind.drawstyle, label=name)
    _square(ax, kind)
    ax.set_xlabel(kind.xlabel)
    ax.set_ylabel(kind.ylabel)
    ax.set_title(title, loc="left")
    if curves:
        legend_right(fig, ax)
    else:
        ax.text(0.5, 0.5, "no scores with both classes", ha="center", va="center", transform=ax.transAxes)
    return fig


def _small_multiples(curves: Sequence[Curve], kind: CurveKind, title: str, baseline: float | None,
                     columns: int) -> Figure:
    """The panels share one axes (each a unit square shifted into its place): one axes draws many times faster
    than a grid of them, and a paper's small multiples need no ticks beyond the 0 and 1 of the first panel."""
    rows = math.ceil(len(curves) / columns)
    step_x, step_y = 1.0 + GAP, 1.0 + GAP + HEAD
    width, height = 1.55 * columns + 0.2, 1.75 * rows + 0.6
    fig = new_figure(width, height, layout=None)
    ax = fig.add_axes((0.02, 0.32 / height, 0.96, 1 - 0.62 / height))
    best = max(curves, key=lambda c: c.value if c.value is not None and math.isfinite(c.value) else -1.0)
    bx, by = thin(best.x, best.y)
    for k, c in enumerate(curves):
        x0, y0 = (k % columns) * step_x, -(k // columns) * step_y
        ax.add_patch(Rectangle((x0, y0), 1, 1, facecolor="#fafafa", edgecolor=REFERENCE, lw=0.6))
        if kind is ROC:
            ax.plot([x0, x0 + 1], [y0, y0 + 1], ls="--", color="#bbbbbb", lw=0.6)
        elif baseline is not None:
            ax.plot([x0, x0 + 1], [y0 + baseline] * 2, ls="--", color="#bbbbbb", lw=0.6)
        if c is not best:
            ax.plot(x0 + bx, y0 + by, color=REFERENCE, lw=0.9, ls=(0, (4, 2)), drawstyle=kind.drawstyle)
        x, y = thin(c.x, c.y)
        ax.plot(x0 + x, y0 + y, color=colour_for(k), lw=1.5, drawstyle=kind.drawstyle)
        ax.text(x0, y0 + 1.04, f"{c.name} ({_value(c.value)})", fontsize=6.5, fontweight="bold", va="bottom",
                clip_on=False)
    for v in (0, 1):
        ax.text(v, -0.04, str(v), fontsize=6, ha="center", va="top")
        ax.text(-0.04, v, str(v), fontsize=6, ha="right", va="center")
    ax.set_xlim(-0.12, columns * step_x - GAP + 0.02)
    ax.set_ylim(-(rows - 1) * step_y - 0.12, 1 + HEAD)
    ax.set_aspect("equal")
    ax.set_axis_off()
    fig.suptitle(title, x=0.01, y=1 - 0.06 / height, ha="left", va="top", fontsize=9)
    fig.supxlabel(f"x: {kind.xlabel}, y: {kind.ylabel} (0 to 1); dashed grey: the best detector, {best.name}; "
                  f"{kind.value_name} in % beside each name", fontsize=6.5, x=0.01, y=0.06 / height, ha="left",
                  va="bottom")
    return fig
