"""HalluLens detection sets: answers judged by `haldet hallulens evaluate`, so every detector can be evaluated on
them (`haldet run --suite hallulens --data-dir OUT/<model>/detection`).

Each row (`OUT/<model>/detection/<task>.jsonl`): `id`, `task`, `prompt`, `response`, `label` (hallucination /
correct / abstention) and, for LongWiki, `units` (claims: `text`, `start`/`end` = offsets of the sentence the claim
was extracted from, `label`). Abstentions are left out by design (counted as filtered). NonExistentRefusal rows
are never abstentions: declining to describe a non-existent entity is the correct answer, accepting it the
hallucination. Claims of one sentence share its offsets, so token-level detectors give them the same score.
"""

from __future__ import annotations

from typing import Any

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, SkipRow, require
from haldet.schema import Category, Instance, SpanLabel

_LABELS = {"hallucination": Category.HALLUCINATION, "correct": Category.CORRECT}


class _HalluLensAnswers(DatasetAdapter):
    source = "answers judged by `haldet hallulens evaluate` (OUT/<model>/detection/<task>.jsonl)"
    license = "as the built set's sources"
    split_order = ("data",)
    required_fields = ("id", "prompt", "response", "label")
    task = ""

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        label = str(require(row, "label"))
        if label == "abstention":
            raise SkipRow("the model abstained (left out of detection, as in the main benchmark)")
        if label not in _LABELS:
            raise BadRow("label", f"must be hallucination, correct or abstention, got {label!r}")
        response = str(require(row, "response"))
        units = []
        for k, unit in enumerate(row.get("units") or []):
            try:
                units.append(SpanLabel(start=int(unit["start"]), end=int(unit["end"]), text=str(unit["text"]),
                                       kind="claim", category=_LABELS[unit["label"]], meta={"index": k}))
            except (KeyError, TypeError, ValueError):
                raise BadRow(f"units[{k}]", "needs start, end, text and label hallucination|correct") from None
        native = str(require(row, "id")).replace("/", ":")
        return self.instance(split, native, question=str(require(row, "prompt")), response=response, units=units,
                             response_label=_LABELS[label],
                             meta={k: row[k] for k in ("task", "gold", "name", "domain") if row.get(k)})


@register("hallulens_precisewikiqa")
class HalluLensPreciseWikiQA(_HalluLensAnswers):
    scenario = "qa_open"
    task_type = "short_answer"
    local_names = ("precisewikiqa",)


@register("hallulens_proxy_qa")
class HalluLensProxyQA(_HalluLensAnswers):
    scenario = "qa_open"
    task_type = "short_answer"
    local_names = ("proxy_qa",)


@register("hallulens_longwiki")
class HalluLensLongWiki(_HalluLensAnswers):
    scenario = "long_form"
    task_type = "long_form"
    local_names = ("longwiki",)


@register("hallulens_nonexistent")
class HalluLensNonExistent(_HalluLensAnswers):
    scenario = "qa_open"
    task_type = "long_form"
    local_names = ("nonexistent",)
