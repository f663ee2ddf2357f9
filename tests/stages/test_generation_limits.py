"""Generation limits per task type (issue 19): reasoning and code get room for a worked answer, short QA stays
short, every level is overridable; answers cut at the limit are counted and warned about; a cell with no usable
label says so and the run exits 1 unless --allow-failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

import haldet.flow.cell
from haldet.backends.base import Backend, GenOutput, role_based_chat
from haldet.cli import app
from haldet.config import RunConfig
from haldet.schema import Instance
from haldet.util.limits import TASK_MAX_NEW_TOKENS, cut_off_summary, max_new_tokens
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"


def inst(task_type: str, dataset: str = "d") -> Instance:
    return Instance(id=f"{dataset}/test/1", dataset=dataset, scenario="s", task_type=task_type, question="q")


def test_limits_per_task_type_and_overrides() -> None:
    default = RunConfig()
    assert max_new_tokens(default, inst("reasoning")) == TASK_MAX_NEW_TOKENS["reasoning"] >= 512
    assert max_new_tokens(default, inst("code")) >= 512
    assert max_new_tokens(default, inst("short_answer")) == 64
    assert max_new_tokens(default, inst("reasoning"), sample=True) == max_new_tokens(default, inst("reasoning"))
    by_task = RunConfig.model_validate({"generation": {"max_new_tokens_by_task": {"reasoning": 300}}})
    assert max_new_tokens(by_task, inst("reasoning")) == 300
    by_dataset = RunConfig.model_validate({"generation": {"max_new_tokens_by_task": {"reasoning": 300},
                                                          "max_new_tokens_by_dataset": {"gsm8k": 200}}})
    assert max_new_tokens(by_dataset, inst("reasoning", "gsm8k")) == 200
    assert max_new_tokens(by_dataset, inst("reasoning", "svamp")) == 300
    forced = RunConfig.model_validate({"generation": {"max_new_tokens": 16}, "sample": {"max_new_tokens": 8}})
    assert max_new_tokens(forced, inst("reasoning", "gsm8k")) == 16
    assert max_new_tokens(forced, inst("reasoning"), sample=True) == 8


def test_cut_off_share_warns_with_the_setting_to_change() -> None:
    config = RunConfig()
    pairs = [(inst("reasoning", "gsm8k"), "length")] * 3 + [(inst("reasoning", "gsm8k"), "stop")]
    summary = cut_off_summary(config, pairs)
    assert (summary["n_cut"], summary["share_cut"]) == (3, 0.75)
    assert "75%" in str(summary["warning"]) and "max_new_tokens_by_task.reasoning" in str(summary["warning"])
    assert "warning" in cut_off_summary(config, pairs[2:])  # 1 of 2 cut: 50% warns
    assert "warning" not in cut_off_summary(config, pairs[2:] + pairs[3:])  # 1 of 3: no warning


class ScriptedBackend(Backend):
    """Answers with a worked solution of `need` tokens: cut (finish `length`) when the limit is smaller.
    Records the limit of every call."""

    kind = "scripted"
    calls: ClassVar[list[int]] = []

    def __init__(self, name: str, need: int = 100) -> None:
        super().__init__(name)
        self.need = need

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return role_based_chat(messages)

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        ScriptedBackend.calls.append(max_new_tokens)
        n = min(self.need, max_new_tokens)
        text = "Step one. " * (n // 3) + ("Answer: 18" if n == self.need else "")
        return [GenOutput(text=text, token_ids=list(range(n)), token_logprobs=[-0.1] * n,
                          finish_reason="stop" if n == self.need else "length") for _ in prompts]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    ScriptedBackend.calls = []
    monkeypatch.setattr(haldet.flow.cell, "make_backend", lambda model, config: ScriptedBackend(model))


def _run(tmp_path: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["run", "--dataset", "gsm8k", "--data-dir", str(FIX), "--limit", "3",
                                    "--detector", "perplexity", "--judge", "rule", "--out", str(tmp_path / "r"),
                                    "--min-per-class", "0",
                                    *extra])


def test_reasoning_run_at_defaults_gives_usable_labels(scripted: None, tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert ScriptedBackend.calls == [TASK_MAX_NEW_TOKENS["reasoning"]]
    assert result.exit_code == 0, result.output
    assert "no usable label" not in result.output and "cut off" not in result.output


def test_a_too_short_limit_is_reported_and_fails_unless_allowed(scripted: None, tmp_path: Path) -> None:
    result = _run(tmp_path, "--max-new-tokens", "16")
    assert ScriptedBackend.calls == [16]
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "3/3 answers (100%) were cut off at the token limit" in text
    assert "no usable label" in text and "3 invalid" in text and "--allow-failures" in text
    again = _run(tmp_path, "--max-new-tokens", "16", "--allow-failures")
    assert again.exit_code == 0 and "no usable label" in again.output


def test_a_cell_without_result_is_a_line_of_the_table() -> None:
    from rich.console import Console

    from terminal_table import results_table

    console = Console(width=250, record=True)
    console.print(results_table([], failed=[("gsm8k", "smollm2-135m", "no usable label (correct or hallucination)")]))
    text = console.export_text()
    assert "gsm8k" in text and "no result" in text and "no usable label" in text
