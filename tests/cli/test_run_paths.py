"""Paths a user gets wrong (issue 32, point 6): each is one precise message before any work, and a run that fails
before it wrote data leaves no run directory behind."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from haldet.cli import app
from haldet.errors import HaldetError


def _error(*args: str) -> HaldetError:
    result = CliRunner().invoke(app, ["run", "--detector", "perplexity", "--limit", "2", *args])
    assert isinstance(result.exception, HaldetError), result.output
    return result.exception


def test_an_out_that_is_a_file_is_named_as_such_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    error = _error("--out", str(target))
    assert error.what == "the run directory is a file" and error.where == str(target)
    assert "--out" in error.hint and "permissions" not in error.message
    assert target.read_text() == "mine"


def test_a_missing_data_dir_is_an_error_for_a_packaged_dataset_too(tmp_path: Path) -> None:
    error = _error("--dataset", "halueval_qa", "--data-dir", str(tmp_path / "typo"), "--out", str(tmp_path / "r"))
    assert error.what == "no such data directory or file" and error.where == str(tmp_path / "typo")
    assert not (tmp_path / "r").exists()


def test_a_run_failing_on_its_data_leaves_no_directory(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()  # exists, but holds no truthfulqa file: the cell fails loading it
    error = _error("--dataset", "truthfulqa", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "r"))
    assert "truthfulqa" in error.message
    assert not (tmp_path / "r").exists()
    # a directory that existed before is left as it was (here: a finished run's, with its data)
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "results.json").write_text("[]")
    _error("--dataset", "truthfulqa", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "kept"))
    assert (tmp_path / "kept" / "results.json").read_text() == "[]"
