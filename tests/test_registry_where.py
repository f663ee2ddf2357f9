"""Find a name in one hop: the registry says which file and line define a registered detector or dataset, and
`haldet detectors show NAME` / `haldet datasets show NAME --where` print it (known answers: the files and the
`class` lines below)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import haldet
from haldet.cli import app
from haldet.datasets.base import DATASETS
from haldet.detectors.base import DETECTORS
from haldet.errors import UnknownNameError
from haldet.registry import Location, locate

PACKAGE = Path(haldet.__file__).resolve().parent


def line_text(found: Location) -> str:
    return found.file.read_text(encoding="utf-8").splitlines()[found.line - 1]


def test_a_detector_is_found_at_its_class_line() -> None:
    found = DETECTORS.where("perplexity")
    assert found is not None and found.file == PACKAGE / "detectors" / "perplexity.py"
    assert line_text(found).startswith("class Perplexity(")


def test_a_dataset_and_a_suite_detector_are_found() -> None:
    dataset = DATASETS.where("halueval_qa")
    assert dataset is not None and dataset.file == PACKAGE / "datasets" / "halueval.py"
    assert line_text(dataset).startswith("class ")
    lines = dataset.file.read_text(encoding="utf-8").splitlines()
    assert any('register("halueval_qa")' in text for text in lines[dataset.line - 4 : dataset.line - 1])
    suite = DETECTORS.where("verigray_llm")
    assert suite is not None and suite.file == PACKAGE / "suites" / "verigray" / "verigray_llm.py"
    assert line_text(suite).startswith("class ")


def test_locate_skips_decorators_and_knows_no_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The line is the `class`/`def` statement's, below any decorators; an object without source has none."""
    src = tmp_path / "planted.py"
    src.write_text("import functools\n\n\n@functools.total_ordering\n@functools.total_ordering\nclass A:\n"
                   "    def __lt__(self, other):\n        return False\n\n\n@functools.cache\ndef f():\n"
                   "    return 1\n")
    spec = importlib.util.spec_from_file_location("planted", src)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "planted", module)  # as an import does: a class's source is found through it
    spec.loader.exec_module(module)
    assert locate(module.A) == Location(src.resolve(), 6)
    assert locate(module.f) == Location(src.resolve(), 12)
    assert locate(len) is None


def test_unknown_name_is_the_registry_error() -> None:
    try:
        DETECTORS.where("perplexitx")
    except UnknownNameError as exc:
        assert "perplexity" in str(exc) + str(exc.hint)
    else:
        raise AssertionError("an unknown name must raise")


def test_cli_show_prints_file_and_line() -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["detectors", "show", "perplexity", "--json"])
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)
    expected = DETECTORS.where("perplexity")
    assert expected is not None
    assert (Path(info["file"]), info["line"]) == (expected.file, expected.line)
    assert info["family"] == "gray" and info["requires"] == ["token_logprobs"] and info["trains"] is False
    table = runner.invoke(app, ["detectors", "show", "perplexity"])
    assert table.exit_code == 0 and f"perplexity.py:{expected.line}" in table.stdout
    dataset = runner.invoke(app, ["datasets", "show", "halueval_qa", "--where", "--json"])
    assert dataset.exit_code == 0, dataset.output
    info = json.loads(dataset.stdout)
    assert Path(info["file"]) == PACKAGE / "datasets" / "halueval.py" and info["task_type"] == "grounded_qa"
    unknown = runner.invoke(app, ["detectors", "show", "perplexitx"])
    assert isinstance(unknown.exception, UnknownNameError)
