"""Drawing: every figure of the reports, drawn with matplotlib (Agg, no display) in this one layer.

A chart function (`curves.curve_figure`, `charts.heatmap`, `charts.cost_scatter`, `charts.line_figure`,
`charts.bar_figure`, `charts.scatter_figure`) returns a matplotlib `Figure`; a `render.FigureSet` renders it once
as inline SVG for the HTML report and as PDF and PNG bytes a paper can use, byte-for-byte reproducible, then lets
it go. Nothing here reads a run or writes a file: the report and the suites hand in the numbers and write the bytes
where their output lives. Imports only the core layer.
This package's own import is light (the records in `data`); matplotlib loads with `curves`, `charts` or `render`.
"""

from haldet.figures.data import PR, ROC, Bars, Curve, CurveKind, Panel, Point, Scatter, Series

__all__ = ["PR", "ROC", "Bars", "Curve", "CurveKind", "Panel", "Point", "Scatter", "Series"]
