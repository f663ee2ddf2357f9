"""OpenHalDet's Table 2 in the paper's own convention: a separately labelled export, never ranked, never mixed.

The paper's AUROCs are oriented on the test labels (appendix J: max(AUROC, 1 - AUROC) per dataset), which uses the
labels a detector must not see, so haldet's own tables refuse to average or rank them (`refuse_max_orientation`).
To compare a run with the paper's Table 2 anyway, this module builds that table apart from the honest ones, under
its own file names (`paper_openhaldet_table2.md/.csv`) and a title saying what it is: per backbone, the detectors
grouped by family (with family averages), one column per scenario (QA, RAG, Sum., Math, Sci., Code, Agent, Multi.)
and the overall average over datasets ("Avg."), each value the mean of max(AUROC, 1 - AUROC) over the paper's
datasets of that column that the run holds (a dagger when it holds fewer than the paper's column), and beside it
the paper's value of the same backbone, detector and column (Table 9's scenario columns, which hold Table 2's
averages per backbone) when the row is the paper's cell (its model, the preset's variant, no substitute).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haldet.evaluation.aggregate import FAMILY_TITLE
from haldet.papers import paper_rows
from haldet.papers.compare import model_key, paper_variants

PAPER = "openhaldet"
LABEL = ("AUROC (%) oriented on the test labels: max(AUROC, 1 - AUROC) per dataset, then averaged, as the OpenHalDet "
         "paper's tables (appendix J). Not a valid detector score (it uses the test labels): never ranked, bolded or "
         "mixed with the honest averages of tables.md")
# the paper's Table 2 columns, the datasets each averages (Table 1; "Avg.": all 17, as Table 9's overall column)
PAPER_COLUMNS: dict[str, tuple[str, ...]] = {
    "QA": ("arc_challenge", "commonsenseqa", "triviaqa", "truthfulqa", "squad_v2", "hotpotqa", "coqa", "halueval_qa"),
    "RAG": ("ragtruth",), "Sum.": ("xsum",), "Math": ("gsm8k", "svamp"), "Sci.": ("theoremqa",),
    "Code": ("humaneval", "mbpp"), "Agent": ("xlam",), "Multi.": ("belebele",)}
AVG = "Avg."
PAPER_DATASETS = tuple(d for ds in PAPER_COLUMNS.values() for d in ds)
COLUMNS = (*PAPER_COLUMNS, AVG)
# the paper row holding a column's value: a scenario average, or the one dataset of a one-dataset column
PAPER_CELL = {"QA": "QA Avg.", "Math": "Math Avg.", "Code": "Code Avg.", AVG: "Avg.",
              **{c: ds[0] for c, ds in PAPER_COLUMNS.items() if len(ds) == 1}}
FAMILY_AVG = "Family Avg."
PAPER_FAMILY = {"black": "black-box family avg", "gray": "gray-box family avg", "white": "white-box family avg"}
DAGGER = "†"


@dataclass
class Cell:
    """One oriented average: `value` (0..1) over `n` of the column's `expected` datasets; the paper's value."""

    value: float | None
    n: int
    expected: int
    paper: float | None = None


@dataclass
class Table2Row:
    model: str
    family: str
    detector: str  # a detector, or FAMILY_AVG
    variant: str = ""
    substitute: str = ""
    paper_cell: bool = False  # the paper's cell: its backbone, its preset's variant, no substitute
    cells: dict[str, Cell] = field(default_factory=dict)


def _paper_values() -> dict[tuple[str, str, str], float]:
    """(model key, paper detector, paper dataset) -> the paper's value (0..1) of Table 9."""
    return {(model_key(p.model), p.detector, p.dataset): p.fraction for p in paper_rows(PAPER) if p.table == "Table 9"}


def _cells(values: Mapping[str, float]) -> dict[str, Cell]:
    out = {}
    for col, members in (*PAPER_COLUMNS.items(), (AVG, PAPER_DATASETS)):
        have = [values[d] for d in members if d in values]
        out[col] = Cell(sum(have) / len(have) if have else None, len(have), len(members))
    return out


