"""The rich terminal table of a run's results: one line per (dataset, model, detector)."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _fmt(value: Any, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def results_table(rows: list[dict[str, Any]], title: str = "haldet results (test split)",
                  failed: list[tuple[str, str, str]] | None = None) -> Table:
    """`failed`: (dataset, model, why) of cells without results, shown as a line each so none goes unseen."""
    table = Table(title=title, show_lines=False)
    for col, justify in [("dataset", "left"), ("model", "left"), ("detector", "left"), ("family", "left"),
                         ("AUROC [95% CI]", "right"), ("AUPR", "right"), ("FPR@95", "right"), ("N", "right"),
                         ("pos", "right"), ("coverage", "right"), ("Cost@100 s", "right"), ("note", "left")]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["dataset"], row["model"], row["detector"]), {})[row["metric"]] = row
    for (dataset, model, detector), metrics in cells.items():
        au = metrics.get("auroc", {})
        ci = f" [{_fmt(au.get('ci_low'))}, {_fmt(au.get('ci_high'))}]" if au.get("ci_low") is not None else ""
        table.add_row(dataset, model, detector, str(au.get("family", "")), _fmt(au.get("value")) + ci,
                      _fmt(metrics.get("aupr", {}).get("value")), _fmt(metrics.get("fpr95", {}).get("value")),
                      str(au.get("n", "")), str(au.get("n_pos", "")), f"{au.get('coverage', 0):.0%}",
                      _fmt(au.get("cost_at_n"), 2), str(au.get("note") or au.get("cost_note") or ""))
    for dataset, model, why in failed or []:
        table.add_row(dataset, model, "[red]no result[/red]", "", "—", "—", "—", "0", "0", "0%", "—", why)
    return table
