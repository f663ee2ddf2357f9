"""One look for every figure: the palette, the colour of each evidence type, font sizes, and the matplotlib
settings that make the SVG, PDF and PNG renders reproducible (text stays text; TrueType fonts in the PDF)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
EVIDENCE_COLOURS = {"repeated generation": "#d62728", "auxiliary prompt": "#ff7f0e", "internal states": "#1f77b4",
                    "single-generation likelihood": "#2ca02c", "output text": "#7f7f7f"}
REFERENCE = "#999999"  # chance lines, the best detector's curve behind another's
DPI = 100  # drawing resolution: label placement works in these pixels; the PNG is saved at render.PNG_DPI
CHAR_W = 0.055  # inches per character of legend text (7 pt DejaVu Sans, with room to spare)

RC: dict[Any, Any] = {
    "font.family": "DejaVu Sans", "font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.grid": False, "axes.spines.top": True,
    "svg.fonttype": "none", "pdf.fonttype": 42, "ps.fonttype": 42, "path.simplify": True,
    "figure.constrained_layout.h_pad": 0.04, "figure.constrained_layout.w_pad": 0.04,
}


def colour_for(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


@contextmanager
def drawing() -> Iterator[None]:
    """The figures' settings for the duration of a drawing (text reads them when it is created)."""
    with mpl.rc_context(RC):
        yield


def new_figure(width: float, height: float, *, layout: Literal["constrained"] | None = "constrained") -> Figure:
    """A figure of `width` x `height` inches that belongs to no window (the Agg canvas draws it; nothing to close
    in pyplot, so a long report keeps no figures alive)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout=layout)
    FigureCanvasAgg(fig)  # Agg: no display needed, and a renderer to measure text with
    return fig


def framed(axes_w: float, axes_h: float, legend: Sequence[str] = (), *, left: float = 0.62, bottom: float = 0.5,
           top: float = 0.32) -> tuple[Figure, Axes]:
    """A figure laid out by hand, so no render pays for a layout pass: one axes of `axes_w` x `axes_h` inches with
    room for the title above, ticks and axis labels below and left, and on the right for the longest of the
    `legend` entries (`legend_right` puts them there)."""
    right = 0.2 + (0.45 + CHAR_W * max(len(t) for t in legend) if legend else 0.0)
    width, height = left + axes_w + right, bottom + axes_h + top
    fig = new_figure(width, height, layout=None)
    ax = fig.add_axes((left / width, bottom / height, axes_w / width, axes_h / height))
    return fig, ax


def legend_right(fig: Figure, ax: Axes) -> None:
    """The figure's legend (every labelled artist) right of the axes, from its top."""
    box = ax.get_position()
    fig.legend(loc="upper left", bbox_to_anchor=(box.x1 + 0.12 / fig.get_figwidth(), box.y1), frameon=False,
               borderaxespad=0)
