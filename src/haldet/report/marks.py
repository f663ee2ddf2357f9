"""What every results table says beside its numbers, shared by the terminal, Markdown/LaTeX and HTML reports:
coverage when below 100%, footnotes for detectors that ran with a substitute model or a non-default variant, and
a flag where a ranking compares detectors scored on different item subsets."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COVERAGE_NOTE = ("(NN%) after a value: coverage, the share of test items with a valid score, shown when below 100%; "
                 "the metric is computed over those items only")
SUBSET_MARK = "§"
SUBSET_NOTE = (f"{SUBSET_MARK}: this best value ranks detectors scored on different item subsets (their coverages "
               "differ), so the comparison is not on the same items")


def coverage_suffix(coverage: Any) -> str:
    """' (83%)' for a coverage below 100% (rounded down, so 99.9% never reads as 100%); '' otherwise."""
    if coverage is None or not math.isfinite(float(coverage)) or float(coverage) >= 1.0:
        return ""
    return f" ({math.floor(100 * float(coverage))}%)"


def mixed_coverage(coverages: Iterable[float | None]) -> bool:
    """Whether the compared values come from different coverages (unknown coverage counts as different)."""
    seen = {None if c is None else round(float(c), 6) for c in coverages}
    return len(seen) > 1


CellKey = tuple[str, str, str, str]  # (run, dataset, model, detector)


@dataclass
class Marks:
    """Numbered footnotes and the result cells (run, dataset, model, detector) they belong to. A note about a whole
    detector (its variant, a substitute model) marks its name; a note about one cell (a thin test split) marks that
    cell only, so a merged report never puts one run's or dataset's caveat on another's numbers."""

    notes: list[str] = field(default_factory=list)
    refs: dict[CellKey, list[int]] = field(default_factory=dict)
    cell_level: set[int] = field(default_factory=set)

    def of(self, model: str, detector: str, dataset: str | None = None, run: str | None = None) -> list[int]:
        """The note numbers of (model, detector), narrowed to one dataset and run when given. Without a dataset
        (a table row that spans datasets) only the detector-wide notes: a cell's caveat marks that cell alone."""
        nums: set[int] = set()
        for (r, d, m, det), refs in self.refs.items():
            if m == model and det == detector and dataset in (None, d) and run in (None, r):
                nums.update(n for n in refs if dataset is not None or n not in self.cell_level)
        return sorted(nums)

    def cell(self, model: str, detector: str, dataset: str, run: str | None = None) -> list[int]:
        """Only the cell-level notes of one (run, dataset, model, detector): the marks that go beside its value."""
        return [n for n in self.of(model, detector, dataset, run) if n in self.cell_level]

    def label(self, model: str, detector: str, fmt: str = " [{}]", dataset: str | None = None,
              run: str | None = None) -> str:
        """The footnote reference to append to a detector's name ('' when it has none)."""
        nums = self.of(model, detector, dataset, run)
        return fmt.format(",".join(map(str, nums))) if nums else ""

    def cell_label(self, model: str, detector: str, dataset: str, fmt: str = " [{}]", run: str | None = None) -> str:
        """The reference to append to one cell's value ('' when the cell has no caveat of its own)."""
        nums = self.cell(model, detector, dataset, run)
        return fmt.format(",".join(map(str, nums))) if nums else ""

    def lines(self, fmt: str = "[{n}] {text}") -> list[str]:
        return [fmt.format(n=i + 1, text=t) for i, t in enumerate(self.notes)]


def detector_marks(rows: Sequence[Mapping[str, Any]]) -> Marks:
    """Footnotes from the result rows' `variant`/`default_variant` and `substitute` columns (detector-wide) and
    `thin` column (one cell); rows of older runs without them get none."""
    marks = Marks()
    for row in rows:
        det, model = str(row.get("detector")), str(row.get("model"))
        key = (str(row.get("run") or ""), str(row.get("dataset")), model, det)
        texts = []
        if row.get("variant") and row.get("default_variant") is False:
            texts.append((f"{det}: non-default variant '{row['variant']}'", False))
        if row.get("substitute"):
            texts.append((f"{det}: substitute model {row['substitute']} (the requested model was not available)",
                          False))
        if row.get("thin"):
            run = f"{row['run']}: " if row.get("run") else ""
            texts.append((f"{run}{row.get('dataset')} | {model}: {row['thin']}", True))
        for text, one_cell in texts:
            if text not in marks.notes:
                marks.notes.append(text)
            num = marks.notes.index(text) + 1
            if one_cell:
                marks.cell_level.add(num)
            refs = marks.refs.setdefault(key, [])
            if num not in refs:
                refs.append(num)
    return marks
