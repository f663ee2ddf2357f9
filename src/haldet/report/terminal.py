"""The rich terminal table of a run's results: one line per (dataset, model, detector), fitted to the terminal.

Columns are picked by priority until the table fills the width (detector and AUROC always; coverage whenever some
detector scored fewer than all test items; then N, CI, family, AUPR, FPR@95, positives, Cost@100 in seconds, and
in USD where a model is billed: "price unknown" where its price is not declared), so an
80-column terminal shows whole values instead of every cell cut to three letters. Further metrics (`--metrics
prr,ece`) are columns right after AUROC, placed before any optional column. A dataset or model column
appears only when the rows differ in it (else it is in the title). Notes, substitute models, non-default variants
and cells without a result are lines under the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from haldet.evaluation.cost import usd_text
from haldet.evaluation.metrics import MAX_ORIENTATION, MAX_ORIENTATION_NOTE
from haldet.report.marks import detector_marks, mixed_coverage
from haldet.util.tables import print_tables


def _fmt(value: Any, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _cov(value: Any) -> str:
    return "—" if value is None else f"{int(100 * float(value))}%"  # rounded down: 99.9% is not 100%


@dataclass(frozen=True)
class Col:
    header: str
    cell: Callable[[dict[str, dict[str, Any]]], str]
    justify: JustifyMethod = "right"


def _metric(name: str, digits: int = 3) -> Callable[[dict[str, dict[str, Any]]], str]:
    return lambda m: _fmt(m.get(name, {}).get("value"), digits)


def _ci(m: dict[str, dict[str, Any]]) -> str:
    au = m.get("auroc", {})
    return f"{_fmt(au.get('ci_low'), 2)}-{_fmt(au.get('ci_high'), 2)}" if au.get("ci_low") is not None else "—"


_OPTIONAL = {  # in priority order (first added first when space allows)
    "N": Col("N", lambda m: str(m.get("auroc", {}).get("n", ""))),
    "CI": Col("95% CI", _ci),
    "family": Col("family", lambda m: str(m.get("auroc", {}).get("family", "")), "left"),
    "AUPR": Col("AUPR", _metric("aupr")),
    "FPR@95": Col("FPR@95", _metric("fpr95")),
    "pos": Col("pos", lambda m: str(m.get("auroc", {}).get("n_pos", ""))),
    "cost": Col("Cost@100 s", lambda m: _fmt(m.get("auroc", {}).get("cost_at_n"), 2)),
    "usd": Col("Cost@100 $", lambda m: usd_text(m["auroc"]["usd_at_n"]) if "usd_at_n" in m.get("auroc", {}) else "—"),
}
_ORDER = ["dataset", "model", "detector", "family", "AUROC", "max-or", "CI", "cov", "AUPR", "FPR@95", "N", "pos",
          "cost", "usd"]
ORIENTED_HEADER = "max-or.*"
ORIENTED_FOOTNOTE = f"* max-or. = {MAX_ORIENTATION}: max(AUROC, 1 - AUROC), {MAX_ORIENTATION_NOTE}"


METRIC_HEADER = {"prr": "PRR", "prr_50": "PRR@50", "rej_auc": "RejAUC", "aurc": "AURC", "ece": "ECE",
                 "brier": "Brier", "aupr": "AUPR", "fpr95": "FPR@95"}


def print_results(console: Console, rows: list[dict[str, Any]], title: str = "haldet results (test split)",
                  failed: list[tuple[str, str, str]] | None = None, notes: Sequence[Text | str] | None = None,
                  metrics: list[str] | tuple[str, ...] = ()) -> None:
    """The results table on `console`: the columns that fit a terminal, every column when the output is a file or
    a pipe (a log keeps every number); no value is ever cut (`haldet.util.tables`). `notes`: lines said under
    it (e.g. the detectors a default run left out, and why, the judges' coverage)."""
    width = console.size.width if console.is_terminal else UNLIMITED
    table, footer = results_parts(rows, title, failed, width, metrics)
    print_tables(console, [table], [*footer, *(line if isinstance(line, Text) else Text(line, style="dim")
                                               for line in notes or [])])


UNLIMITED = 1 << 20  # a width that leaves every optional column in


def results_parts(rows: list[dict[str, Any]], title: str = "haldet results (test split)",
                  failed: list[tuple[str, str, str]] | None = None, width: int | None = None,
                  metrics: list[str] | tuple[str, ...] = ()) -> tuple[Table, list[Text]]:
    """The table (its optional columns chosen to fit `width`; `metrics` always shown) and the lines under it."""
    width = width or Console().size.width
    cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["dataset"], row["model"], row["detector"]), {})[row["metric"]] = row
    marks = detector_marks(rows)
    keys = list(cells)
    datasets, models = list(dict.fromkeys(k[0] for k in keys)), list(dict.fromkeys(k[1] for k in keys))
    cols: dict[str, Col] = {}
    if len(datasets) > 1:
        cols["dataset"] = Col("dataset", lambda m: str(m.get("auroc", {}).get("dataset", "")), "left")
    if len(models) > 1:
        cols["model"] = Col("model", lambda m: str(m.get("auroc", {}).get("model", "")), "left")
    cols["detector"] = Col("detector", lambda m: _detector(m, marks), "left")
    cols["AUROC"] = Col("AUROC", _metric("auroc"))
    oriented = any(MAX_ORIENTATION in m for m in cells.values())
    if oriented:  # beside the honest AUROC, never instead of it; footnoted
        cols["max-or"] = Col(ORIENTED_HEADER, _metric(MAX_ORIENTATION))
    extra = [m for m in dict.fromkeys(metrics) if m != "auroc"]
    for m in extra:
        cols[m] = Col(METRIC_HEADER.get(m, m), _metric(m))
    coverages = [m.get("auroc", {}).get("coverage") for m in cells.values()]
    if any(c is not None and c < 1.0 for c in coverages):
        cols["cov"] = Col("cov", lambda m: _cov(m.get("auroc", {}).get("coverage")))
    billed = any("usd_at_n" in m.get("auroc", {}) for m in cells.values())  # an API model's money, beside seconds
    for key, col in _OPTIONAL.items():
        if key == "usd" and not billed:
            continue
        trial = {**cols, key: col}
        if _width(trial, cells) <= width:
            cols = trial
    table = Table(title=_title(title, datasets, models), show_lines=False)
    order = [*_ORDER[: _ORDER.index("AUROC") + 1], *extra, *_ORDER[_ORDER.index("AUROC") + 1 :]]
    chosen = [k for k in order if k in cols and (k not in _OPTIONAL or k not in extra)]
    for key in chosen:
        table.add_column(cols[key].header, justify=cols[key].justify,
                         no_wrap=key != "detector")
    for by_metric in cells.values():
        table.add_row(*(cols[k].cell(by_metric) for k in chosen))
    return table, [*([Text(ORIENTED_FOOTNOTE, style="dim")] if oriented else []),
                   *_footer(cells, marks, coverages, failed)]


