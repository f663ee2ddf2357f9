"""The terminal results table with its footnotes as one renderable at a given width, for tests that read what
`haldet run` prints (`haldet.report.terminal.results_parts`)."""

from __future__ import annotations

from typing import Any

from rich.console import Group

from haldet.report.terminal import results_parts


def results_table(rows: list[dict[str, Any]], title: str = "haldet results (test split)",
                  failed: list[tuple[str, str, str]] | None = None, width: int | None = None,
                  metrics: list[str] | tuple[str, ...] = ()) -> Group:
    """The table plus its footnotes, at most `width` columns wide (default: the terminal's width)."""
    table, notes = results_parts(rows, title, failed, width, metrics)
    return Group(table, *notes)
