"""The seed papers' reported numbers, shipped as data: one CSV per paper (`data/<paper>.csv`), one row per number
as printed, with the table it comes from, the model, dataset, detector and metric (mapped to haldet's registered
names where one fits; a row that has no haldet counterpart keeps the paper's name and says `mapped: no`), the
convention the number was computed under, and qualifiers a result row or the run's config must meet to be the
same cell (`train_labels=dw`, `config.verdict.model=GPT-5`, `table=...`).

They are facts, transcribed from the papers' own text; `haldet report RUN --paper NAME` (`haldet.papers.compare`)
puts them beside a run's numbers. This package imports only the core layer and the evaluation layer.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from haldet.errors import HaldetError

DATA_DIR = Path(__file__).parent / "data"
COLUMNS = ("paper", "table", "model", "dataset", "detector", "paper_detector", "paper_dataset", "metric",
           "paper_metric", "value", "scale", "convention", "qualifiers", "mapped", "note")


@dataclass(frozen=True)
class PaperRow:
    """One number a paper reports. `value` is as printed (a percentage when `scale` is 100); `fraction` is the same
    number on haldet's 0..1 scale. An empty `model` means the number does not depend on the run's model (the
    paper names none, or the answers are given data)."""

    paper: str
    table: str
    model: str
    dataset: str
    detector: str
    paper_detector: str
    paper_dataset: str
    metric: str
    paper_metric: str
    printed: str
    scale: int
    convention: str
    mapped: bool
    note: str = ""
    qualifiers: dict[str, str] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return float(self.printed)

    @property
    def fraction(self) -> float:
        return self.value / self.scale

    def label(self) -> str:
        return f"{self.paper} {self.table}: {self.paper_detector or '-'} on {self.paper_dataset} ({self.paper_metric})"


def paper_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.csv"))


def parse_qualifiers(text: str, where: str) -> dict[str, str]:
    """`key=value; key=value` (a value may hold '=' or spaces, not ';')."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise HaldetError(f"bad qualifier {part!r} (expected key=value)", where=where)
        out[key.strip()] = value.strip()
    return out


def _row(raw: dict[str, str], paper: str, where: str) -> PaperRow:
    missing = [c for c in COLUMNS if raw.get(c) is None]
    if missing:
        raise HaldetError(f"missing columns {', '.join(missing)}", where=where)
    if raw["paper"] != paper:
        raise HaldetError(f"row of paper {raw['paper']!r} in the file of {paper!r}", where=where)
    try:
        value, scale = float(raw["value"]), int(raw["scale"])
    except ValueError as exc:
        raise HaldetError(f"value {raw['value']!r} / scale {raw['scale']!r} is not a number", where=where) from exc
    if scale not in (1, 100) or not math.isfinite(value) or not 0 <= value <= scale:
        raise HaldetError(f"value {raw['value']} outside 0..{scale} (scale must be 1 or 100)", where=where)
    if raw["mapped"] not in ("yes", "no"):
        raise HaldetError(f"mapped must be yes or no, not {raw['mapped']!r}", where=where)
    mapped = raw["mapped"] == "yes"
    if mapped and not (raw["detector"] and raw["dataset"] and raw["metric"]):
        raise HaldetError("a mapped row needs haldet's detector, dataset and metric names", where=where)
    if not mapped and not raw["note"]:
        raise HaldetError("an unmapped row must say why in its note", where=where)
    if not raw["table"] or not raw["paper_metric"] or not raw["convention"]:
        raise HaldetError("every row names its table, the paper's metric and the convention", where=where)
    return PaperRow(paper=paper, table=raw["table"], model=raw["model"], dataset=raw["dataset"],
                    detector=raw["detector"], paper_detector=raw["paper_detector"],
                    paper_dataset=raw["paper_dataset"], metric=raw["metric"], paper_metric=raw["paper_metric"],
                    printed=raw["value"], scale=scale, convention=raw["convention"], mapped=mapped,
                    note=raw["note"], qualifiers=parse_qualifiers(raw["qualifiers"], where))


def read_rows(path: Path, paper: str) -> list[PaperRow]:
    """The validated rows of one data file; a duplicate cell (same table, model, dataset, detector, metric and
    qualifiers) is an error, since the comparison could not tell the two apart."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise HaldetError(f"columns {reader.fieldnames} (expected {', '.join(COLUMNS)})", where=str(path))
        rows = [_row(raw, paper, f"{path}:{n + 2}") for n, raw in enumerate(reader)]
    seen: dict[tuple[object, ...], int] = {}
    for n, r in enumerate(rows):
        key = (r.table, r.model, r.dataset, r.detector, r.paper_detector, r.paper_dataset, r.metric,
               tuple(sorted(r.qualifiers.items())))
        if key in seen:
            raise HaldetError(f"row {n + 2} repeats row {seen[key] + 2} ({r.label()})", where=str(path))
        seen[key] = n
    return rows


@cache
def paper_rows(paper: str) -> tuple[PaperRow, ...]:
    """Every reported number of one paper (`haldet.papers.paper_names()`)."""
    path = DATA_DIR / f"{paper}.csv"
    if not paper or "/" in paper or not path.is_file():
        raise HaldetError(f"no reported numbers for paper {paper!r}", where="--paper",
                          hint=f"papers: {', '.join(paper_names())}")
    return tuple(read_rows(path, paper))
