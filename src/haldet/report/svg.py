"""Inline SVG charts for the HTML report: no JavaScript, no network, readable in any browser.

Each function returns one `<svg>` element as text; hovering a mark shows its exact value (`<title>`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
EVIDENCE_COLOURS = {"repeated generation": "#d62728", "auxiliary prompt": "#ff7f0e", "internal states": "#1f77b4",
                    "single-generation likelihood": "#2ca02c", "output text": "#7f7f7f"}
FONT = 'font-family="Helvetica, Arial, sans-serif"'


def _t(text: str) -> str:
    return escape(str(text), quote=True)


def colour_for(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def heat_colour(value: float | None, lo: float = 0.3, mid: float = 0.5, hi: float = 1.0) -> str:
    """Diverging: below `mid` (worse than chance) towards purple, above towards green; white at chance."""
    if value is None or not math.isfinite(value):
        return "#eeeeee"
    if value >= mid:
        f = min(1.0, (value - mid) / (hi - mid))
        r, g, b = 255 - int(f * (255 - 26)), 255 - int(f * (255 - 120)), 255 - int(f * (255 - 60))
    else:
        f = min(1.0, (mid - value) / (mid - lo))
        r, g, b = 255 - int(f * (255 - 118)), 255 - int(f * (255 - 42)), 255 - int(f * (255 - 131))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(rows: Sequence[str], columns: Sequence[str], values: Sequence[Sequence[float | None]], *,
            title: str = "", fmt: str = "{:.1f}", scale: float = 100.0) -> str:
    """A rows x columns grid of coloured cells with the value printed in each (AUROC in %)."""
    cw, ch, left, top = 64, 24, max(80, 7 * max((len(r) for r in rows), default=8) + 12), 60
    width = max(left + cw * len(columns) + 10, 8 * len(title) + 10)
    height = top + ch * len(rows) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" {FONT} font-size="11">']
    if title:
        parts.append(f'<text x="4" y="14" font-size="13" font-weight="bold">{_t(title)}</text>')
    for j, col in enumerate(columns):
        x = left + cw * j + cw / 2
        parts.append(f'<text x="{x:.1f}" y="{top - 8}" text-anchor="middle">{_t(col)}</text>')
    for i, row in enumerate(rows):
        y = top + ch * i
        parts.append(f'<text x="{left - 6}" y="{y + ch / 2 + 4:.1f}" text-anchor="end">{_t(row)}</text>')
        for j, col in enumerate(columns):
            v = values[i][j]
            x = left + cw * j
            label = "—" if v is None else fmt.format(scale * v)
            parts.append(f'<g><title>{_t(row)} · {_t(col)}: {_t(label)}</title>'
                         f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="{heat_colour(v)}"/>'
                         f'<text x="{x + cw / 2 - 1:.1f}" y="{y + ch / 2 + 3:.1f}" text-anchor="middle">'
                         f'{_t(label)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class Point:
    x: float | None
    y: float | None
    label: str
    group: str


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def _tick_label(v: float) -> str:
    return f"{v:g}" if 1e-3 <= v < 1e5 else f"1e{round(math.log10(v))}"


def scatter_logx(points: Sequence[Point], *, title: str = "", xlabel: str = "Cost@100 (s, log scale)",
                 ylabel: str = "AUROC (%)", colours: dict[str, str] | None = None, floor: float = 1e-4) -> str:
    """Points on a log10 x axis (cost) and linear y axis (AUROC in %), coloured by group, labelled by name.
    A cost below `floor` seconds is drawn at the floor (and says so in its tooltip)."""
    colours = colours or {}
    pts = [p for p in points if p.x is not None and p.y is not None]
    width, height, left, right, top, bottom = 560, 360, 60, 170, 30, 46
    pw, ph = width - left - right, height - top - bottom
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" {FONT} font-size="11">']
    parts.append(f'<text x="4" y="16" font-size="13" font-weight="bold">{_t(title)}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>')
    if not pts:
        parts.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no detector has both a '
                     f'value and a cost</text></svg>')
        return "".join(parts)
    xs = [max(floor, p.x) for p in pts if p.x is not None]
    ys = [100 * p.y for p in pts if p.y is not None]
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs))), 10 ** math.ceil(math.log10(max(xs)))
    if x_hi <= x_lo:
        x_hi = x_lo * 10
    y_lo = min(50.0, math.floor(min(ys) / 5) * 5)
    y_hi = max(y_lo + 5, min(100.0, math.ceil((max(ys) + 1) / 5) * 5))  # headroom: no point on the frame

    def px(v: float) -> float:
        return left + pw * (math.log10(max(floor, v)) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    def py(v: float) -> float:
        return top + ph * (1 - (v - y_lo) / (y_hi - y_lo))

    for tv in _log_ticks(x_lo, x_hi):
        x = px(tv)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#ddd"/>'
                     f'<text x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">{_tick_label(tv)}</text>')
    step = 5 if y_hi - y_lo <= 30 else 10
    yv = y_lo
    while yv <= y_hi + 1e-9:
        y = py(yv)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{yv:g}</text>')
        yv += step
    if y_lo <= 50 <= y_hi:
        parts.append(f'<line x1="{left}" y1="{py(50):.1f}" x2="{left + pw}" y2="{py(50):.1f}" stroke="#999" '
                     f'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{_t(xlabel)}</text>')
    parts.append(f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">{_t(ylabel)}'
                 f'</text>')
    groups = list(dict.fromkeys(p.group for p in pts))
    centres = [(px(p.x), py(100 * p.y)) for p in pts if p.x is not None and p.y is not None]
    boxes = place_labels(centres, [p.label for p in pts], (left, top, left + pw, top + ph))
    for p, (x, y), box in zip(pts, centres, boxes, strict=True):
        assert p.x is not None and p.y is not None
        c = colours.get(p.group, colour_for(groups.index(p.group)))
        note = f" (below {floor:g} s, drawn at the floor)" if p.x < floor else ""
        lx, ly, lw, lh = box
        leader = ""
        if not (lx <= x + LABEL_GAP + 1 and ly <= y <= ly + lh):  # moved away from its point: a line joins them
            ex, ey = min(max(x, lx), lx + lw), min(max(y, ly), ly + lh)
            leader = (f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" stroke="#888" '
                      f'stroke-width="0.6"/>')
        parts.append(f'<g><title>{_t(p.label)}: {100 * p.y:.2f} at {p.x:.4g} s{note} — {_t(p.group)}</title>'
                     f'{leader}<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{c}" fill-opacity="0.85" stroke="#333" '
                     f'stroke-width="0.5"/><text x="{lx:.1f}" y="{ly + lh - 2:.1f}" font-size="9">{_t(p.label)}'
                     f'</text></g>')
    for k, g in enumerate(groups):
        c = colours.get(g, colour_for(k))
        y = top + 10 + 16 * k
        parts.append(f'<circle cx="{left + pw + 14}" cy="{y}" r="5" fill="{c}"/>'
                     f'<text x="{left + pw + 24}" y="{y + 4}">{_t(g)}</text>')
    parts.append("</svg>")
    return "".join(parts)


LABEL_CHAR_W, LABEL_H, LABEL_GAP, POINT_R = 5.4, 11.0, 7.0, 5.0  # 9 px labels: a generous width per character


def label_size(label: str) -> tuple[float, float]:
    return LABEL_CHAR_W * len(label), LABEL_H


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def place_labels(points: Sequence[tuple[float, float]], labels: Sequence[str],
                 area: tuple[float, float, float, float]) -> list[tuple[float, float, float, float]]:
    """A box (x, y, w, h) per label that overlaps no other label and no marker: beside its point when there is
    room, else the nearest free place (right, left, above, below, then further out: the caller draws a leader
    line). `area`: (x0, y0, x1, y1) the labels must stay in. Greedy, points from top to bottom."""
    obstacles = [(x - POINT_R, y - POINT_R, 2 * POINT_R, 2 * POINT_R) for x, y in points]
    placed: list[tuple[float, float, float, float]] = []
    out: dict[int, tuple[float, float, float, float]] = {}
    for i in sorted(range(len(points)), key=lambda k: (points[k][1], points[k][0])):
        x, y = points[i]
        w, h = label_size(labels[i])
        candidates = [(x + LABEL_GAP, y - h / 2), (x - LABEL_GAP - w, y - h / 2), (x - w / 2, y - POINT_R - h - 1),
                      (x - w / 2, y + POINT_R + 1)]
        for step in range(1, 40):
            d = step * (h + 1)
            candidates += [(x + LABEL_GAP, y - h / 2 - d), (x + LABEL_GAP, y - h / 2 + d),
                           (x - LABEL_GAP - w, y - h / 2 - d), (x - LABEL_GAP - w, y - h / 2 + d)]
        best = None
        for cx, cy in candidates:
            box = (cx, cy, w, h)
            inside = area[0] <= cx and cx + w <= area[2] and area[1] <= cy and cy + h <= area[3]
            if inside and not any(_overlaps(box, o) for o in placed + obstacles):
                best = box
                break
        placed.append(best or (x + LABEL_GAP, y - h / 2, w, h))
        out[i] = placed[-1]
    return [out[i] for i in range(len(points))]


@dataclass
class Curve:
    name: str
    fpr: Sequence[float]
    tpr: Sequence[float]
    auc: float | None


def roc_plot(curves: Sequence[Curve], *, title: str = "") -> str:
    """ROC curves on the unit square with the chance diagonal; legend with AUROC per curve."""
    size, left, top, bottom, legend = 300, 44, 28, 40, 190
    width, height = left + size + legend, top + size + bottom
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" {FONT} font-size="11">']
    parts.append(f'<text x="4" y="16" font-size="13" font-weight="bold">{_t(title)}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{size}" height="{size}" fill="#fafafa" stroke="#999"/>')
    for k in range(0, 11, 2):
        v = k / 10
        x, y = left + size * v, top + size * (1 - v)
        parts.append(f'<text x="{x:.1f}" y="{top + size + 14}" text-anchor="middle">{v:g}</text>'
                     f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    parts.append(f'<line x1="{left}" y1="{top + size}" x2="{left + size}" y2="{top}" stroke="#999" '
                 f'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{left + size / 2}" y="{height - 8}" text-anchor="middle">false-positive rate</text>'
                 f'<text transform="translate(12 {top + size / 2}) rotate(-90)" text-anchor="middle">'
                 f'true-positive rate</text>')
    for k, c in enumerate(curves):
        colour = colour_for(k)
        pts = " ".join(f"{left + size * f:.1f},{top + size * (1 - t):.1f}" for f, t in zip(c.fpr, c.tpr, strict=True))
        auc = "—" if c.auc is None else f"{100 * c.auc:.1f}"
        parts.append(f'<g><title>{_t(c.name)}: AUROC {auc}</title><polyline points="{pts}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.6"/></g>')
        y = top + 8 + 15 * k
        parts.append(f'<line x1="{left + size + 10}" y1="{y}" x2="{left + size + 26}" y2="{y}" stroke="{colour}" '
                     f'stroke-width="2"/><text x="{left + size + 30}" y="{y + 4}">{_t(c.name)} ({auc})</text>')
    if not curves:
        parts.append(f'<text x="{left + size / 2}" y="{top + size / 2}" text-anchor="middle">no scores with both '
                     f'classes</text>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class Series:
    """One line of a `line_plot`: points (x, y, label shown at the marker and on hover)."""

    name: str
    points: Sequence[tuple[float, float, str]]


def line_plot(series: Sequence[Series], *, title: str = "", xlabel: str = "", ylabel: str = "") -> str:
    """Lines with labelled markers, x on [0, 1], y from 0 to the largest value (at least 0.1); legend on the
    right. Used for selective risk against coverage."""
    size, left, top, bottom, legend = 300, 48, 28, 40, 190
    width, height = left + size + legend, top + size + bottom
    ys = [y for s in series for _, y, _ in s.points if math.isfinite(y)]
    ymax = max([0.1, *ys]) * 1.05
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" {FONT} font-size="11">',
             f'<text x="4" y="16" font-size="13" font-weight="bold">{_t(title)}</text>',
             f'<rect x="{left}" y="{top}" width="{size}" height="{size}" fill="#fafafa" stroke="#999"/>']

    def px(v: float) -> float:
        return left + size * v

    def py(v: float) -> float:
        return top + size * (1 - v / ymax)

    for k in range(0, 11, 2):
        v = k / 10
        parts.append(f'<text x="{px(v):.1f}" y="{top + size + 14}" text-anchor="middle">{v:g}</text>'
                     f'<text x="{left - 5}" y="{py(v * ymax) + 4:.1f}" text-anchor="end">{v * ymax:.2g}</text>')
    parts.append(f'<text x="{left + size / 2}" y="{height - 8}" text-anchor="middle">{_t(xlabel)}</text>'
                 f'<text transform="translate(12 {top + size / 2}) rotate(-90)" text-anchor="middle">{_t(ylabel)}'
                 f'</text>')
    for k, s in enumerate(series):
        colour = colour_for(k)
        pts = [(x, y, lab) for x, y, lab in s.points if math.isfinite(x) and math.isfinite(y)]
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in pts)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
        for x, y, lab in pts:
            parts.append(f'<g><title>{_t(s.name)} at {_t(lab)}: {_t(xlabel)} {x:.3f}, {_t(ylabel)} {y:.3f}</title>'
                         f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}"/>'
                         f'<text x="{px(x) + 6:.1f}" y="{py(y) - 4:.1f}" font-size="9">{_t(lab)}</text></g>')
        y0 = top + 8 + 15 * k
        parts.append(f'<line x1="{left + size + 10}" y1="{y0}" x2="{left + size + 26}" y2="{y0}" stroke="{colour}" '
                     f'stroke-width="2"/><text x="{left + size + 30}" y="{y0 + 4}">{_t(s.name)}</text>')
    if not series:
        parts.append(f'<text x="{left + size / 2}" y="{top + size / 2}" text-anchor="middle">no points</text>')
    parts.append("</svg>")
    return "".join(parts)


def roc_grid(curves: Sequence[Curve], *, title: str = "", columns: int = 4, panel: int = 150) -> str:
    """Small multiples: one small ROC panel per detector (its curve, the chance diagonal and, dashed grey, the
    best detector's curve for reference), titled with its name and AUROC, so fourteen detectors stay legible."""
    gap, head, top = 14, 16, 26
    rows = max(1, math.ceil(len(curves) / columns))
    width = columns * (panel + gap) + gap
    height = top + rows * (panel + head + gap) + 14
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_t(title)}" {FONT} font-size="10">',
             f'<text x="4" y="16" font-size="13" font-weight="bold">{_t(title)}</text>']
    if not curves:
        parts.append(f'<text x="{width / 2}" y="{top + 20}" text-anchor="middle">no scores with both classes</text>'
                     "</svg>")
        return "".join(parts)
    best = max(curves, key=lambda c: c.auc if c.auc is not None else -1.0)

    def line(c: Curve, x0: float, y0: float) -> str:
        return " ".join(f"{x0 + panel * f:.1f},{y0 + panel * (1 - t):.1f}" for f, t in zip(c.fpr, c.tpr, strict=True))

    for k, c in enumerate(curves):
        x0 = gap + (k % columns) * (panel + gap)
        y0 = top + (k // columns) * (panel + head + gap) + head
        auc = "—" if c.auc is None else f"{100 * c.auc:.1f}"
        parts.append(f'<g><title>{_t(c.name)}: AUROC {auc}</title>'
                     f'<text x="{x0}" y="{y0 - 4}" font-weight="bold">{_t(c.name)} ({auc})</text>'
                     f'<rect x="{x0}" y="{y0}" width="{panel}" height="{panel}" fill="#fafafa" stroke="#999"/>'
                     f'<line x1="{x0}" y1="{y0 + panel}" x2="{x0 + panel}" y2="{y0}" stroke="#bbb" '
                     f'stroke-dasharray="3 3"/>')
        if c is not best:
            parts.append(f'<polyline points="{line(best, x0, y0)}" fill="none" stroke="#aaa" stroke-width="1" '
                         f'stroke-dasharray="4 2"/>')
        parts.append(f'<polyline points="{line(c, x0, y0)}" fill="none" stroke="{colour_for(k)}" '
                     f'stroke-width="1.8"/></g>')
    parts.append(f'<text x="4" y="{height - 4}" fill="#666">x: false-positive rate, y: true-positive rate (0 to 1); '
                 f'dashed grey: the best detector, {_t(best.name)}</text></svg>')
    return "".join(parts)