def table2(rows: Sequence[Mapping[str, Any]]) -> tuple[list[Table2Row], list[str]]:
    """The oriented Table 2 rows of a run's results, and the run's datasets outside the paper's (left out)."""
    oriented: dict[tuple[str, str], dict[str, float]] = {}
    info: dict[tuple[str, str], Mapping[str, Any]] = {}
    outside: list[str] = []
    for r in rows:
        if r.get("metric") != "auroc" or (r.get("level") or "response") != "response":
            continue
        ds, key = str(r.get("dataset")), (str(r.get("model")), str(r.get("detector")))
        if ds not in PAPER_DATASETS:
            if ds not in outside:
                outside.append(ds)
            continue
        info.setdefault(key, r)
        v = r.get("value")
        if v is None or r.get("thin") or not math.isfinite(float(v)):
            continue
        oriented.setdefault(key, {})[ds] = max(float(v), 1.0 - float(v))
    paper, variants = _paper_values(), paper_variants(PAPER)
    out: list[Table2Row] = []
    for model in dict.fromkeys(m for m, _ in info):
        mk = model_key(model)
        dets = [d for m, d in info if m == model]
        by_family: dict[str, list[Table2Row]] = {}
        for det in dets:
            r = info[(model, det)]
            row = Table2Row(model, str(r.get("family") or "?"), det, str(r.get("variant") or ""),
                            str(r.get("substitute") or ""), cells=_cells(oriented.get((model, det), {})))
            want = variants.get(det)
            row.paper_cell = not row.substitute and not (want and row.variant and row.variant != want)
            for col, cell in row.cells.items():
                cell.paper = paper.get((mk, det, PAPER_CELL[col])) if row.paper_cell else None
            by_family.setdefault(row.family, []).append(row)
        for fam in sorted(by_family, key=lambda f: [*PAPER_FAMILY, f].index(f)):
            members = by_family[fam]
            out += members
            avg = Table2Row(model, fam, FAMILY_AVG, paper_cell=all(m.paper_cell for m in members))
            for col in COLUMNS:
                have = [v for m in members if (v := m.cells[col].value) is not None]
                paper_value = paper.get((mk, PAPER_FAMILY.get(fam, ""), PAPER_CELL[col]))
                avg.cells[col] = Cell(sum(have) / len(have) if have else None, len(have), len(members),
                                      paper_value if avg.paper_cell else None)
            out.append(avg)
    return out, outside


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def _cell_text(cell: Cell) -> str:
    ours = _pct(cell.value) + (DAGGER if cell.value is not None and cell.n < cell.expected else "")
    return ours + (f" ({_pct(cell.paper)})" if cell.paper is not None else "")


def table2_markdown(t2: Sequence[Table2Row], outside: Sequence[str] = ()) -> str:
    lines = ["# Table 2 in the paper's convention (OpenHalDet)", "", f"**{LABEL}.**", "",
             "Each cell: ours, then (the paper's value for the same backbone, detector and column, from Table 9's "
             "scenario columns) where the row is the paper's cell: its backbone, the preset's detector variant, no "
             f"substituted model. {DAGGER}: the mean of fewer datasets than the paper's column averages "
             "(QA 8, Math 2, Code 2, Avg. 17; a family average: fewer detectors than ran). — : no value.", ""]
    for model in dict.fromkeys(r.model for r in t2):
        rows = [r for r in t2 if r.model == model]
        lines += [f"## Backbone: {model}", "", "| Method | variant | " + " | ".join(COLUMNS) + " |",
                  "|---|---|" + "---:|" * len(COLUMNS)]
        family = None
        for r in rows:
            if r.family != family:
                family = r.family
                lines.append(f"| *{FAMILY_TITLE.get(family, family)}* |  |" + " |" * len(COLUMNS))
            name = r.detector if r.detector != FAMILY_AVG else f"*{FAMILY_AVG}*"
            variant = r.variant + (f"; substitute {r.substitute}" if r.substitute else "")
            lines.append(f"| {name} | {variant} | " + " | ".join(_cell_text(r.cells[c]) for c in COLUMNS) + " |")
        lines.append("")
    if not t2:
        lines.append("No AUROC of a paper dataset in this run: nothing to tabulate.")
    if outside:
        lines.append(f"Datasets of this run outside the paper's 17 (left out): {', '.join(outside)}.")
    return "\n".join(lines).rstrip() + "\n"


def table2_csv(t2: Sequence[Table2Row]) -> str:
    handle = io.StringIO()
    fields = ("model", "family", "detector", "variant", "substitute", "column", "ours_oriented", "n_datasets",
              "paper_datasets", "paper", "convention")
    writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in t2:
        for col in COLUMNS:
            c = r.cells[col]
            writer.writerow({"model": r.model, "family": r.family, "detector": r.detector, "variant": r.variant,
                             "substitute": r.substitute, "column": col, "ours_oriented": c.value, "n_datasets": c.n,
                             "paper_datasets": c.expected, "paper": c.paper, "convention": "oriented on test labels"})
    return handle.getvalue()


def write_table2(out: Path, rows: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Path]]:
    """`paper_openhaldet_table2.md` and `.csv` in `out`; returns the Markdown."""
    t2, outside = table2(rows)
    text = table2_markdown(t2, outside)
    out.mkdir(parents=True, exist_ok=True)
    md, table = out / f"paper_{PAPER}_table2.md", out / f"paper_{PAPER}_table2.csv"
    md.write_text(text)
    table.write_text(table2_csv(t2))
    return text, {"paper_table2_md": md, "paper_table2_csv": table}
