"""Grouped bars (`charts.bar_figure`): each bar's height is its value, an interval is drawn as its ends, a missing
value leaves a dash instead of a bar of zero that would read as a measured 0; panels share one legend."""

from __future__ import annotations

import numpy as np

from haldet.figures.charts import bar_figure
from haldet.figures.data import Bars, Panel


def test_bar_heights_intervals_and_gaps() -> None:
    fig = bar_figure([Panel("p", ["a", "b", "c"], [Bars("x", [0.2, None, 0.9], [0.1, None, 0.8], [0.3, None, 1.0]),
                                                   Bars("y", [0.5, 0.4, 0.0])]),
                      Panel("q", ["d"], [Bars("x", [0.7]), Bars("y", [None])])], top=1.0)
    assert len(fig.axes) == 2 and [t.get_text() for t in fig.legends[0].get_texts()] == ["x", "y"]  # one legend
    assert [p.get_height() for p in fig.axes[1].patches] == [0.7, 0.0]
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [0.2, 0.0, 0.9, 0.5, 0.4, 0.0]
    (bars_x,) = [c for c in ax.containers if hasattr(c, "lines") and c.lines[2]]  # the one series with intervals
    segments = bars_x.lines[2][0].get_segments()
    assert np.allclose([s[:, 1] for s in segments], [[0.1, 0.3], [0.0, 0.0], [0.8, 1.0]])
    dashes = [t for t in ax.texts if t.get_text() == "–"]
    assert len(dashes) == 1 and abs(dashes[0].get_position()[0] - (1 - 0.4 + 0.2)) < 1e-9  # x's bar in group b
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"] and ax.get_ylim() == (0.0, 1.0)
