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

FIX = Path(__file__).parent / "fixtures" / "datasets"


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
    assert marks.label("m", "x") == " [1]" and "e | m: thin test split" in marks.lines()[0]


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
