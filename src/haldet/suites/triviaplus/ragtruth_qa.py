"""RAGTruth-QA as given responses (TRIVIA+'s Table 4 companion), read from the RAGTruth release files.

The release's `response.jsonl` (one labelled response per row: `id`, `source_id`, `model`, `response`, `labels`
= hallucinated spans with `start`/`end`/`text`/`label_type`, `split` train/test, `quality`) is joined with
`source_info.jsonl` (`source_id`, `task_type`, `source_info` = question + passages for QA) on `source_id`.
Only the QA task is kept, one item per response, as RAGTruth's own baseline does: responses whose `quality` is
not `good` are left out by design (`keep_quality`). A response is a hallucination when it carries at least one
labelled span (the release's response-level rule); the spans become span units, their conflict / baseless kind
the 3-way label (contradicted beats not-mentioned). The release's test split is the test part; its train split
is cut 80/20 into train and validation by `source_id` (seeded), as the TRIVIA+ paper does, so no question's
passages are in two parts.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from haldet.datasets.adapter import Source
from haldet.datasets.base import register
from haldet.datasets.rag import RAGTruth
from haldet.datasets.rows import BadRow, SkipRow, require
from haldet.errors import HaldetError
from haldet.schema import Category, Instance, SpanLabel
from haldet.suites.triviaplus.dataset import interleaved_order

INSTRUCTION = ("Answer the question using only the passages in the context. If they do not contain the answer, "
               "say so.")
VAL_SHARE = 0.2  # of the release's train sources, held out for validation (the paper's 80/20)


def span_kind(label_type: str) -> str:
    """`contradicted` for RAGTruth's conflict spans, `not-mentioned` for its baseless-information spans."""
    low = label_type.lower()
    if "conflict" in low:
        return "contradicted"
    if "baseless" in low:
        return "not-mentioned"
    raise BadRow("labels", f"unknown label_type {label_type!r} (RAGTruth has Evident/Subtle Conflict and "
                           f"Evident/Subtle Baseless Info)")


@register("ragtruth_qa")
class RAGTruthQA(RAGTruth):
    """One item per RAGTruth QA response, labelled by its human spans, in the release's own train/test split."""

    source = "RAGTruth release files, QA task (github.com/ParticleMedia/RAGTruth, dataset/)"
    split_order = ("all",)
    params: ClassVar[dict[str, Any]] = {**RAGTruth.params, "keep_quality": ["good"]}

    def _join(self, responses: list[dict[str, Any]], infos: list[dict[str, Any]], origin: str) -> Source:
        """Every response of a QA source, with its source's fields; release splits other than train/test fail."""
        qa = {str(i.get("source_id")): i for i in infos if str(i.get("task_type")) == "QA"}
        if not qa:
            raise HaldetError("no QA source in the RAGTruth source file (task_type QA)", where=origin,
                              hint="pass the release's dataset/source_info.jsonl")
        rows = []
        for r in responses:
            info = qa.get(str(r.get("source_id")))
            if info is None:
                continue
            rows.append({**r, "task_type": "QA", "source_info": info.get("source_info"),
                         "rag_source": info.get("source", "")})
        splits = {str(r.get("split")) for r in rows}
        if not rows or not splits <= {"train", "test"}:
            raise HaldetError(f"RAGTruth QA responses must have split train or test (found {sorted(splits)})",
                              where=origin, hint="pass the release's dataset/response.jsonl unchanged")
        return Source(origin, "all", rows)

    def ordered_units(self, rows: Sequence[dict[str, Any]], seed: int) -> list[tuple[int, int | None]]:
        """Parts first (test = the release's test; 20% of the train sources, seeded, = validation), then an
        order whose every prefix holds the three parts in proportion."""
        train_sources = sorted({str(r.get("source_id")) for r in rows if r.get("split") == "train"})
        rng = random.Random(seed)
        rng.shuffle(train_sources)
        val = set(train_sources[: round(len(train_sources) * VAL_SHARE)])
        self._parts = ["test" if r.get("split") == "test" else "val" if str(r.get("source_id")) in val
                       else "train" for r in rows]
        return interleaved_order(self._parts, seed)

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        quality = str(row.get("quality") or "good")
        if quality not in self.options["keep_quality"]:
            raise SkipRow(f"quality {quality!r}")
        info = require(row, "source_info")
        if not isinstance(info, dict):
            raise BadRow("source_info", "a QA source must hold 'question' and 'passages'")
        answer = str(require(row, "response"))
        labels = row.get("labels") or []
        if not isinstance(labels, list):
            raise BadRow("labels", "must be a list of spans")
        units, kinds = [], []
        for span in labels:
            start, end = int(require(span, "start")), int(require(span, "end"))
            if not 0 <= start <= end <= len(answer):
                raise BadRow("labels", f"span [{start}, {end}) outside the {len(answer)}-character response")
            kind = span_kind(str(require(span, "label_type")))
            kinds.append(kind)
            units.append(SpanLabel(kind="span", start=start, end=end, text=answer[start:end],
                                   category=Category.HALLUCINATION,
                                   meta={"label_type": span["label_type"], "implicit_true": span.get("implicit_true"),
                                         "due_to_null": span.get("due_to_null"), "note": span.get("meta", "")}))
        three = ("contradicted" if "contradicted" in kinds else "not-mentioned" if kinds else "faithful")
        part = self._parts[index]
        passages = str(require(info, "passages"))
        return self.instance(part, require(row, "id"), instruction=INSTRUCTION, context=passages,
                             question=str(require(info, "question")), response=answer, units=units,
                             response_label=Category.HALLUCINATION if units else Category.CORRECT, split=part,
                             meta={"generator": str(require(row, "model")), "domain": "MS-MARCO",
                                   "source_name": str(row.get("rag_source") or "MARCO"),
                                   "source_id": str(row["source_id"]), "context_chars": len(passages),
                                   "label_3way": three, "release_split": str(row.get("split"))})
