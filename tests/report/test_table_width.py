"""No name or number is ever cut: `datasets list`, `suites list`, suite tables and the results table at 80 columns
on a terminal, and redirected to a file (full width, one line per row)."""

from __future__ import annotations

import io
import re
import sys
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

import haldet.util.console  # noqa: F401  (the module, for monkeypatching its consoles)
from haldet.cli import app
from haldet.report.terminal import print_results
from haldet.util.tables import fit, print_tables

CONSOLE_MODULE = sys.modules["haldet.util.console"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=True, color_system=None, emoji=False), buf


def redirected(width: int = 80) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, emoji=False), buf  # a StringIO is not a terminal


def invoke(monkeypatch: pytest.MonkeyPatch, console: Console, *args: str) -> None:
    monkeypatch.setattr(CONSOLE_MODULE, "out_console", console)
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


def dataset_names() -> list[str]:
    from haldet.datasets.base import DATASETS

    return [name for name, _ in DATASETS]


def suite_infos() -> list[dict[str, Any]]:
    from haldet.suites.base import SUITES

    return [cls.info() for _, cls in SUITES]


def words(text: str) -> set[str]:
    return set(re.split(r"[\s│┃,]+", ANSI.sub("", text)))


@pytest.mark.parametrize("make", [terminal, redirected], ids=["terminal", "redirected"])
def test_datasets_and_suites_lists_keep_every_name(monkeypatch: pytest.MonkeyPatch, make: Any) -> None:
    console, buf = make(80)
    invoke(monkeypatch, console, "datasets", "list")
    invoke(monkeypatch, console, "suites", "list")
    text = ANSI.sub("", buf.getvalue())
    assert "…" not in text
    found = words(text)
    names = [*dataset_names(), *(s["name"] for s in suite_infos()),
             *(d for s in suite_infos() for d in [*s["detectors"], *s["datasets"]])]
    assert [n for n in names if n not in found] == []
    if console.is_terminal:
        assert max(map(len, text.splitlines())) <= 80
    else:  # a log: one line per row, the row's name and its source on it
        from haldet.datasets.base import DATASETS

        lines = text.splitlines()
        for name, cls in DATASETS:
            source = str(cls.info(None)["source"])
            assert any(f" {name} " in line and source in line for line in lines), name


def numbers_table() -> Table:
    table = Table(title="suite table")
    table.add_column("detector", no_wrap=True)
    for k in range(6):
        table.add_column(f"metric number {k}", justify="right")
    for det in ("llmcheck_attention", "selfcheck_bertscore", "nli_verifier"):
        table.add_row(det, *(f"0.81{k} [0.71{k}, 0.90{k}]" for k in range(6)))
    return table


@pytest.mark.parametrize("width", [80, 60, 30])
def test_fit_wraps_or_stacks_but_never_cuts(width: int) -> None:
    console, buf = terminal(width)
    for part in fit(numbers_table(), console):
        console.print(part)
    text = buf.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= width
    found = words(text)
    for k in range(6):
        assert {f"0.81{k}", f"[0.71{k}", f"0.90{k}]"} <= found
    assert {"llmcheck_attention", "selfcheck_bertscore", "nli_verifier"} <= found


def test_redirected_table_is_full_width_one_line_per_row() -> None:
    console, buf = redirected(80)
    print_tables(console, [numbers_table()])
    rows = [line for line in buf.getvalue().splitlines() if "llmcheck_attention" in line]
    assert len(rows) == 1 and all(f"0.81{k} [0.71{k}, 0.90{k}]" in rows[0] for k in range(6))


def result_rows() -> list[dict[str, Any]]:
    from test_report_marks import rows

    return rows({"icr_probe": 0.83})


def test_results_table_redirected_keeps_every_column() -> None:
    console, buf = redirected(80)
    print_results(console, result_rows())
    text = buf.getvalue()
    assert "…" not in text
    for header in ("AUROC", "95% CI", "cov", "AUPR", "FPR@95", "N", "pos", "Cost@100 s", "family"):
        assert header in text
    icr = [line for line in text.splitlines() if "icr_probe" in line]
    assert len(icr) == 1 and "0.810" in icr[0] and "12.50" in icr[0] and "83%" in icr[0]


def test_results_table_on_80_column_terminal_is_whole() -> None:
    console, buf = terminal(80)
    print_results(console, result_rows())
    text = buf.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert "0.810" in text and "83%" in text
