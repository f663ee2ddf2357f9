"""A report a reader can read: many ROC curves as small multiples, cost-scatter labels that never overlap (moved
labels get a leader line), "-" as the fit time of a detector that does not train, and the detectors a default run
left out named with the reason in the terminal, Markdown and HTML output."""

from __future__ import annotations

import io
import json
import re
from itertools import combinations
from pathlib import Path

import pytest
from rich.console import Console

from haldet.config import DEFAULT_DETECTORS, compose_config, skipped_detectors
from haldet.report import html as html_module
from haldet.report.build import write_reports
from haldet.report.rundata import load_run
from haldet.report.svg import POINT_R, Curve, Point, label_size, roc_grid, scatter_logx
from haldet.report.terminal import print_results
from test_report_html import make_run

LABEL = re.compile(r'<text x="([-\d.]+)" y="([-\d.]+)" font-size="9">([^<]+)</text>')


def label_boxes(svg: str) -> list[tuple[float, float, float, float]]:
    out = []
    for x, y, text in LABEL.findall(svg):
        w, h = label_size(text)
        out.append((float(x), float(y) + 2 - h, w, h))
    return out


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def test_cost_scatter_labels_never_overlap_each_other_or_markers() -> None:
    names = ["verbalized", "self_eval", "selfcheck_bertscore", "lexical_similarity", "perplexity", "ln_entropy",
             "sar", "eigenscore", "ccs", "haloscope", "saplma", "mind", "prism", "icr_probe"]
    # a crowded cluster, as the default run's cheap white-box detectors are: near-equal cost and AUROC
    pts = [Point(0.01 * (1 + 0.05 * k), 0.55 + 0.004 * k, n, "g") for k, n in enumerate(names)]
    svg = scatter_logx(pts, title="t")
    boxes = label_boxes(svg)
    assert len(boxes) == len(names)
    assert [(a, b) for a, b in combinations(boxes, 2) if overlap(a, b)] == []
    markers = [(float(x) - POINT_R, float(y) - POINT_R, 2 * POINT_R, 2 * POINT_R)
               for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="5"', svg)]
    assert not any(overlap(b, m) for b in boxes for m in markers)
    assert svg.count('stroke="#888" stroke-width="0.6"') >= 1       # displaced labels are joined to their point


def test_many_roc_curves_become_small_multiples(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    curves = [Curve(f"det{k}", [0, 0.2 + 0.02 * k, 1], [0, 0.6, 1], 0.7 + 0.01 * k) for k in range(14)]
    svg = roc_grid(curves, title="cell")
    assert svg.count('width="150" height="150"') == 14                 # one panel per detector
    assert all(f">det{k} (" in svg for k in range(14)) and "best detector, det13" in svg
    run = load_run(make_run(tmp_path / "run"))
    rows = [dict(r) for r in run.rows]
    few = html_module.roc_section([run], rows, n_boot=20)
    assert 'width="150" height="150"' not in few                        # three curves share one plot
    monkeypatch.setattr(html_module, "FEW_CURVES", 2)
    assert html_module.roc_section([run], rows, n_boot=20).count('width="150" height="150"') == 3 * 6


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
    assert set(skipped_detectors(compose_config(None).detectors)) == {"selfcheck_nli", "semantic_entropy", "sep"}
    assert skipped_detectors(compose_config(None, detectors=["perplexity"]).detectors) == {}
    root = make_run(tmp_path / "run")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["config"]["detectors"] = list(DEFAULT_DETECTORS)
    (root / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    write_reports(out, [load_run(root)], n_boot=20)
    md, html = (out / "tables.md").read_text(), (out / "report.html").read_text()
    for name in ("selfcheck_nli", "semantic_entropy", "sep"):
        assert f"- not run: {name}, " in md and f"not run: {name}, " in html
    assert "needs an NLI model" in md and "--detector selfcheck_nli" in html
    buf = io.StringIO()
    print_results(Console(file=buf, width=100), [dict(r) for r in load_run(root).rows],
                  notes=["not run: sep, needs an NLI model"])
    assert "not run: sep, needs an NLI model" in buf.getvalue()
