"""VeriGray (Ding et al.): LLM summaries of documents, each sentence labelled with one of seven ordered
faithfulness classes (`haldet.suites.verigray.labels`).

Source rows (hub `Ding-Qiang/veri-gray`, or `--data-dir` files in the same schema): `question` (the source
document), `answer` (the summary), `generator` (the model that wrote it), `sentences`: a list of {`text`,
`range` [start, end] (character offsets into `answer`), `annotation`, `rationale`}. The summary is the given
response (`Instance.response`): it is teacher-forced, never regenerated. Sentences become sentence units with
offsets; the binary label is protocol 1's (Contradicting/Fabricated = hallucination, Implicitly-/Explicitly-
Supported = correct, the rest `invalid`, i.e. left out of binary metrics); `grade` = 6 - faithfulness degree
(the core counts grades from the best: 0 = Explicitly-Supported, 6 = Contradicting) with the class in
`grade_name`; the readings of an Ambiguous sentence, the raw annotation and the rationale go to the unit's meta.
`meta["document_id"]` (a digest of the document) groups the summaries of one document, so a split never puts
one document in two parts.

A sentence whose `range` does not cover its `text` is re-aligned by searching the text after the previous
sentence (counted in `meta["realigned"]`); one that cannot be found, or an unknown label, stops the load with
a message naming the row: a new label is never mapped to a default class.
"""

from __future__ import annotations

import hashlib
from typing import Any

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, require
from haldet.errors import HaldetError
from haldet.schema import Category, Instance, SpanLabel
from haldet.suites.verigray.labels import CLASSES, UnknownLabel, parse_annotation

TOP = len(CLASSES) - 1
BINARY = {1: Category.HALLUCINATION, 0: Category.CORRECT}
INSTRUCTION = "Write a short summary of the passage that covers its main points, using only what the passage says."


def document_id(document: str) -> str:
    return hashlib.sha256(document.strip().encode()).hexdigest()[:16]


def _offsets(answer: str, text: str, span: Any, after: int, field: str) -> tuple[int, int, bool]:
    """(start, end, realigned) of one sentence in the summary."""
    if isinstance(span, list | tuple) and len(span) == 2 and all(isinstance(v, int) for v in span):
        start, end = span
        if 0 <= start <= end <= len(answer) and answer[start:end].strip() == text.strip():
            return start, end, False
    found = answer.find(text.strip(), after)
    if found < 0:
        found = answer.find(text.strip())
    if found < 0:
        raise BadRow(field, f"sentence text {text[:60]!r} is neither at range {span} nor anywhere in 'answer'")
    return found, found + len(text.strip()), True


@register("verigray")
class VeriGray(DatasetAdapter):
    scenario = "summarization"
    task_type = "summarization"
    source = "Ding-Qiang/veri-gray (VeriGray, sentence-level faithfulness, 7 classes)"
    license = "see the dataset card"
    hub_id = "Ding-Qiang/veri-gray"
    split_order = ("test", "train", "data")
    local_names = ("veri-gray", "verigray")
    required_fields = ("question", "answer", "generator", "sentences")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        document = str(require(row, "question")).strip()
        answer = str(require(row, "answer"))
        sentences = require(row, "sentences")
        if not isinstance(sentences, list):
            raise BadRow("sentences", "must be a list of {text, range, annotation, rationale}")
        units: list[SpanLabel] = []
        realigned = 0
        after = 0
        for k, sent in enumerate(sentences):
            field = f"sentences[{k}]"
            if not isinstance(sent, dict):
                raise BadRow(field, "must be an object {text, range, annotation, rationale}")
            text = str(require(sent, "text"))
            raw_label = require(sent, "annotation")
            try:
                label = parse_annotation(str(raw_label))
            except UnknownLabel as exc:
                raise HaldetError(f"{field}.annotation: {exc}",
                                  where=f"{self.name} data ({split})",
                                  hint=f"labels must be one of {', '.join(CLASSES)} (or 'A / B' readings of an "
                                       "Ambiguous sentence); extend haldet.suites.verigray.labels.ALIASES for a "
                                       "new spelling") from None
            start, end, moved = _offsets(answer, text, sent.get("range"), after, f"{field}.range")
            realigned += moved
            after = end
            category = Category.INVALID if label.binary is None else BINARY.get(label.binary, Category.INVALID)
            units.append(SpanLabel(kind="sentence", start=start, end=end, text=answer[start:end], category=category,
                                   grade=TOP - label.grade, grade_name=label.name,
                                   meta={"readings": [CLASSES[g] for g in label.readings],
                                         "annotation": str(raw_label),
                                         "rationale": str(sent.get("rationale") or "")}))
        native = row.get("id") if row.get("id") not in (None, "") else index
        return self.instance(split, native, instruction=INSTRUCTION, context=document, response=answer, units=units,
                             meta={"generator": str(require(row, "generator")), "document_id": document_id(document),
                                   "realigned": realigned})
