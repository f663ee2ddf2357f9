"""The `annotate` stage: a label for every generated answer, from the judge cascade."""

from __future__ import annotations

from typing import Any

from haldet.config import stage_key
from haldet.judges.cascade import Cascade
from haldet.schema import Label
from haldet.stages.base import CellContext, Item, Stage


class AnnotateStage(Stage):
    name = "annotate"

    def __init__(self, ctx: CellContext) -> None:
        super().__init__(ctx)
        self.cascade = Cascade.from_config(ctx.config.judge)

    def key(self, item: Item) -> str:
        assert item.generation is not None
        return stage_key(self.name, self.cascade.fingerprint(), item.instance.model_dump(mode="json"),
                         item.generation.response)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        out = []
        for item in batch:
            assert item.generation is not None
            out.append(self.cascade.judge(item.instance, item.generation).model_dump(mode="json"))
        return out


def labels_of(records: dict[str, dict[str, Any]]) -> dict[str, Label]:
    return {i: Label.model_validate({k: v for k, v in r.items() if k != "key"}) for i, r in records.items()}
