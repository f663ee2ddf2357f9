"""Tables say what made each number: coverage below 100%, footnotes for substitute models and non-default
variants, a flag where a best value ranks detectors on different item subsets; the terminal table fits 80 columns."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from haldet.evaluation.aggregate import scenario_table
from haldet.report.html import cost_section, results_section, scenario_section
from haldet.report.marks import coverage_suffix, detector_marks
from haldet.report.tables import all_latex, all_markdown
from terminal_table import results_table

DETECTORS = ["verbalized", "self_eval", "selfcheck_bertscore", "selfcheck_nli", "lexical_similarity", "perplexity",
             "ln_entropy", "sar", "semantic_entropy", "eigenscore", "saplma", "mind", "haloscope", "icr_probe"]


def rows(coverage: dict[str, float] | None = None, **extra: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for k, det in enumerate(DETECTORS):
        for metric, value in (("auroc", 0.55 + 0.02 * k), ("aupr", 0.4), ("fpr95", 0.9)):
            out.append({"dataset": "halueval_qa", "scenario": "qa_grounded", "model": "smollm2-135m",
                        "detector": det, "family": "black", "metric": metric, "value": value, "ci_low": value - 0.1,
                        "ci_high": value + 0.1, "n": 40, "n_pos": 20, "coverage": (coverage or {}).get(det, 1.0),
                        "cost_at_n": 12.5, "note": "", "variant": "", "default_variant": True, "substitute": "",
                        **extra.get(det, {})})
    return out


SUB = {"selfcheck_nli": {"substitute": "roberta-large-mnli -> llm:smollm2-135m"},
       "verbalized": {"variant": "paper", "default_variant": False}}


def render(table: Any, width: int) -> list[str]:
    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text().splitlines()


def test_terminal_table_fits_80_columns_with_whole_values() -> None:
    lines = render(results_table(rows({"icr_probe": 0.83}, **SUB), width=80), 80)
    text = "\n".join(lines)
    assert max(map(len, lines)) <= 80
    for k, det in enumerate(DETECTORS):
        assert det in text and f"{0.55 + 0.02 * k:.3f}" in text          # names and values whole, never cut
    assert "83%" in text and "cov" in text and "halueval_qa | smollm2-135m" in text
    assert "verbalized [1]" in text and "selfcheck_nli [2]" in text
    assert "[2] selfcheck_nli: substitute model roberta-large-mnli -> llm:smollm2-135m" in text
    assert "non-default variant 'paper'" in text and "different items" in text
    wide = "\n".join(render(results_table(rows(), width=200), 200))
    assert "Cost@100" in wide and "Cost@100" not in text and "cov" not in wide   # columns picked by the width


def test_markdown_and_latex_show_coverage_marks_and_subset_flag() -> None:
    data = rows({"icr_probe": 0.83}, **SUB)
    md = all_markdown(data)
    assert "**81.00**§ (83%)" in md                                    # icr_probe is best, on fewer items
    assert "| selfcheck_nli [2] |" in md and "[2] selfcheck_nli: substitute model" in md
    assert "ranks detectors scored on different item subsets" in md and "| icr_probe (81.00)§ |" in md
    tex = all_latex(data)
    assert r"\textbf{81.00}\S{} (83\%)" in tex and r"selfcheck\_nli\textsuperscript{2}" in tex
    same = all_markdown(rows())
    assert "§ (" not in same and "**81.00** |" in same and "[1]" not in same   # equal coverage: no flag, no marks


def test_html_sections_carry_the_marks() -> None:
    data = rows({"icr_probe": 0.5}, **SUB)
    html = results_section(data) + scenario_section(data) + cost_section(data)
    assert "selfcheck_nli<sup>2</sup>" in html and "verbalized<sup>1</sup>" in html
    assert "substitute model roberta-large-mnli -&gt; llm:smollm2-135m" in html
    assert "<b>81.00</b>§ (50%)" in html and "81.00 (50%)" in html   # scenario table and cost table


def test_aggregates_carry_mean_coverage_and_marks_follow_rows() -> None:
    t2 = scenario_table(rows({"icr_probe": 0.8}))
    cell = next(r for r in t2.rows if r.detector == "icr_probe").values["Overall"]
    assert cell.coverage == 0.8
    assert coverage_suffix(0.999) == " (99%)" and coverage_suffix(1.0) == "" and coverage_suffix(None) == ""
    marks = detector_marks(rows(**SUB))
    assert marks.of("smollm2-135m", "selfcheck_nli") == [2] and marks.of("smollm2-135m", "perplexity") == []
