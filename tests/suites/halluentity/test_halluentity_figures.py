"""HalluEntity Figs. 3c, 5 and 6: the bars drawn are the run's rows, and `haldet report` writes each as PDF and PNG
files from a run directory's stored results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from haldet.evaluation.breakdowns import paper_breakdowns
from haldet.evaluation.units import UnitData
from haldet.figures.render import FigureSet
from haldet.report.build import write_reports
from haldet.report.rundata import load_run
from haldet.suites.base import get_suite
from haldet.suites.halluentity.figures import error_bars, fig3c_bars

Y = [1, 0, 1, 0, 1, 0, 0, 1]
S = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
TAGS = {"pos": ["NOUN", "NOUN", "VERB", "VERB", "NOUN", "NOUN", "VERB", "VERB"],
        "ner": ["PERSON", "PERSON", "O", "O", "O", "O", "O", "PERSON"],
        "position": ["first"] * 4 + ["last"] * 4, "rate": ["<10%"] * 4 + [">20%"] * 4}


def rows() -> list[dict]:
    """The rows a run stores for two detectors: `focus` scores as S, `likelihood` the reverse order."""
    out = []
    for det, s in (("focus", S), ("likelihood", S[::-1])):
        data = UnitData(np.array(Y), np.array(s), np.array([0] * 4 + [1] * 4), tags=TAGS)
        out += [{"dataset": "halluentity", "model": "m", "detector": det, "level": "entity", "metric": m.metric,
                 "value": m.value, "n": m.n, "n_pos": m.n_pos, "coverage": m.coverage, "note": m.note}
                for m in paper_breakdowns(data, 1.0)]
    return out


def test_bars_are_the_rows_values() -> None:
    cats, bars = error_bars(rows(), "fpr", "ner")
    assert cats == ["O", "PERSON"]  # most entities first
    focus = next(b for b in bars if b.name == "focus")
    assert focus.values[1] == 1.0 and abs(focus.values[0] - 1 / 3) < 1e-12  # the hand-computed FPRs
    cats, bars = error_bars(rows(), "fnr", "position", ("first", "middle", "last"))
    assert next(b for b in bars if b.name == "focus").values == [0.0, None, 0.5]  # no "middle" entity: a gap
    fig3c = fig3c_bars(rows())["focus"]
    assert [b.name for b in fig3c] == ["F1_Opt", "Precision_Opt", "Recall_Opt"]
    assert fig3c[0].values[0] == 0.8 and fig3c[0].values[1] is None  # no entity in 10-20%


def test_section_draws_figs_3c_5_6_per_detector() -> None:
    figures = FigureSet(formats=())  # the page's SVG only: the files are the next test's
    html = get_suite("halluentity").html_section(rows(), figures)
    fig5 = figures.rendered[1].svg
    assert all(f">{name}<" in fig5 or name in fig5 for name in ("FPR by entity type", "FNR by position in sentence"))
    assert [f.name for f in figures.rendered] == [f"halluentity-{f}-halluentity-m" for f in ("fig3c", "fig5", "fig6")]
    assert "Figs. 3c, 5, 6 at the paper" in html


def test_report_writes_the_figures_from_a_stored_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"config": {"suite": "halluentity"}, "cells": []}))
    kept = [r for r in rows() if r["detector"] == "focus" and "[position=" in r["metric"]]  # one figure: cheap
    (run / "results.json").write_text(json.dumps(kept))
    written = write_reports(tmp_path / "out", [load_run(run)])
    names = sorted(n for n in written if n.startswith("figures/halluentity-fig"))
    assert names == [f"figures/halluentity-fig5-halluentity-m.{x}" for x in ("pdf", "png")]
    assert all(written[n].stat().st_size > 1000 for n in names)
    assert (tmp_path / "out" / "report.html").read_text().count('<figure id="fig-halluentity-fig5') == 1
