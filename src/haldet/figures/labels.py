"""Where to put a name beside each point of a crowded scatter so that no two names and no name and marker overlap:
beside its point when there is room, else the nearest free place (the caller then joins them with a leader line).
Pure geometry in pixels, y growing downwards as on a screen."""

from __future__ import annotations

from collections.abc import Sequence

Box = tuple[float, float, float, float]  # x, y (top left), width, height


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def place_labels(points: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                 area: tuple[float, float, float, float], *, radius: float = 5.0, gap: float = 7.0) -> list[Box]:
    """A box per label, in the order of `points`. `sizes`: (width, height) of each label; `area`: (x0, y0, x1, y1)
    the boxes must stay in; `radius`: a marker's radius (markers are obstacles too); `gap`: label to marker
    centre. Greedy, points from top to bottom; candidates: right, left, above, below, then further up and down on
    either side. A label with no free place keeps the first candidate (overlap is then unavoidable)."""
    obstacles = [(x - radius, y - radius, 2 * radius, 2 * radius) for x, y in points]
    placed: list[Box] = []
    out: dict[int, Box] = {}
    for i in sorted(range(len(points)), key=lambda k: (points[k][1], points[k][0])):
        x, y = points[i]
        w, h = sizes[i]
        candidates = [(x + gap, y - h / 2), (x - gap - w, y - h / 2), (x - w / 2, y - radius - h - 1),
                      (x - w / 2, y + radius + 1)]
        for step in range(1, 40):
            d = step * (h + 1)
            candidates += [(x + gap, y - h / 2 - d), (x + gap, y - h / 2 + d),
                           (x - gap - w, y - h / 2 - d), (x - gap - w, y - h / 2 + d)]
        best = None
        for cx, cy in candidates:
            box = (cx, cy, w, h)
            inside = area[0] <= cx and cx + w <= area[2] and area[1] <= cy and cy + h <= area[3]
            if inside and not any(overlaps(box, o) for o in placed + obstacles):
                best = box
                break
        placed.append(best or (x + gap, y - h / 2, w, h))
        out[i] = placed[-1]
    return [out[i] for i in range(len(points))]


def beside(point: tuple[float, float], box: Box, gap: float) -> bool:
    """Whether a label sits right beside its point (first candidate), so needs no leader line."""
    x, y = point
    return box[0] <= x + gap + 1 and box[1] <= y <= box[1] + box[3]
