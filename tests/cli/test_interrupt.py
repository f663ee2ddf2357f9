"""Ctrl-C (issue 32, point 7): exit 130 with a line saying what was kept and that the same command resumes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from haldet.cli import app, entry


def test_an_interrupted_run_says_what_it_kept_and_how_to_resume(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import haldet.flow.run

    out = tmp_path / "r"

    def interrupted(*args: Any, **kwargs: Any) -> None:  # two batches stored, then Ctrl-C
        cell = out / "halueval_qa" / "smollm2-135m"
        (cell / "scores").mkdir(parents=True)
        (cell / "generate.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n')
        (cell / "sample.jsonl").write_text('{"id": "a"}\n')
        (cell / "scores" / "perplexity.jsonl").write_text("")
        raise KeyboardInterrupt

    monkeypatch.setattr(haldet.flow.run, "run", interrupted)
    result = CliRunner().invoke(app, ["run", "--out", str(out)])
    assert result.exit_code == 130
    text = " ".join(result.output.split())
    assert f"interrupted: kept in {out} (records per stage log): halueval_qa | smollm2-135m: generate 3, " \
           "sample 1, perplexity 0." in text
    assert "Run the same command again to resume" in text


def test_any_command_stopped_by_ctrl_c_says_so(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import haldet.report.build

    def stopped(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(haldet.report.build, "report_runs", stopped)
    monkeypatch.setattr(sys, "argv", ["haldet", "report", "runs/x"])
    with pytest.raises(SystemExit) as exc:
        entry()
    assert exc.value.code == 130
    assert "interrupted; everything written so far is kept" in capsys.readouterr().err
