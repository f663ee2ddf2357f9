"""A suite's tables from the tidy result rows, shaped by its `TableLayout`s: detectors as rows, metrics as columns,
one table per (layout, dataset, model). Printed after `haldet run --suite` and written to `suite_tables.md`."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from haldet.store import atomic_write_text
from haldet.suites.base import ACROSS_MODELS, DATA, Suite, TableLayout, get_suite
from haldet.util.tables import print_tables

METRIC_TITLES = {"auroc": "AUROC", "aupr": "AUPRC", "f1_opt": "F1-opt", "precision_opt": "P-opt",
                 "recall_opt": "R-opt", "f1_opt_test": "F1-opt (tuned on test)", "threshold": "threshold",
                 "precision_opt_test": "P-opt (tuned on test)", "recall_opt_test": "R-opt (tuned on test)",
                 "tie_share": "ties", "base_rate": "base rate",
                 # VeriGray (haldet/suites/verigray): protocol 1 and the ranking losses
                 "bacc": "BAcc", "recall": "Rec", "precision": "Prec", "f1": "F1", "rank_loss": "Lrank",
                 "rank_loss_continuous": "Lrank(s)", "rank_loss_best_binary": "Lrank floor"}


def _n(row: dict[str, Any]) -> str:
    """N of a line, with the coverage beside it when not every unit has a valid score ("39 (94%)")."""
    cov = row.get("coverage")
    return f"{row.get('n')}" + (f" ({cov:.0%})" if isinstance(cov, float) and cov < 1.0 else "")


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else f"{value:.3f}"


def _with_ci(row: dict[str, Any]) -> str:
    """A metric cell: value and, when there is one, its 95% CI."""
    ci = f" [{_fmt(row.get('ci_low'))}, {_fmt(row.get('ci_high'))}]" if row.get("ci_low") is not None else ""
    return _fmt(row.get("value")) + ci


def layouts(suite: Suite) -> list[TableLayout]:
    return list(suite.tables) or [TableLayout(suite.title or suite.name)]


def table_cells(suite: Suite, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (layout, dataset, model): title, level, metric columns and one line per detector
    (value and CI per metric; the first note of the line)."""
    out = []
    for layout in layouts(suite):
        level = layout.level or suite.levels[0]
        mine = [r for r in rows if r.get("level") == level and r.get("table") == layout.table]
        cells = sorted({(r["dataset"], r["model"]) for r in mine})
        for dataset, model in cells:
            lines: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
            for r in mine:
                if (r["dataset"], r["model"]) == (dataset, model):
                    name = tuple(str(r.get(c, "")) for c in layout.line)
                    lines.setdefault(name, {})[r["metric"]] = r
            out.append({"title": f"{layout.title}: {dataset} | {model} ({level} level)", "level": level,
                        "metrics": list(layout.metrics), "lines": lines, "line": list(layout.line)})
    return out


def suite_markdown(suite: Suite, rows: list[dict[str, Any]]) -> str:
    parts = []
    for t in table_cells(suite, rows):
        head = [*t["line"], *(METRIC_TITLES.get(m, m) for m in t["metrics"]), "N units (coverage)", "note"]
        body = []
        for det, metrics in t["lines"].items():
            first = next(iter(metrics.values()))
            notes = sorted({str(metrics[m].get("note")) for m in t["metrics"] if metrics.get(m, {}).get("note")})
            body.append([*det, *(_fmt(metrics.get(m, {}).get("value")) for m in t["metrics"]), _n(first),
                         "; ".join(notes)])
        parts.append(f"### {t['title']}\n\n| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
                     + "".join("| " + " | ".join(line) + " |\n" for line in body))
    return "\n".join(parts) or "No result rows.\n"


def breakdown_markdown(rows: list[dict[str, Any]]) -> str:
    """Rows named `metric[tag=group]` / `metric[group]` as one table per (dataset, model, level, tag): groups as
    rows, `detector: metric` as columns (unit counts of the group in the first column)."""
    tables: dict[tuple[str, str, str, str], dict[str, dict[str, Any]]] = {}
    counts: dict[tuple[str, str, str, str], dict[str, str]] = {}
    for r in rows:
        metric = str(r["metric"])
        if "[" not in metric or not metric.endswith("]"):
            continue
        name, _, group = metric[:-1].partition("[")
        tag, _, value = group.partition("=") if "=" in group else ("", "", group)
        key = (r["dataset"], r["model"], str(r.get("level")), tag or "view")
        tables.setdefault(key, {}).setdefault(value, {})[f"{r['detector']}: {METRIC_TITLES.get(name, name)}"] = \
            r.get("value")
        counts.setdefault(key, {})[value] = f"{r.get('n')} ({r.get('n_pos')} pos)"
    parts = []
    for (dataset, model, level, tag), groups in tables.items():
        cols = list(dict.fromkeys(c for g in groups.values() for c in g))
        head = ["group", "units", *cols]
        body = ["| " + " | ".join([g, counts[(dataset, model, level, tag)][g],
                                   *(_fmt(vals.get(c)) for c in cols)]) + " |" for g, vals in groups.items()]
        parts.append(f"### Breakdown by {tag}: {dataset} | {model} ({level} level)\n\n| " + " | ".join(head)
                     + " |\n|" + "---|" * len(head) + "\n" + "\n".join(body) + "\n")
    return "\n".join(parts)


