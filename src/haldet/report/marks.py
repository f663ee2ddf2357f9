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


@dataclass
class Marks:
    """Numbered footnotes and which (model, detector) they belong to."""

    notes: list[str] = field(default_factory=list)
    refs: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def of(self, model: str, detector: str) -> list[int]:
        return self.refs.get((model, detector), [])

    def label(self, model: str, detector: str, fmt: str = " [{}]") -> str:
        """The footnote reference to append to a detector's name ('' when it has none)."""
        nums = self.of(model, detector)
        return fmt.format(",".join(map(str, nums))) if nums else ""

    def lines(self, fmt: str = "[{n}] {text}") -> list[str]:
        return [fmt.format(n=i + 1, text=t) for i, t in enumerate(self.notes)]


def detector_marks(rows: Sequence[Mapping[str, Any]]) -> Marks:
    """Footnotes from the result rows' `variant`/`default_variant` and `substitute` columns (rows of older runs
    without them get none)."""
    marks = Marks()
    for row in rows:
        det, model = str(row.get("detector")), str(row.get("model"))
        texts = []
        if row.get("variant") and row.get("default_variant") is False:
            texts.append(f"{det}: non-default variant '{row['variant']}'")
        if row.get("substitute"):
            texts.append(f"{det}: substitute model {row['substitute']} (the requested model was not available)")
        if row.get("thin"):
            texts.append(f"{row.get('dataset')} | {model}: {row['thin']}")
        for text in texts:
            if text not in marks.notes:
                marks.notes.append(text)
            num = marks.notes.index(text) + 1
            refs = marks.refs.setdefault((model, det), [])
            if num not in refs:
                refs.append(num)
    return marks
