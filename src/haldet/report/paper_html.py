"""The paper section of report.html (`haldet report RUN --paper NAME`): our numbers beside a paper's, as HTML.

The same comparison `paper_NAME.md` holds (`haldet.papers.compare`): every compared cell with the paper's value, ours
with its 95% CI, the difference and whether the paper's value lies inside our CI (marked "inside" / "outside", in
words, not only by colour), then every result cell that cannot match with its reason; for OpenHalDet also its Table 2
in the paper's oriented convention (`haldet.papers.table2`), under its own label. Nothing here is ranked or bolded.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from haldet.papers.compare import Comparison
from haldet.papers.table2 import COLUMNS, FAMILY_AVG, LABEL, Table2Row

INSIDE = {True: "inside", False: "outside", None: "no CI"}


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def _v(value: Any) -> str:
    return "—" if value is None else f"{float(value):.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[str] = ()) -> str:
    head = "".join(f'<th class="l">{h}</th>' for h in header)
    body = "".join(f"<tr{f' class={cls}' if cls else ''}>" + "".join(f'<td class="l">{c}</td>' for c in row)
                   + "</tr>" for row, cls in zip(rows, list(classes) or [""] * len(rows), strict=True))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def comparison_html(comp: Comparison) -> str:
    """The compared cells and the cells that cannot match (HTML, escaped)."""
    parts = [f"<p class=muted>{len(comp.matched)} cells compared; {len(comp.unmatched)} result cells that cannot "
             f"match (never compared silently); the paper reports {comp.paper_total} numbers. Values on a 0..1 "
             "scale; diff = ours - paper; inside/outside: whether the paper's value lies inside our 95% CI.</p>"]
    if comp.matched:
        rows, classes = [], []
        for m in comp.matched:
            ci = f" [{_v(m['ci_low'])}, {_v(m['ci_high'])}]" if m["ci_low"] is not None else " (no CI)"
            mark = INSIDE[m["inside_ci"]]
            rows.append([_e(m["table"]), _e(m["dataset"]), _e(m["model"]), _e(m["detector"]), _e(m["metric"]),
                         _v(m["paper"]), _v(m["ours"]) + ci, f"{m['diff']:+.3f}", mark,
                         _e(m["n"] if m["n"] is not None else "—")])
            classes.append(mark.replace(" ", "-"))
        parts.append(_table(["table", "dataset", "model", "detector", "metric", "paper", "ours [95% CI]", "diff",
                             "paper's value", "n"], rows, classes))
        conventions = sorted({str(m["convention"]) for m in comp.matched})
        parts.append("<p class=muted>Conventions of the compared numbers: " + _e("; ".join(conventions)) + ".</p>")
    else:
        parts.append("<p><b>Nothing matches</b>: no result cell of these runs is a cell the paper reports "
                     "(reasons below).</p>")
    if comp.unmatched:
        parts.append("<h3>Cells that cannot match</h3>" + _table(
            ["dataset", "model", "detector", "metric", "reason"],
            [[_e(u["dataset"]), _e(u["model"]), _e(u["detector"]), _e(u["metric"]), _e(u["reason"])]
             for u in comp.unmatched]))
    return "".join(parts)


def table2_html(t2: Sequence[Table2Row], outside: Sequence[str]) -> str:
    """OpenHalDet's Table 2 in the paper's oriented convention: ours, then the paper's value in parentheses."""
    parts = [f"<h3>Table 2 in the paper's convention</h3><p><b>{_e(LABEL)}.</b></p>",
             "<p class=muted>Each cell: ours, then (the paper's value of the same backbone, detector and column) where "
             "the row is the paper's cell. †: fewer datasets than the paper's column averages.</p>"]
    for model in dict.fromkeys(r.model for r in t2):
        rows = []
        for r in (r for r in t2 if r.model == model):
            cells = []
            for col in COLUMNS:
                c = r.cells[col]
                ours = "—" if c.value is None else f"{100 * c.value:.2f}" + ("†" if c.n < c.expected else "")
                cells.append(ours + ("" if c.paper is None else f" ({100 * c.paper:.2f})"))
            name = r.detector if r.detector != FAMILY_AVG else f"<i>{FAMILY_AVG} ({_e(r.family)})</i>"
            rows.append([_e(name) if r.detector != FAMILY_AVG else name, _e(r.variant), *cells])
        parts.append(f"<p>Backbone: <b>{_e(model)}</b></p>" + _table(["Method", "variant", *COLUMNS], rows))
    if outside:
        parts.append("<p class=muted>Datasets outside the paper's 17 (left out): " + _e(", ".join(outside)) + ".</p>")
    return "".join(parts)


def paper_section(comp: Comparison, table2: tuple[Sequence[Table2Row], Sequence[str]] | None = None) -> str:
    """The whole paper section (an `<h2 id=paper>`), Table 2 included when given."""
    body = comparison_html(comp) + (table2_html(*table2) if table2 is not None else "")
    return f"<h2 id=paper>Our numbers beside {_e(comp.paper)}'s</h2>" + body
