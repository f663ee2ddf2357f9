"""What a figure is drawn from: plain records of points and curves, free of matplotlib, so a suite can build them
when it loads and the drawing library is imported only when a report draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Curve:
    """One detector's curve: x and y as its kind says (ROC: FPR, TPR; PR: recall, precision) and its area."""

    name: str
    x: Sequence[float]
    y: Sequence[float]
    value: float | None


@dataclass(frozen=True)
class CurveKind:
    xlabel: str
    ylabel: str
    value_name: str
    drawstyle: str  # PR curves are steps (precision holds until the next threshold), ROC curves straight lines


ROC = CurveKind("false-positive rate", "true-positive rate", "AUROC", "default")
PR = CurveKind("recall", "precision", "AUPR", "steps-post")


@dataclass(frozen=True)
class Point:
    """A detector on the cost plot: x = cost (s), y = value (0-1), its name and its group (colour)."""

    x: float | None
    y: float | None
    label: str
    group: str


@dataclass(frozen=True)
class Series:
    """One line of a `line_figure`: points (x, y, label written beside the marker, "" for none)."""

    name: str
    points: Sequence[tuple[float, float, str]]


@dataclass(frozen=True)
class Bars:
    """One series of a `bar_figure`: a value per category (None: no bar, a dash), optionally with the interval's
    ends (`low`, `high`, drawn as an error bar)."""

    name: str
    values: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None


@dataclass(frozen=True)
class Panel:
    """One panel of a `bar_figure`: its title, the categories (groups of bars) and one `Bars` per series."""

    title: str
    categories: Sequence[str]
    bars: Sequence[Bars]


@dataclass(frozen=True)
class Scatter:
    """A point cloud a suite hands the report to draw (`charts.scatter_figure`): (x, y) points per group (one colour
    each, in order), the figure's file-name stem `name`, its title and axis names, and a line printed under it."""

    name: str
    title: str
    groups: Mapping[str, Sequence[tuple[float, float]]]
    xlabel: str = ""
    ylabel: str = ""
    note: str = ""
    colours: Mapping[str, str] = field(default_factory=dict)