def _html_table(header: list[str], body: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def html_tables(suite: Suite, rows: list[dict[str, Any]]) -> str:
    """The suite's layouts as HTML tables (value [95% CI] per metric), for `Suite.html_section`."""
    parts = []
    for t in table_cells(suite, rows):
        body = []
        for det, metrics in t["lines"].items():
            cells = [_with_ci(metrics.get(m, {})) for m in t["metrics"]]
            body.append([*det, *cells, _n(next(iter(metrics.values())))])
        parts.append(f"<h3>{escape(t['title'])}</h3>" + _html_table(
            [*t["line"], *(METRIC_TITLES.get(m, m) for m in t["metrics"]), "N units (coverage)"], body))
    return "\n".join(parts)


def rich_tables(suite: Suite, rows: list[dict[str, Any]]) -> list[Table]:
    tables = []
    for t in table_cells(suite, rows):
        table = Table(title=t["title"])
        for col in t["line"]:
            table.add_column(col, no_wrap=True)
        for m in t["metrics"]:
            table.add_column(METRIC_TITLES.get(m, m), justify="right")
        table.add_column("N units (coverage)", justify="right")
        for det, metrics in t["lines"].items():
            cells = [_with_ci(metrics.get(m, {})) for m in t["metrics"]]
            table.add_row(*det, *cells, _n(next(iter(metrics.values()))))
        tables.append(table)
    return tables


def empty_cell_reasons(suite: Suite, rows: list[dict[str, Any]]) -> list[list[str]]:
    """Per table of `table_cells`: one line per table line with an empty (—) cell, naming the empty columns and
    why they are empty (the rows' notes: one class among the test units, no valid score, ...)."""
    out = []
    for t in table_cells(suite, rows):
        lines = []
        for det, metrics in t["lines"].items():
            empty = [m for m in t["metrics"] if metrics.get(m, {}).get("value") is None]
            if not empty:
                continue
            notes = sorted({str(metrics[m]["note"]) for m in empty if metrics.get(m, {}).get("note")})
            where = ("every column" if len(empty) == len(t["metrics"])
                     else ", ".join(METRIC_TITLES.get(m, m) for m in empty))
            lines.append(f"{' | '.join(det)}: — in {where}: "
                         + ("; ".join(notes) or "no value and no reason recorded"))
        out.append(lines)
    return out


def cells_without_values(suite: Suite, rows: list[dict[str, Any]]) -> list[str]:
    """One problem line per (dataset, model) whose suite tables hold no value at all (every unit of one class,
    no valid score): such a run exits 1 like a cell without a usable label, unless --allow-failures."""
    values: dict[tuple[str, str], bool] = {}
    reasons: dict[tuple[str, str], str] = {}
    for t in table_cells(suite, rows):
        for metrics in t["lines"].values():
            for m in t["metrics"]:
                row = metrics.get(m)
                if row is None or row.get("detector") == DATA or row.get("model") == ACROSS_MODELS:
                    continue  # data statistics and cross-model tables say nothing about a cell's detectors
                cell = (str(row["dataset"]), str(row["model"]))
                values[cell] = values.get(cell, False) or row.get("value") is not None
                if row.get("note"):
                    reasons.setdefault(cell, str(row["note"]))
    return [f"{dataset} | {model}: no value in the {suite.name} tables "
            f"({reasons.get((dataset, model), 'no reason recorded')})" for (dataset, model), has in values.items()
            if not has]


def write_suite_tables(name: str, rows: list[dict[str, Any]], target: Path, *, header: str = "",
                       footer: str = "") -> Path:
    """`suite_tables.md` in the run directory (returned): the suite's tables, `header` a line above them (the
    run's preset), `footer` Markdown below them (the prompts the run learned)."""
    suite = get_suite(name)
    path = target / "suite_tables.md"
    atomic_write_text(path, f"# {suite.title or suite.name}\n\n" + (f"{header}\n\n" if header else "")
                      + suite_markdown(suite, rows)
                      + "\n" + breakdown_markdown(rows) + (f"\n{footer}" if footer else ""))
    return path


def show_suite_results(name: str, rows: list[dict[str, Any]], console: Console, *, as_json: bool = False) -> None:
    """The suite's tables on the terminal, each with the reason for its empty cells under it (or the rows as
    JSON)."""
    suite = get_suite(name)
    if as_json:
        console.print_json(json.dumps(rows, default=str))
        return
    for table, reasons in zip(rich_tables(suite, rows), empty_cell_reasons(suite, rows), strict=True):
        print_tables(console, [table], [Text(f"  {line}") for line in reasons])


def print_suite_results(name: str, rows: list[dict[str, Any]], target: Path, console: Console, *,
                        as_json: bool = False, header: str = "", footer: str = "") -> Path:
    """`show_suite_results` and `write_suite_tables` (returned)."""
    path = write_suite_tables(name, rows, target, header=header, footer=footer)
    show_suite_results(name, rows, console, as_json=as_json)
    return path
