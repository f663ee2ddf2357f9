"""Help and docs a new user reads: `--threads` on `run`, no `<bool>` type labels on flags, the default run
directory in `--out`'s help, one default LLM backend, and README/docs that match the code."""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.testing import CliRunner

from haldet.cli import app
from repo_paths import REPO

ROOT = REPO


def help_text(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("args", [(), ("run",), ("annotate",), ("datasets", "list"), ("hallulens", "build")])
def test_flags_show_no_type_label(args: tuple[str, ...]) -> None:
    assert "<bool>" not in help_text(*args)


def test_run_accepts_threads_and_names_the_default_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    import haldet.cli.run as run_module

    calls: list[Any] = []
    monkeypatch.setattr(run_module, "configure_threads", lambda n=None: calls.append(n) or 1)
    monkeypatch.setattr(run_module, "run_benchmark", lambda opts: calls.append("ran"))
    result = CliRunner().invoke(app, ["run", "--threads", "1", "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert calls[-2:] == [1, "ran"]                     # the run's own --threads, applied before the run
    text = " ".join(help_text("run").split())
    assert "runs/<datasets>__<models>" in text and "runs/halueval_qa__smollm2-135m" in text


def test_one_default_llm_backend_everywhere() -> None:
    from haldet.config import DEFAULT_LLM_BACKEND, JudgeConfig

    assert JudgeConfig().backend == DEFAULT_LLM_BACKEND
    for args, flag in ((("hallulens", "build"), "--generator-backend"), (("hallulens", "evaluate"), "--judge-backend"),
                       (("run",), "--judge-backend"), (("annotate",), "--judge-backend")):
        text = " ".join(help_text(*args).replace("│", " ").split())
        after = text[text.index(flag):][:300]
        assert re.search(rf"default:? {DEFAULT_LLM_BACKEND}\b", after, re.IGNORECASE), (args, after)


def test_readme_adapter_count_matches_the_registry() -> None:
    from haldet.datasets.base import DATASETS

    readme = (ROOT / "README.md").read_text()
    total = int(re.search(r"(\d+) adapters in `haldet datasets list`", readme).group(1))
    suites = int(re.search(r"(\d+) adapters of the hosted suites", readme).group(1))
    assert total == len(list(DATASETS))
    assert suites == sum(cls.__module__.startswith("haldet.suites.") for _, cls in DATASETS)


def test_docs_stand_alone_and_say_things_once() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "DESIGN.md" not in path.read_text(), path
    suites = (ROOT / "docs" / "suites.md").read_text()
    paragraphs = [p for p in suites.split("\n\n") if len(p) > 200]
    assert len(paragraphs) == len(set(paragraphs))
