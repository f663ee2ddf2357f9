"""HalluEntity (Yeh et al., 2025): ChatGPT biographies with entity-level labels.

Each row: `prompt` (the biography request), `response` (the generated biography), `entity` (the response's
entities in reading order, as strings) and `entity_label` (one per entity, True = NOT hallucinated). The response
ships with the data: the suite teacher-forces it through a proxy model (`haldet run --suite halluentity`).
Entities are aligned to character offsets by sequential search (`haldet.text.units.align_sequential`); an entity not
found is kept out of the units and counted in `meta["unaligned"]` (the suite reports the total).
157 rows, ~18,785 entities, ~15% hallucinated (MIT license).
"""

from __future__ import annotations

from typing import Any

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, require
from haldet.schema import Category, Instance, SpanLabel
from haldet.text.units import align_sequential

_TRUE = {"true", "t", "1", "yes"}
_FALSE = {"false", "f", "0", "no"}


def not_hallucinated(value: Any, field: str) -> bool:
    """An `entity_label` value: True/False (also "True"/"False" strings and 1/0)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise BadRow(field, f"must be true or false (True = not hallucinated), got {value!r}")


@register("halluentity")
class HalluEntity(DatasetAdapter):
    scenario = "long_form"
    task_type = "long_form"
    source = "samuelyeh/HalluEntity (ChatGPT biographies, entity-level labels from FActScore atomic facts)"
    license = "MIT"
    hub_id = "samuelyeh/HalluEntity"
    split_order = ("train", "test")
    local_names = ("halluentity", "HalluEntity")
    required_fields = ("prompt", "response", "entity", "entity_label")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        prompt = str(require(row, "prompt")).strip()
        response = str(require(row, "response"))
        entities = require(row, "entity")
        labels = require(row, "entity_label")
        if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
            raise BadRow("entity", "must be a list of strings")
        if not isinstance(labels, list):
            raise BadRow("entity_label", "must be a list of booleans (True = not hallucinated)")
        if len(labels) != len(entities):
            raise BadRow("entity_label", f"{len(labels)} labels for {len(entities)} entities")
        ok = [not_hallucinated(v, f"entity_label[{k}]") for k, v in enumerate(labels)]
        units, unaligned = [], []
        for k, (text, span, good) in enumerate(zip(entities, align_sequential(response, entities), ok, strict=True)):
            if span is None:
                unaligned.append({"index": k, "entity": text, "not_hallucinated": good})
                continue
            units.append(SpanLabel(start=span[0], end=span[1], text=response[span[0] : span[1]], kind="entity",
                                   category=Category.CORRECT if good else Category.HALLUCINATION,
                                   meta={"index": k}))
        native = row.get("id") if row.get("id") not in (None, "") else index
        return self.instance(split, native, question=prompt, response=response, units=units,
                             meta={"n_entities": len(entities), "unaligned": unaligned})
