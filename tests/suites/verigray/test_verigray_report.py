"""VeriGray tables and the selective-risk plot built from result rows."""

from __future__ import annotations

import numpy as np
from test_verigray_evaluate import classes_to_outputs

from haldet.suites.verigray.evaluate import Sentences, evaluate
from haldet.suites.verigray.report import html_section, markdown, selective_series, table4


def rows() -> list[dict]:
    degree = np.array([0, 1, 2, 3, 4, 5, 6, 6, 0, 5])
    s = Sentences(item=np.arange(10).astype(str), degree=degree, generator=np.array(["a"] * 5 + ["b"] * 5),
                  split=np.array(["test"] * 10))
    pred = np.array([0, 5, 2, 3, 6, 5, 6, 6, np.nan, 5])
    return [r | {"model": "m"} for r in evaluate(s, classes_to_outputs("clf", pred))]


def test_table4_and_selective_curve() -> None:
    r = rows()
    header, body = table4(r)
    assert header[:7] == ["model", "detector", "BAcc", "Hallu. Rec.", "Hallu. Prec.", "Hallu. F1", "L_rank (binary)"]
    # protocol 1 on the parsed sentences: y = [1, 1, 0, 0, 0, 0] (the unparsable 0 is left out), pred = [1, 0, 0, ...]
    assert body == [[*body[0][:2], "75.0", "50.0", "100.0", "66.7", *body[0][6:]]]
    (series,) = selective_series(r)
    assert [p[2] for p in series.points] == ["Out-Dependent", "Implicitly-Supported", "Explicitly-Supported"]
    assert series.points[0][:2] == (0.6, 1 / 6)  # 6 of 10 predicted >= Out-Dependent, one of them (grade 1) unfaithful
    html = html_section(r)
    assert "<svg" in html and "Selective risk vs coverage" in html and "Per-class F1" in html
    assert markdown(r).startswith("| model | detector | BAcc |")
