"""HalluLens detection sets: answers judged by `haldet hallulens evaluate`, so every detector can be evaluated on
them (`haldet run --suite hallulens --data-dir OUT/<model>/detection`).

Each row (`OUT/<model>/detection/<task>.jsonl`): `id`, `task`, `prompt`, `response`, `label` (hallucination /
correct / abstention) and, for LongWiki, `title` (the page the question was written from) and `units` (claims:
`text` = the claim's words, `start`/`end` = offsets of the sentence the claim was extracted from, `label`, `by` =
who decided it: `rule:in_passage` or the judge's id). Abstentions are left out by design (counted as filtered).
NonExistentRefusal rows are never abstentions: declining to describe a non-existent entity is the correct answer,
accepting it the hallucination.

LongWiki claims are located inside their sentence as the longform suite locates FActScore's facts
(`haldet.text.claim_spans.map_claim`: verbatim, else the tightest window of the claim's content words); a claim not
found there keeps its sentence's span (`meta.span = "sentence"`, counted in the item's `meta.sentence_spans`).
Each claim keeps its words (`meta.claim`) and its label's source in `meta.labels` (`{data, source: data, by}`,
hidden from detectors), and the item its page title as `meta.topic`; with `dataset_params.hallulens_longwiki.
knowledge` (the page file `haldet hallulens` reads) the page's text is the item's reference (never in the prompt),
the evidence of the longform suite's `labels: verify | nli`. So LongWiki answers run through the longform flow
(`haldet run --dataset hallulens_longwiki --level claim`, docs/longform.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, SkipRow, require
from haldet.schema import LABEL_META, Category, Instance, SpanLabel
from haldet.suites.hallulens.sources import page_texts
from haldet.text.claim_spans import map_claim

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
        units, n_sentence_spans = self.claims(response, row.get("units") or [])
        native = str(require(row, "id")).replace("/", ":")
        meta = {k: row[k] for k in ("task", "gold", "name", "domain") if row.get(k)}
        if units:
            labelled = [u.binary for u in units if u.binary is not None]
            meta.update(topic=str(row.get("title") or ""), sentence_spans=n_sentence_spans,
                        **{LABEL_META: {"unsupported_share": sum(labelled) / len(labelled) if labelled else None}})
        references = [p for p in [self.page(str(row.get("title") or ""))] if p]
        return self.instance(split, native, question=str(require(row, "prompt")), response=response, units=units,
                             response_label=_LABELS[label], references=references, meta=meta)

    def claims(self, response: str, rows: list[Any]) -> tuple[list[SpanLabel], int]:
        """The claim units, each located inside the sentence it was extracted from (its sentence's span when its
        words are not found there), and how many kept their sentence's span."""
        units, n_sentence = [], 0
        for k, unit in enumerate(rows):
            try:
                start, end, text, label = int(unit["start"]), int(unit["end"]), str(unit["text"]), unit["label"]
                category = _LABELS[label]
            except (KeyError, TypeError, ValueError):
                raise BadRow(f"units[{k}]", "needs start, end, text and label hallucination|correct") from None
            if not 0 <= start < end <= len(response):
                raise BadRow(f"units[{k}]", f"offsets {start}..{end} are not a span of the {len(response)}-character "
                                            "response")
            found = map_claim(response, text, start, end)
            n_sentence += found is None
            s, e = found if found is not None else (start, end)
            units.append(SpanLabel(start=s, end=e, text=response[s:e], kind="claim", category=category, meta={
                "index": k, "claim": text, "sentence": [start, end], "span": "claim" if found else "sentence",
                LABEL_META: {"data": label, "source": "data", "by": unit.get("by")}}))
        return units, n_sentence

    def page(self, title: str) -> str:
        """The page file's text titled `title` ("" without `knowledge` or such a page)."""
        return self._pages().get(title, "") if title else ""

    def _pages(self) -> dict[str, str]:
        return {}


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
    # the page file `haldet hallulens build|evaluate` read (title + document|markdown|text): the page titled as
    # the item's `title` becomes its reference, the evidence the longform suite's claim labels read
    params: ClassVar[dict[str, Any]] = {"knowledge": None}
    _texts: dict[str, str] | None = None

    def _pages(self) -> dict[str, str]:
        if self.options["knowledge"] is None:
            return {}
        if self._texts is None:
            self._texts = page_texts(self.options["knowledge"])
        return self._texts


@register("hallulens_nonexistent")
class HalluLensNonExistent(_HalluLensAnswers):
    scenario = "qa_open"
    task_type = "long_form"
    local_names = ("nonexistent",)
