"""XSum: one-sentence abstractive summaries of BBC articles (the document is rendered as `Document`)."""

from __future__ import annotations

from typing import Any

from haldet.datasets.base import DatasetAdapter, register, require
from haldet.schema import Instance


@register("xsum")
class XSum(DatasetAdapter):
    scenario = "summarization"
    task_type = "summarization"
    source = "EdinburghNLP/xsum"
    license = "MIT"
    hub_id = "EdinburghNLP/xsum"
    required_fields = ("id", "document", "summary")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        return self.instance(split, row.get("id") or index, context=str(require(row, "document")).strip(),
                             question="Summarize the document above in a single sentence.",
                             references=[str(require(row, "summary")).strip()])
