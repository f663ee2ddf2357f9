"""Empty suite-table cells are explained (issue 32, point 3): the reason is printed under the table, suite_tables.md
is listed among the written reports, and a run whose suite tables hold no value at all exits 1 (as a cell without a
usable label does) unless --allow-failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from haldet.cli import app
from haldet.suites.base import get_suite
from haldet.suites.report import cells_without_values, layouts, print_suite_results

ONE_CLASS = "test units with a valid score are all one class (0 positive of 12)"


def suite_rows(value: float | None) -> list[dict[str, Any]]:
    """HalluEntity result rows of two detectors: `likelihood` with `value` in every column, `entropy` empty."""
    suite = get_suite("halluentity")
    metrics = [m for layout in layouts(suite) for m in layout.metrics]
    return [{"dataset": "halluentity", "model": "smollm2-135m", "level": "entity", "detector": det, "metric": m,
             "value": v, "ci_low": None, "ci_high": None, "n": 12, "coverage": 1.0,
             "note": "" if v is not None else ONE_CLASS}
            for det, v in (("likelihood", value), ("entropy", None)) for m in metrics]


def test_the_reason_of_an_empty_cell_is_printed_under_its_table(tmp_path: Path) -> None:
    console = Console(width=80, record=True, force_terminal=True)  # a terminal: print_tables prints on it
    written = print_suite_results("halluentity", suite_rows(0.7), tmp_path, console)
    text = console.export_text()
    assert written == tmp_path / "suite_tables.md" and written.exists()
    first, second = text.index("Tables 2/3"), text.index("Tune-on-test")
    reason = text.index("entropy: — in every column:")
    assert first < reason < second and ONE_CLASS in " ".join(text[reason:second].split())  # wrapped, never cut
    assert "likelihood: —" not in text


def test_suite_tables_without_any_value_are_a_failure() -> None:
    suite = get_suite("halluentity")
    assert cells_without_values(suite, suite_rows(0.7)) == []
    assert cells_without_values(suite, suite_rows(None)) == [
        f"halluentity | smollm2-135m: no value in the halluentity tables ({ONE_CLASS})"]
    data = [{"dataset": "halluentity", "model": "smollm2-135m", "level": "entity", "detector": "(data)",
             "table": "Table 4", "rate_group": "<10%", "metric": "n_items", "value": 3, "n": 6}]
    assert len(cells_without_values(suite, suite_rows(None) + data)) == 1  # data statistics are no detector value


@pytest.mark.parametrize(("value", "allow", "code"), [(None, False, 1), (None, True, 0), (0.7, False, 0)])
def test_run_exit_status_and_listed_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: float | None,
                                            allow: bool, code: int) -> None:
    import haldet.flow.run

    monkeypatch.setattr(haldet.flow.run, "run", lambda *a, **k: (suite_rows(value), []))
    out = tmp_path / "r"
    out.mkdir()
    result = CliRunner().invoke(app, ["run", "--suite", "halluentity", "--out", str(out),
                                      *(["--allow-failures"] if allow else [])])
    assert result.exit_code == code, result.output
    text = " ".join(result.output.split())
    assert str(out / "suite_tables.md") in text.split("reports:", 1)[1]
    assert ("no value in the halluentity tables" in text) == (value is None)
