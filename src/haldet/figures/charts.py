"""The report's other charts: the scenario x detector heatmap, accuracy against cost on a log axis with every
detector named (names never overlap each other or a marker), lines with labelled markers (risk against
coverage, reliability diagrams, the suites' paper figures), grouped bars with intervals and labelled point clouds
(the suites' paper figures)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import LinearSegmentedColormap, TwoSlopeNorm, to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from haldet.figures.curves import thin
from haldet.figures.data import Bars, Panel, Point, Scatter, Series
from haldet.figures.labels import beside, place_labels
from haldet.figures.style import CHAR_W, REFERENCE, colour_for, drawing, framed, legend_right, new_figure

MISSING = "#eeeeee"
# below chance towards purple, above towards green, white at chance (0.5)
HEAT = LinearSegmentedColormap.from_list("haldet_heat", ["#762a83", "#ffffff", "#1a783c"]).with_extremes(bad=MISSING)
LABEL_SIZE, LABEL_GAP, MARKER_AREA = 6.5, 7.0, 40.0  # points, pixels, points^2
MARKED = 25  # a line of up to this many points shows a marker at each


def heatmap(rows: Sequence[str], columns: Sequence[str], values: Sequence[Sequence[float | None]], *,
            title: str = "", fmt: str = "{:.1f}", scale: float = 100.0, lo: float = 0.3, mid: float = 0.5,
            hi: float = 1.0) -> Figure:
    """A rows x columns grid coloured on a diverging scale (white at `mid`) with the value printed in each cell
    (times `scale`); a missing value is a grey cell with a dash."""
    grid = np.array([[np.nan if v is None or not math.isfinite(v) else v for v in line] for line in values],
                    dtype=float).reshape(len(rows), len(columns))
    longest = max((len(r) for r in rows), default=8)
    with drawing():
        fig = new_figure(max(3.2, 0.9 + 0.055 * longest + 0.6 * len(columns) + 0.7), 1.1 + 0.25 * max(1, len(rows)))
        ax = fig.add_subplot()
        norm = TwoSlopeNorm(vmin=lo, vcenter=mid, vmax=hi)
        image = ax.imshow(np.ma.masked_invalid(np.clip(grid, lo, hi)), cmap=HEAT, norm=norm, aspect="auto")
        for i in range(len(rows)):
            for j in range(len(columns)):
                v = grid[i, j]
                text = "—" if math.isnan(v) else fmt.format(scale * v)
                r, g, b = to_rgb(MISSING) if math.isnan(v) else HEAT(norm(min(max(v, lo), hi)))[:3]
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                ax.text(j, i, text, ha="center", va="center", fontsize=6.5, color="white" if dark else "black")
        ax.set_xticks(range(len(columns)), list(columns), rotation=30, ha="left", rotation_mode="anchor")
        ax.set_yticks(range(len(rows)), list(rows))
        ax.xaxis.tick_top()
        ax.tick_params(length=0)
        bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
        bar.ax.tick_params(labelsize=6)
        bar.set_ticks([lo, mid, hi], labels=[fmt.format(scale * t) for t in (lo, mid, hi)])
        ax.set_title(title, loc="left")
    return fig


def _tick_label(v: float) -> str:
    return f"{v:g}" if 1e-3 <= v < 1e5 else f"1e{round(math.log10(v))}"


def cost_scatter(points: Sequence[Point], *, title: str = "", xlabel: str = "Cost@100 (s, log scale)",
                 ylabel: str = "AUROC (%)", colours: Mapping[str, str] | None = None, floor: float = 1e-4) -> Figure:
    """Points on a log10 x axis (whole decades) and a linear y axis (value in %), coloured by group with a legend,
    each named beside its marker or joined to its name by a thin line. A cost below `floor` s is drawn at the
    floor and the figure says which."""
    colours = colours or {}
    pts = [p for p in points if p.x is not None and p.y is not None and math.isfinite(p.x) and math.isfinite(p.y)]
    low = [p.label for p in pts if p.x is not None and p.x < floor]
    with drawing():
        fig, ax = framed(3.4, 2.7, list(dict.fromkeys(p.group for p in pts)), bottom=0.62 if low else 0.5)
        ax.set_title(title, loc="left")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if not pts:
            ax.text(0.5, 0.5, "no detector has both a value and a cost", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            return fig
        xs = [max(floor, float(p.x)) for p in pts if p.x is not None]
        ys = [100 * float(p.y) for p in pts if p.y is not None]
        x_lo, x_hi = 10.0 ** math.floor(math.log10(min(xs))), 10.0 ** math.ceil(math.log10(max(xs)))
        x_hi = x_hi if x_hi > x_lo else 10 * x_lo
        y_lo = min(50.0, math.floor(min(ys) / 5) * 5)
        y_hi = max(y_lo + 5, min(100.0, math.ceil((max(ys) + 1) / 5) * 5))  # headroom: no point on the frame
        ax.set_xscale("log")
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, y_hi)
        decades = [10.0**e for e in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1)]
        ax.xaxis.set_major_locator(FixedLocator(decades))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([_tick_label(v) for v in decades])
        step = 5 if y_hi - y_lo <= 30 else 10
        ax.set_yticks(np.arange(y_lo, y_hi + 1e-9, step))
        ax.grid(True, color="#dddddd", lw=0.6)
        ax.set_axisbelow(True)
        if y_lo <= 50 <= y_hi:
            ax.axhline(50, ls="--", color=REFERENCE, lw=0.8)
        groups = list(dict.fromkeys(p.group for p in pts))
        for k, g in enumerate(groups):
            mine = [(x, y) for p, x, y in zip(pts, xs, ys, strict=True) if p.group == g]
            ax.scatter([x for x, _ in mine], [y for _, y in mine], s=MARKER_AREA, color=colours.get(g, colour_for(k)),
                       alpha=0.85, edgecolors="#333333", linewidths=0.5, label=g, zorder=3)
        legend_right(fig, ax)
        if low:
            ax.set_xlabel(f"{xlabel}\nbelow {floor:g} s, drawn at the floor: {', '.join(low)}")
        _name_points(fig, ax, list(zip(xs, ys, strict=True)), [p.label for p in pts])
    return fig


def _name_points(fig: Figure, ax: Axes, data: list[tuple[float, float]], labels: list[str]) -> None:
    """Write each label where `place_labels` finds room, measured in the figure's pixels once the layout is fixed
    (the layout is fixed, so nothing moves afterwards)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    height = fig.bbox.height
    texts = [ax.text(x, y, label, fontsize=LABEL_SIZE, ha="left", va="bottom", zorder=4)
             for (x, y), label in zip(data, labels, strict=True)]
    sizes = [(t.get_window_extent(renderer).width, t.get_window_extent(renderer).height) for t in texts]
    centres = [(float(px), height - float(py)) for px, py in ax.transData.transform(data)]
    frame = ax.get_window_extent(renderer)
    area = (frame.x0, height - frame.y1, frame.x1, height - frame.y0)
    radius = math.sqrt(MARKER_AREA) / 2 * fig.dpi / 72
    to_data = ax.transData.inverted()
    for text, (cx, cy), box in zip(texts, centres, place_labels(centres, sizes, area, radius=radius,
                                                                gap=LABEL_GAP), strict=True):
        bx, by, bw, bh = box
        tx, ty = to_data.transform((bx, height - (by + bh)))
        text.set_position((float(tx), float(ty)))
        if not beside((cx, cy), box, LABEL_GAP):
            ex, ey = min(max(cx, bx), bx + bw), min(max(cy, by), by + bh)
            (x0, y0), (x1, y1) = to_data.transform([(cx, height - cy), (ex, height - ey)])
            ax.plot([x0, x1], [y0, y1], color="#888888", lw=0.6, zorder=2)


