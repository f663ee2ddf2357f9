"""One look for every figure: the palette, the colour of each evidence type, font sizes, and the matplotlib
settings that make the SVG, PDF and PNG renders reproducible (text stays text; TrueType fonts in the PDF)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
EVIDENCE_COLOURS = {"repeated generation": "#d62728", "auxiliary prompt": "#ff7f0e", "internal states": "#1f77b4",
                    "single-generation likelihood": "#2ca02c", "output text": "#7f7f7f"}
REFERENCE = "#999999"  # chance lines, the best detector's curve behind another's
DPI = 100  # drawing resolution: label placement works in these pixels; the PNG is saved at render.PNG_DPI

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