def judge_lines(cells: list[dict[str, Any]], llm_judge: str | None) -> list[Text]:
    """Under the table, per cell: the label counts, the judges' coverage (share of answers some judge decided) and
    which judge decided how many; when no LLM judge ran (`llm_judge` None), how many answers it would have been
    asked to decide. `cells`: manifest cell entries (`labels`, `annotation`)."""
    lines = []
    for cell in cells:
        counts = cell.get("labels") or {}
        total = sum(counts.values())
        if not total:
            continue
        undecided = counts.get("invalid", 0)
        by = {j: sum(c.values()) for j, c in ((cell.get("annotation") or {}).get("by_judge") or {}).items()
              if sum(c.get(k, 0) for k in c if k != "invalid")}
        text = (f"labels {cell['dataset']} | {cell['model']}: "
                + ", ".join(f"{n} {c}" for c, n in sorted(counts.items()))
                + f"; judge coverage {math.floor(100 * (total - undecided) / total)}% ({total - undecided}/{total}"
                + (": " + ", ".join(f"{j} {n}" for j, n in by.items()) if by else "") + ")")
        if llm_judge is None and undecided:
            text += (f"; no LLM judge ran (none configured: --judge-model, with its API key): it would have been "
                     f"asked to decide the {undecided} undecided answer(s)")
        lines.append(Text(text, style="dim"))
        if cut := (cell.get("data") or {}).get("no_answer"):
            lines.append(Text(f"no answer {cell['dataset']} | {cell['model']}: {cut['n']}/{cut['of']} output(s) were "
                              f"cut off inside their reasoning (labelled invalid, never scored); raise "
                              f"{cut['setting']}", style="yellow"))
    return lines


def _detector(metrics: dict[str, dict[str, Any]], marks: Any) -> str:
    au = metrics.get("auroc") or next(iter(metrics.values()))
    return str(au["detector"]) + marks.label(str(au["model"]), str(au["detector"]), dataset=str(au["dataset"]),
                                             run=str(au.get("run") or ""))


def _width(cols: dict[str, Col], cells: dict[Any, dict[str, dict[str, Any]]]) -> int:
    """The rendered width: each column's widest cell or header plus padding and a border."""
    total = 1
    for col in cols.values():
        total += max([len(col.header), *(len(col.cell(m)) for m in cells.values())]) + 3
    return total


def _title(title: str, datasets: list[str], models: list[str]) -> str:
    fixed = [*(datasets if len(datasets) == 1 else []), *(models if len(models) == 1 else [])]
    return f"{title}: {' | '.join(fixed)}" if fixed else title


def _footer(cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]], marks: Any,
            coverages: list[float | None], failed: list[tuple[str, str, str]] | None) -> list[Text]:
    lines = [Text(line, style="dim") for line in marks.lines()]
    if mixed_coverage(coverages):
        lines.append(Text("cov = share of test items with a valid score; detectors with different coverage are "
                          "evaluated on different items, so compare their AUROCs with care", style="dim"))
    for (dataset, model, detector), metrics in cells.items():
        au = metrics.get("auroc", {})
        note = "; ".join(str(n) for n in (au.get("note"), au.get("cost_note")) if n)
        if note:
            lines.append(Text(f"{detector} ({dataset}, {model}): {note}", style="dim"))
    for dataset, model, why in failed or []:
        lines.append(Text.assemble(("no result", "red"), f" {dataset} | {model}: {why}"))
    return lines