def line_figure(series: Sequence[Series], *, title: str = "", xlabel: str = "", ylabel: str = "",
                reference: Series | None = None) -> Figure:
    """Lines on x in [0, 1], y from 0 to the largest value (at least 0.1), legend on the right; markers where a
    line has few points, their labels beside them. `reference` (e.g. perfect calibration) is drawn dashed grey."""
    ys = [y for s in [*series, *([reference] if reference else [])] for _, y, _ in s.points if math.isfinite(y)]
    with drawing():
        fig, ax = framed(3.2, 2.6, [s.name for s in [*([reference] if reference else []), *series]])
        if reference is not None:
            ax.plot([p[0] for p in reference.points], [p[1] for p in reference.points], ls="--", color=REFERENCE,
                    lw=0.9, label=reference.name)
        for k, s in enumerate(series):
            pts = [(x, y, lab) for x, y, lab in s.points if math.isfinite(x) and math.isfinite(y)]
            x, y = thin([p[0] for p in pts], [p[1] for p in pts])
            ax.plot(x, y, color=colour_for(k), lw=1.4, marker="o" if len(pts) <= MARKED else None, ms=3.5,
                    label=s.name)
            for px, py, lab in pts if len(pts) <= MARKED else ():
                if lab:
                    ax.annotate(lab, (px, py), xytext=(3, 3), textcoords="offset points", fontsize=5.5)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, max([0.1, *ys]) * 1.05)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, loc="left")
        ax.grid(True, color="#eeeeee", lw=0.6)
        if series:
            legend_right(fig, ax)
        else:
            ax.text(0.5, 0.5, "no points", ha="center", va="center", transform=ax.transAxes)
    return fig


