"""Thin cells (issue 29): a test split with fewer labelled items per class than `evaluation.min_per_class` is marked
in every table, never averaged or ranked, and the run says so and exits 1 unless --allow-failures; the judges'
coverage (and the LLM judge that did not run) is printed under the run's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import haldet.flow.cell
from haldet.backends.base import Backend, GenOutput, role_based_chat
from haldet.cli import app
from haldet.evaluation.aggregate import frame
from haldet.flow.cell import thin_split
from haldet.report.marks import detector_marks
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"


class TenBackend(Backend):
    """Answers "#### 10" to everything: right for the first gsm8k fixture item (10), wrong for the other two."""

    kind = "scripted"

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return role_based_chat(messages)

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        return [GenOutput(text="#### 10", token_ids=[1, 2, 3], token_logprobs=[-0.1, -0.2, -0.3],
                          finish_reason="stop") for _ in prompts]


def test_thin_split_counts_labelled_test_items_per_class() -> None:
    labels = {"a": 0, "b": 1, "c": 0, "d": 1, "e": 1}
    assert thin_split({"test": ["a", "b", "c", "d", "e"]}, labels, 2) == ""
    why = thin_split({"test": ["a", "b", "d", "e"]}, labels, 2)
    assert "1 correct and 3 hallucination" in why and "min_per_class = 2" in why
    assert thin_split({"test": ["a"]}, labels, 0) == ""  # 0: no minimum


def test_a_thin_row_is_marked_and_never_averaged() -> None:
    base = {"dataset": "d", "model": "m", "detector": "x", "metric": "auroc", "value": 0.9, "scenario": "qa"}
    rows = [base, {**base, "dataset": "e", "value": 0.7, "thin": "thin test split: 1 correct ..."}]
    fr = frame(rows)
    assert fr.values[("m", "x", "d")] == 0.9 and fr.values[("m", "x", "e")] is None
    marks = detector_marks(rows)
    assert "e | m: thin test split" in marks.lines()[0]
    # the caveat belongs to cell (e, m, x): it marks that cell, not the detector's name nor its other datasets
    assert marks.label("m", "x", dataset="e") == " [1]" and marks.cell_label("m", "x", "e") == " [1]"
    assert marks.label("m", "x") == "" and marks.label("m", "x", dataset="d") == ""
    assert marks.cell_label("m", "x", "d") == ""


def test_a_run_too_thin_to_rank_says_so_and_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(haldet.flow.cell, "make_backend", lambda model, config: TenBackend(model))

    def run(*extra: str) -> Any:
        return CliRunner().invoke(app, ["run", "--dataset", "gsm8k", "--data-dir", str(FIX), "--limit", "3",
                                        "--detector", "perplexity", "--out", str(tmp_path / "r"), *extra])

    result = run()
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "thin test split" in text and "min_per_class = 5" in text and "--allow-failures" in text
    # the judges' coverage under the table, and the LLM judge that did not run
    assert "labels gsm8k | smollm2-135m: 1 correct, 2 hallucination; judge coverage 100% (3/3: rule:math 3)" in text
    allowed = run("--allow-failures")
    assert allowed.exit_code == 0 and "thin test split" in " ".join(allowed.output.split())
    assert run("--min-per-class", "0", "--update").exit_code == 0


def test_a_merged_report_keeps_each_cells_caveat_on_that_cell() -> None:
    """`haldet report RUN_A RUN_B`: run a's thin halueval_qa cell must not mark run b's responses rows of the same
    detector names (seen before: perplexity and entropy of b marked with a's thin note), in the terminal table,
    tables.md/.tex and report.html."""
    from haldet.evaluation.aggregate import dataset_table
    from haldet.report.html import results_section
    from haldet.report.tables import table_latex, table_markdown
    from haldet.report.terminal import results_parts

    thin = "thin test split: 2 correct and 2 hallucination labelled item(s), fewer than min_per_class = 5"
    rows = []
    for det in ("perplexity", "entropy"):
        base = {"model": "smollm2-135m", "detector": det, "family": "gray", "metric": "auroc", "n": 4, "n_pos": 2,
                "coverage": 1.0}
        rows += [{**base, "run": "a", "dataset": "halueval_qa", "scenario": "qa", "value": 1.0, "thin": thin,
                  "note": thin},
                 {**base, "run": "b", "dataset": "responses", "scenario": "responses", "value": 0.62, "n": 40}]
    table, _ = results_parts(rows, width=200)
    names = {(r[0], r[1]): r for r in zip(*[[str(c) for c in col._cells] for col in table.columns], strict=True)}
    for det in ("perplexity", "entropy"):
        assert names[("halueval_qa", f"{det} [1]")]  # run a's thin cell is marked ...
        assert ("responses", det) in names  # ... run b's row of the same detector is not
    md = table_markdown(dataset_table(rows), detector_marks(rows))
    line = next(x for x in md.splitlines() if x.startswith("| perplexity"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["perplexity", "— [1]", "**62.00**", "**62.00†**"]
    assert "a: halueval_qa | smollm2-135m: thin test split" in md
    tex = table_latex(dataset_table(rows), marks=detector_marks(rows))
    assert r"--\textsuperscript{1}" in tex and r"perplexity\textsuperscript" not in tex
    html = results_section(rows)
    assert html.count("<sup>1</sup>") == 2  # the two thin cells' detector names, not the responses rows


def test_the_python_api_warns_on_a_thin_cell_and_the_note_says_it(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """`haldet.run(config, limit=...)` on a cell too thin to rank: a ThinCellWarning (the CLI's message), and the
    caveat in every row's `note` (the column a reader looks at), not only in the `thin` column."""
    import haldet

    monkeypatch.setattr(haldet.flow.cell, "make_backend", lambda model, config: TenBackend(model))
    config = haldet.load_config(None, datasets=["gsm8k"], data_dir=str(FIX), detectors=["perplexity"], limit=3)
    with pytest.warns(haldet.ThinCellWarning, match=r"gsm8k \| smollm2-135m: thin test split"):
        rows, _ = haldet.run(config, tmp_path / "r")
    assert rows and all(r["thin"].startswith("thin test split") and r["note"].startswith(r["thin"])
                        for r in rows)
