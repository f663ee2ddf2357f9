"""VeriGray Figs. 3 and 6 (appendix C): polarity transitions per generator and between sentences k apart, counted by
hand on three small summaries, and the bars the report draws from those rows."""

from __future__ import annotations

import pytest

from haldet.figures.render import FigureSet
from haldet.schema import Category, Instance, SpanLabel
from haldet.suites.base import get_suite
from haldet.suites.verigray.analysis import FIG3, FIG6, analysis_rows, wilson
from haldet.suites.verigray.labels import CLASSES
from haldet.suites.verigray.transition_figures import fig6_bars

# E Explicitly-Supported, F Fabricated, O Out-Dependent, C Contradicting, I Implicitly-Supported
NAMES = {"E": "Explicitly-Supported", "F": "Fabricated", "O": "Out-Dependent", "C": "Contradicting",
         "I": "Implicitly-Supported"}
SUMMARIES = [("A", "EFEE"), ("A", "EOC"), ("B", "CCI")]  # polarities: F U F F | F O U | U U F


def summary(k: int, generator: str, classes: str) -> Instance:
    units = [SpanLabel(start=10 * j, end=10 * j + 9, kind="sentence", category=Category.CORRECT,
                       grade=len(CLASSES) - 1 - CLASSES.index(NAMES[c]), grade_name=NAMES[c])
             for j, c in enumerate(classes)]
    return Instance(id=f"verigray/test/{k}", dataset="verigray", scenario="summarization", task_type="long_form",
                    question="q", response="x" * 10 * len(classes), units=units, meta={"generator": generator})


def matrix(rows: list[dict], table: str, view: str | None = None) -> dict[tuple[str, str], dict]:
    return {(r["from"], r["metric"]): r for r in rows if r.get("table") == table and r.get("view") == view}


ROWS = analysis_rows([summary(k, g, c) for k, (g, c) in enumerate(SUMMARIES)])


def test_fig3_consecutive_polarity_transitions() -> None:
    fig3 = matrix(ROWS, FIG3)
    # out of Faithful: F->U, F->F (summary 1), F->O (2): a third each; out of Unfaithful: U->F (1), U->U, U->F (3)
    assert [fig3[("Faithful", t)]["value"] for t in ("Faithful", "Unfaithful", "Others")] == [1 / 3] * 3
    assert fig3[("Unfaithful", "Faithful")]["value"] == 2 / 3 and fig3[("Unfaithful", "Faithful")]["n"] == 3
    low, high = wilson(2, 3)
    assert (fig3[("Unfaithful", "Faithful")]["ci_low"], fig3[("Unfaithful", "Faithful")]["ci_high"]) == (low, high)
    assert fig3[("Others", "Unfaithful")]["value"] == 1.0


def test_fig6_per_generator_and_k_steps() -> None:
    a, b = matrix(ROWS, FIG6, "generator=A"), matrix(ROWS, FIG6, "generator=B")
    assert a[("Unfaithful", "Faithful")]["value"] == 1.0 and a[("Faithful", "Others")]["value"] == pytest.approx(1 / 3)
    assert b[("Unfaithful", "Unfaithful")]["value"] == 0.5 and b[("Unfaithful", "Faithful")]["value"] == 0.5
    assert b[("Faithful", "Faithful")]["value"] is None and "no transition out of Faithful" in b[
        ("Faithful", "Faithful")]["note"]
    k2 = matrix(ROWS, FIG6, "k=2")  # pairs two apart: (F,F), (U,F) | (F,U) | (U,F)
    assert k2[("Faithful", "Faithful")]["value"] == 0.5 and k2[("Faithful", "Unfaithful")]["value"] == 0.5
    assert k2[("Unfaithful", "Faithful")]["value"] == 1.0 and k2[("Unfaithful", "Faithful")]["n"] == 2
    k3 = matrix(ROWS, FIG6, "k=3")  # only summary 1 is four sentences long: (F, F)
    assert k3[("Faithful", "Faithful")]["value"] == 1.0 and k3[("Faithful", "Faithful")]["n"] == 1
    assert all(r["value"] is None for r in matrix(ROWS, FIG6, "k=4").values())  # no summary of five sentences


def test_the_bars_are_the_rows_and_the_section_draws_figs_3_and_6() -> None:
    gens = fig6_bars(ROWS, "generator", "Faithful")  # categories: from Faithful, Unfaithful, Others
    assert [(g.name, list(g.values)) for g in gens] == [("A", [1 / 3, 1.0, 0.0]), ("B", [None, 0.5, None])]
    steps = fig6_bars(ROWS, "k", "Unfaithful")
    assert [s.name for s in steps] == ["k=1", "k=2", "k=3", "k=4"]
    assert list(steps[0].values) == [1 / 3, 1 / 3, 1.0] and list(steps[1].values) == [0.5, 0.0, None]
    assert steps[1].low[0] == wilson(1, 2)[0]
    rows = [{**r, "dataset": "verigray", "model": "m"} for r in ROWS]
    figures = FigureSet(formats=())
    html = get_suite("verigray").html_section(rows, figures)
    assert [f.name for f in figures.rendered] == [f"verigray-{f}-verigray-m" for f in
                                                  ("fig3", "fig6-generators", "fig6-steps")]
    assert "Transition probabilities (Figs. 3 and 6)" in html and "Fig. 6 (transition probabilities" in html