def _bars_on(ax: Axes, categories: Sequence[str], bars: Sequence[Bars], ymax: float, tilted: bool) -> None:
    width = 0.8 / max(1, len(bars))
    for k, b in enumerate(bars):
        xs = np.arange(len(categories)) - 0.4 + width * (k + 0.5)
        vals = [v if v is not None and math.isfinite(v) else np.nan for v in b.values]
        ax.bar(xs, np.nan_to_num(vals), width=width * 0.92, color=colour_for(k), label=b.name, alpha=0.9, zorder=2)
        if b.low is not None and b.high is not None:
            lo = [max(0.0, v - w) if w is not None and math.isfinite(v) else 0.0  # rounding: never below 0
                  for v, w in zip(vals, b.low, strict=True)]
            hi = [max(0.0, w - v) if w is not None and math.isfinite(v) else 0.0
                  for v, w in zip(vals, b.high, strict=True)]
            ax.errorbar(xs, np.nan_to_num(vals), yerr=[lo, hi], fmt="none", ecolor="#333333", lw=0.7, capsize=1.5,
                        zorder=3)
        for x, v in zip(xs, vals, strict=True):
            if math.isnan(v):
                ax.text(x, 0.01 * ymax, "–", ha="center", va="bottom", fontsize=6, color=REFERENCE)
    ax.set_xticks(range(len(categories)), list(categories), rotation=35 if tilted else 0,
                  ha="right" if tilted else "center")
    ax.set_xlim(-0.5, len(categories) - 0.5)
    ax.set_ylim(0, ymax)
    ax.grid(True, axis="y", color="#eeeeee", lw=0.6, zorder=0)


def bar_figure(panels: Sequence[Panel], *, title: str = "", ylabel: str = "", top: float | None = None,
               columns: int = 2) -> Figure:
    """Grouped bars, one panel per `Panel` (side by side, `columns` to a row, one shared legend on the right): one
    group per category, one bar per series, an error bar where the series has the interval's ends; a missing
    value leaves a gap marked with a dash. y runs from 0 to `top` (default: the largest value or interval end, at
    least 0.1), the same in every panel. One figure for a paper's multi-panel figure: a PDF's fonts are embedded
    once per figure, the slow part of a render."""
    ends = [v for p in panels for b in p.bars for seq in (b.values, b.high or ()) for v in seq
            if v is not None and math.isfinite(v)]
    ymax = top if top is not None else max([0.1, *ends]) * 1.08
    cols = max(1, min(columns, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    tilted = [len(p.categories) > 4 for p in panels]  # long rows of names at an angle, with room below
    below = 0.42 + max([0.05 * max((len(c) for c in p.categories), default=0) for p, t in zip(panels, tilted,
                                                                                              strict=True) if t] + [0])
    panel_w = max([1.6, *(0.28 * len(p.categories) * max(1, len(p.bars)) ** 0.5 + 0.4 for p in panels)])
    names = list(dict.fromkeys(b.name for p in panels for b in p.bars))
    left, gap, head, panel_h = 0.55, 0.35, 0.3, 1.9
    right = 0.2 + (0.45 + CHAR_W * max(len(n) for n in names) if names else 0.0)
    width = left + cols * panel_w + (cols - 1) * gap + right
    height = 0.3 + rows * (head + panel_h + below)
    with drawing():
        fig = new_figure(width, height, layout=None)
        first = None
        for k, panel in enumerate(panels):
            r, c = divmod(k, cols)
            x0 = left + c * (panel_w + gap)
            y0 = height - 0.3 - (r + 1) * (head + panel_h + below) + below
            ax = fig.add_axes((x0 / width, y0 / height, panel_w / width, panel_h / height))
            _bars_on(ax, panel.categories, panel.bars, ymax, tilted[k])
            ax.set_title(panel.title, loc="left", fontsize=8)
            if c == 0:
                ax.set_ylabel(ylabel)
            first = first or ax
        fig.suptitle(title, x=0.1 / width, y=1 - 0.04 / height, ha="left", va="top", fontsize=9)
        if first is not None and names:
            handles, labels = first.get_legend_handles_labels()
            box = first.get_position()
            fig.legend(handles, labels, loc="upper left", frameon=False, borderaxespad=0,
                       bbox_to_anchor=(1 - (right - 0.12) / width, box.y1))
    return fig


def scatter_figure(plot: Scatter) -> Figure:
    """Each group's points as small translucent dots in its colour (`plot.colours`, else the palette), legend on the
    right with each group's count; equal scales on both axes (a map: distances mean the same both ways)."""
    with drawing():
        names = [f"{g} ({len(pts)})" for g, pts in plot.groups.items()]
        fig, ax = framed(3.0, 3.0, names)
        for k, ((group, pts), name) in enumerate(zip(plot.groups.items(), names, strict=True)):
            xy = np.asarray(pts, dtype=float).reshape(-1, 2)
            ax.scatter(xy[:, 0], xy[:, 1], s=9, alpha=0.6, linewidths=0, color=plot.colours.get(group, colour_for(k)),
                       label=name, zorder=2)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        ax.set_title(plot.title, loc="left")
        ax.grid(True, color="#eeeeee", lw=0.6, zorder=0)
        if plot.groups:
            legend_right(fig, ax)
    return fig
