"""A report a reader can read: many ROC curves as small multiples, cost-scatter labels that never overlap (moved
labels get a leader line), "-" as the fit time of a detector that does not train, and the detectors a default run
left out named with the reason in the terminal, Markdown and HTML output."""

from __future__ import annotations

import io
import json
import math
import re
from itertools import combinations
from pathlib import Path

import pytest
from rich.console import Console
from test_report_html import make_run

from haldet.config_files import compose_config
from haldet.defaults import DEFAULT_DETECTORS, skipped_detectors
from haldet.figures.charts import MARKER_AREA, cost_scatter
from haldet.figures.curves import curve_figure
from haldet.figures.data import Curve, Point
from haldet.figures.render import FigureSet
from haldet.report import html as html_module
from haldet.report.build import write_reports
from haldet.report.rundata import load_run
from haldet.report.terminal import print_results


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def test_cost_scatter_labels_never_overlap_each_other_or_markers() -> None:
    names = ["verbalized", "self_eval", "selfcheck_bertscore", "lexical_similarity", "perplexity", "ln_entropy",
             "sar", "eigenscore", "ccs", "haloscope", "saplma", "mind", "prism", "icr_probe"]
    # a crowded cluster, as the default run's cheap white-box detectors are: near-equal cost and AUROC
    pts = [Point(0.01 * (1 + 0.05 * k), 0.55 + 0.004 * k, n, "g") for k, n in enumerate(names)]
    fig = cost_scatter(pts, title="t")
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    # the drawn names, measured where matplotlib puts them (pixels of the figure)
    texts = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert set(texts) == set(names)
    boxes = [(b.x0, b.y0, b.width, b.height) for b in texts.values()]
    assert [(a, b) for a, b in combinations(boxes, 2) if overlap(a, b)] == []
    r = math.sqrt(MARKER_AREA) / 2 * fig.dpi / 72
    centres = ax.transData.transform(ax.collections[0].get_offsets())
    assert len(centres) == len(names)
    markers = [(x - r, y - r, 2 * r, 2 * r) for x, y in centres]
    assert not any(overlap(b, m) for b in boxes for m in markers)
    leaders = [ln for ln in ax.lines if ln.get_color() == "#888888"]
    assert len(leaders) >= 1                                         # displaced labels are joined to their point
    # a negative control: the names written at their points, unplaced, do overlap
    plain = [ax.text(x, y, n).get_window_extent(renderer) for (x, y), n in zip(
        ax.collections[0].get_offsets(), names, strict=True)]
    assert any(overlap((a.x0, a.y0, a.width, a.height), (b.x0, b.y0, b.width, b.height))
               for a, b in combinations(plain, 2))


def test_many_roc_curves_become_small_multiples(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    curves = [Curve(f"det{k}", [0, 0.2 + 0.02 * k, 1], [0, 0.6, 1], 0.7 + 0.01 * k) for k in range(14)]
    fig = curve_figure(curves, title="cell")
    ax = fig.axes[0]
    assert len(ax.patches) == 14                                       # one panel (frame) per detector
    assert {t.get_text() for t in ax.texts} >= {f"det{k} ({70 + k}.0)" for k in range(14)}
    assert "the best detector, det13" in fig.get_supxlabel()
    run = load_run(make_run(tmp_path / "run"))
    rows = [dict(r) for r in run.rows]
    grid_note = "dashed grey: the best detector"
    few = html_module.roc_section([run], rows, n_boot=20)
    assert grid_note not in few and few.count("<figure") == 2 * 6        # three curves share one plot (ROC, PR)
    monkeypatch.setattr(html_module, "FEW_CURVES", 2)
    figures = FigureSet(formats=())
    assert html_module.roc_section([run], rows, n_boot=20, figures=figures).count(grid_note) == 2 * 6
    assert [r.name for r in figures.rendered][:2] == ["roc-halueval_qa-smollm2-135m", "pr-halueval_qa-smollm2-135m"]


def test_fit_time_is_a_dash_for_detectors_that_do_not_train(tmp_path: Path) -> None:
    rows = [dict(r) for r in load_run(make_run(tmp_path / "run")).rows]
    html = html_module.cost_section(rows)
    header = re.search(r"<thead>(.*?)</thead>", html).group(1)
    fit = re.findall(r"<th[^>]*>(.*?)</th>", header).index("fit (s)")
    cells = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", html):
        tds = re.findall(r"<td[^>]*>(.*?)</td>", tr)
        if tds:
            cells[re.sub("<.*?>", "", tds[1])] = tds[fit]
    assert cells["perplexity"] == "-" and cells["lexical_similarity"] == "-"    # score-only detectors
    assert cells["saplma"] not in ("-", "—")                                   # a trained probe: its seconds


def test_default_run_names_the_detectors_it_left_out(tmp_path: Path) -> None:
    assert set(skipped_detectors(compose_config(None).detectors)) == {"selfcheck_nli", "semantic_entropy", "sep",
                                                                         "kle", "race"}
    assert skipped_detectors(compose_config(None, detectors=["perplexity"]).detectors) == {}
    root = make_run(tmp_path / "run")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["config"]["detectors"] = list(DEFAULT_DETECTORS)
    (root / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    write_reports(out, [load_run(root)], n_boot=20)
    md, html = (out / "tables.md").read_text(), (out / "report.html").read_text()
    for name in ("selfcheck_nli", "semantic_entropy", "sep", "kle"):
        assert f"- not run: {name}, " in md and f"not run: {name}, " in html
    assert "needs an NLI model" in md and "--detector selfcheck_nli" in html
    buf = io.StringIO()
    print_results(Console(file=buf, width=100), [dict(r) for r in load_run(root).rows],
                  notes=["not run: sep, needs an NLI model"])
    assert "not run: sep, needs an NLI model" in buf.getvalue()
