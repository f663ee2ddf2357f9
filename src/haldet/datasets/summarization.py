"""XSum: one-sentence abstractive summaries of BBC articles (the document is rendered as `Document`).

Besides the hub schema, the authors' release is read as released: a folder of `<bbcid>.summary` files (sections
`[SN]URL[SN]`, `[SN]TITLE[SN]`, `[SN]FIRST-SENTENCE[SN]` = the summary, `[SN]RESTBODY[SN]` = the document) and
the split file `XSum-TRAINING-DEV-TEST-SPLIT-90-5-5.json` ({"train": [ids], "validation": [...], "test": [...]}).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import LINE, Format, RawFile
from haldet.datasets.rows import require
from haldet.errors import HaldetError
from haldet.schema import Instance

_SECTION = re.compile(r"^\[SN\]([A-Z-]+)\[SN\]\s*$", re.MULTILINE)


def parse_summary_file(path: Path) -> dict[str, Any]:
    """One `.summary` file as a hub-schema row {id, document, summary}."""
    text = path.read_text(encoding="utf-8", errors="replace")
    marks = list(_SECTION.finditer(text))
    sections = {m.group(1): text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip()
                for i, m in enumerate(marks)}
    return {"id": path.name.split(".")[0], "document": sections.get("RESTBODY", ""),
            "summary": sections.get("FIRST-SENTENCE", ""), LINE: 1, "_file": path.name}


class SummaryFiles(Sequence[dict[str, Any]]):
    """The release's .summary files as rows, each parsed when the load reaches it (226k files; a limited run
    reads only the rows it uses)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [parse_summary_file(p) for p in self.paths[index]]
        return parse_summary_file(self.paths[index])


def _no_flat_file(raw: RawFile) -> None:
    return None  # the release's .summary files are read per folder (XSum.local_rows), not as a table


@register("xsum")
class XSum(DatasetAdapter):
    scenario = "summarization"
    task_type = "summarization"
    source = "EdinburghNLP/xsum"
    license = "MIT"
    hub_id = "EdinburghNLP/xsum"
    required_fields = ("id", "document", "summary")
    originals = (Format("XSum release", "a folder of <bbcid>.summary files ([SN]FIRST-SENTENCE[SN] = summary, "
                        "[SN]RESTBODY[SN] = document) with XSum-TRAINING-DEV-TEST-SPLIT-90-5-5.json",
                        _no_flat_file),)

    def local_rows(self) -> Source:
        paths = self.local_paths()
        summaries = [p for p in paths if p.name.endswith(".summary")]
        if not summaries:
            return super().local_rows()
        split_file = next((p for p in paths if p.name.upper().startswith("XSUM-TRAINING-DEV-TEST-SPLIT")), None)
        by_id = {p.name.split(".")[0]: p for p in summaries}
        if split_file is None:
            ids, split = sorted(by_id), self.file_split
        else:
            try:
                splits = {k: [str(i) for i in v] for k, v in json.loads(split_file.read_text()).items()}
            except (json.JSONDecodeError, AttributeError, TypeError):
                raise HaldetError("XSum split file is not {split: [ids]} JSON", where=str(split_file)) from None
            split = self.pick_split([s for s in splits if any(i in by_id for i in splits[s])], str(split_file))
            ids = [i for i in splits[split] if i in by_id]
        return Source(f"{summaries[0].parent} ({len(ids)} .summary files)", split,
                      SummaryFiles([by_id[i] for i in ids]))

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        return self.instance(split, row.get("id") or index, context=str(require(row, "document")).strip(),
                             question="Summarize the document above in a single sentence.",
                             references=[str(require(row, "summary")).strip()])
