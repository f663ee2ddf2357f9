"""example_capitals: eight short capital-city questions shipped in this package (registered on import)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from haldet.datasets.base import DatasetAdapter, register, require
from haldet.schema import Instance


@register("example_capitals")
class ExampleCapitals(DatasetAdapter):
    scenario = "qa_open"
    task_type = "short_answer"
    source = "haldet-plugin-example (capitals.jsonl)"
    license = "CC0"
    split_order = ("data",)
    required_fields = ("id", "question", "answer")

    def packaged_path(self) -> Path | None:
        return Path(__file__).with_name("capitals.jsonl")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        return self.instance(split, require(row, "id"), instruction="Answer with the city name only.",
                             question=require(row, "question"), references=[require(row, "answer")])
